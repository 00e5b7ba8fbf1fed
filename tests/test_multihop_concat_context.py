"""The 2-to-2 extended-context data tool and its evaluation step (Iida et al. 2019, Sec. 4.1)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
import make_concat_context  # noqa: E402
import strip_concat_context  # noqa: E402

from fairseq_ctx.data import concat_context  # noqa: E402


def run(script, *args):
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), *map(str, args)], capture_output=True, text=True
    )


def write(path: Path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read(path: Path):
    return path.read_text(encoding="utf-8").splitlines()


def test_blank_lines_separate_documents_and_first_sentence_stands_alone(tmp_path):
    src = write(tmp_path / "src", ["a1", "a2", "a3", "", "b1", "b2"])
    tgt = write(tmp_path / "tgt", ["A1", "A2", "A3", "", "B1", "B2"])
    res = run("make_concat_context.py", "--src", src, "--tgt", tgt,
              "--out-src", tmp_path / "o.src", "--out-tgt", tmp_path / "o.tgt")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert read(tmp_path / "o.src") == ["a1", "a1 <CONCAT> a2", "a2 <CONCAT> a3", "b1", "b1 <CONCAT> b2"]
    assert read(tmp_path / "o.tgt") == ["A1", "A1 <CONCAT> A2", "A2 <CONCAT> A3", "B1", "B1 <CONCAT> B2"]


def test_doc_ids_file_gives_boundaries_where_the_id_changes(tmp_path):
    src = write(tmp_path / "src", ["a1", "a2", "b1", "c1", "c2"])
    tgt = write(tmp_path / "tgt", ["A1", "A2", "B1", "C1", "C2"])
    ids = write(tmp_path / "ids", ["d1", "d1", "d2", "d3", "d3"])
    res = run("make_concat_context.py", "--src", src, "--tgt", tgt, "--doc-ids", ids,
              "--out-src", tmp_path / "o.src", "--out-tgt", tmp_path / "o.tgt")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert read(tmp_path / "o.src") == ["a1", "a1 <CONCAT> a2", "b1", "c1", "c1 <CONCAT> c2"]
    assert read(tmp_path / "o.tgt") == ["A1", "A1 <CONCAT> A2", "B1", "C1", "C1 <CONCAT> C2"]


@pytest.mark.parametrize(
    "src_lines,tgt_lines,ids,message",
    [
        (["a", "b"], ["A"], None, "source has 2 lines but target has 1"),
        (["a", "", "b"], ["A", "X", "B"], None, "line 2: source is blank"),
        (["a", "b"], ["A", "B"], ["d1"], "doc-ids has 1 lines"),
        (["a <CONCAT> b"], ["A"], None, "already contains the marker"),
        (["a", "b<CONCAT>c"], ["A", "B"], None, "line 2 already contains the marker"),
    ],
)
def test_misaligned_input_fails_loudly_and_writes_nothing(tmp_path, src_lines, tgt_lines, ids, message):
    src, tgt = write(tmp_path / "src", src_lines), write(tmp_path / "tgt", tgt_lines)
    extra = ["--doc-ids", write(tmp_path / "ids", ids)] if ids else []
    out_src, out_tgt = tmp_path / "o.src", tmp_path / "o.tgt"
    res = run("make_concat_context.py", "--src", src, "--tgt", tgt, *extra, "--out-src", out_src, "--out-tgt", out_tgt)
    assert res.returncode == 1
    assert message in res.stderr
    assert not out_src.exists() and not out_tgt.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["src", "tgt"] + (["ids"] if ids else []))


def test_missing_input_file_fails_loudly(tmp_path):
    tgt = write(tmp_path / "tgt", ["A"])
    res = run("make_concat_context.py", "--src", tmp_path / "nope", "--tgt", tgt,
              "--out-src", tmp_path / "o.src", "--out-tgt", tmp_path / "o.tgt")  # fmt: skip
    assert res.returncode == 1 and "input file not found" in res.stderr
    assert not (tmp_path / "o.src").exists()


def test_atomic_write_leaves_old_output_when_writing_fails(tmp_path, monkeypatch):
    out = write(tmp_path / "out", ["old"])

    def failing_lines():
        yield "new"
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        make_concat_context.write_atomically(str(out), failing_lines())
    assert read(out) == ["old"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary file left behind


def test_importing_the_wrappers_leaves_the_environment_alone():
    # FAIRSEQ_CTX_NO_MODELS is for the command-line runs only: an importer's subprocesses
    # (fairseq-train --user-dir) must still register the models
    assert "FAIRSEQ_CTX_NO_MODELS" not in os.environ


def test_strip_keeps_part_after_last_marker_and_lines_without_marker_whole():
    strip = concat_context.strip_context
    assert strip_concat_context.strip_context is strip  # the script is a wrapper of the package
    assert strip("a b <CONCAT> c d") == "c d"
    assert strip("x <CONCAT> y <CONCAT> z") == "z"
    assert strip("no marker here") == "no marker here"
    assert strip("a <CONCAT>") == ""


@pytest.mark.parametrize("line,expected", [
    # after `--remove-bpe sentencepiece` the marker piece has no word boundary of its own
    ("foo<CONCAT>bar baz", "bar baz"),
    ("<CONCAT>bar", "bar"),
    ("previous sentence foo<CONCAT>", ""),
    ("a<CONCAT> b <CONCAT>c d", "c d"),  # the LAST marker, glued or not
    ("\u524d\u306e\u6587\u3002<CONCAT>\u4eca\u306e\u6587\u3002", "\u4eca\u306e\u6587\u3002"),
])
def test_strip_finds_a_marker_glued_to_words(line, expected):
    assert concat_context.strip_context(line) == expected


def test_evaluation_strips_sentencepiece_decoded_hypotheses_through_the_package():
    from fairseq_ctx.evaluation.command import strip_concat

    # what fairseq's sentencepiece removal makes of "\u2581prev <CONCAT> \u2581cur \u2581words"
    decoded = "\u2581prev <CONCAT> \u2581cur \u2581words".replace(" ", "").replace("\u2581", " ").strip()
    assert decoded == "prev<CONCAT> cur words"
    assert strip_concat([decoded, "first sentence"]) == ["cur words", "first sentence"]


def test_strip_cli_round_trips_the_concat_tool(tmp_path):
    src = write(tmp_path / "src", ["a1", "a2", "", "b1"])
    tgt = write(tmp_path / "tgt", ["A1", "A2", "", "B1"])
    assert run("make_concat_context.py", "--src", src, "--tgt", tgt,
               "--out-src", tmp_path / "c.src", "--out-tgt", tmp_path / "c.tgt").returncode == 0  # fmt: skip
    res = run("strip_concat_context.py", tmp_path / "c.tgt", tmp_path / "c.src",
              "-o", tmp_path / "s.tgt", tmp_path / "s.src")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert read(tmp_path / "s.tgt") == ["A1", "A2", "B1"]  # the original sentences, in order
    assert read(tmp_path / "s.src") == ["a1", "a2", "b1"]


def test_strip_rejects_misaligned_hypotheses_and_references(tmp_path):
    hyp = write(tmp_path / "hyp", ["a <CONCAT> b", "c"])
    ref = write(tmp_path / "ref", ["b"])
    res = run("strip_concat_context.py", hyp, ref, "-o", tmp_path / "h", tmp_path / "r")
    assert res.returncode == 1 and "not aligned" in res.stderr
    assert not (tmp_path / "h").exists() and not (tmp_path / "r").exists()
    res = run("strip_concat_context.py", tmp_path / "missing", "-o", tmp_path / "h")
    assert res.returncode == 1 and "input file not found" in res.stderr
    assert sorted(os.listdir(tmp_path)) == ["hyp", "ref"]
