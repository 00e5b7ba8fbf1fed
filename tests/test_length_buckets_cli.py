"""fairseq-ctx-length-buckets (fairseq_ctx/evaluation/length_buckets.py): bad inputs are refused
with one error (exit status 2) before anything is computed or written; the table is right
for good ones."""
import os

import pytest

from fairseq_ctx import cli
from fairseq_ctx.evaluation import length_buckets

SOURCE = ["a b c", "a b c d e f g", "one two", "x y z w v u t s r q p"]
REFS = ["the cat sat .", "a dog ran far away .", "hello there", "it is a long sentence , is it not ?"]
HYPS = ["the cat sat .", "a dog ran away .", "hello", "it is a long sentence , is not it ?"]


@pytest.fixture
def files(tmp_path):
    def write(name, lines):
        path = tmp_path / name
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return str(path)

    return {"source": write("test.de", SOURCE), "ref": write("test.en", REFS), "hyp": write("hyp.en", HYPS),
            "short": write("short.en", HYPS[:3]), "out": str(tmp_path / "out"), "write": write}


def run(files, *extra, src="de", tgt="en", systems=None):
    systems = [f"a={files['hyp']}"] if systems is None else systems
    argv = ["--source", files["source"], "--ref", files["ref"], "--src", src, "--tgt", tgt,
            "--out-dir", files["out"], *sum((["--system", s] for s in systems), []), *extra]
    return cli.length_buckets(argv)


def refused(capsys, files, *extra, **kw):
    """The command stops with one error (exit 2) and writes nothing; returns the error line."""
    with pytest.raises(SystemExit) as info:
        run(files, *extra, **kw)
    assert info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert not os.path.exists(files["out"])
    return errors[0]


def test_the_table_of_two_systems(files, capsys):
    assert run(files, "--width", "5", systems=[f"a={files['hyp']}", f"ref={files['ref']}"]) == 0
    table = open(files["out"] + "/length_buckets.md", encoding="utf-8").read()
    assert "| sentence length | 0-4 | 5-9 | 10-14 |" in table
    assert "| number of sentences | 2 | 1 | 1 |" in table
    assert "| ref | 100.0 | 100.0 | 100.0 |" in table and "\n| a |" in table


def test_a_repeated_system_name_is_refused(files, capsys):
    # fault: the second system silently replaced the first (one row, exit status 0)
    line = refused(capsys, files, systems=[f"a={files['hyp']}", f"a={files['ref']}"])
    assert "'a' is given twice" in line


@pytest.mark.parametrize("spec, says", [("={hyp}", "has no name"), (" ={hyp}", "has no name"),
                                        ("{hyp}", "expected NAME=HYP"), ("a=", "no hypothesis file")])
def test_a_system_without_a_name_or_a_file_is_refused(files, capsys, spec, says):
    # fault: "=HYP" gave a row without a label, a spec without "=" FileNotFoundError: ''
    line = refused(capsys, files, systems=[spec.format(hyp=files["hyp"])])
    assert says in line


def test_a_missing_file_is_refused(files, capsys):
    # fault: a FileNotFoundError traceback (after the source had been tokenised)
    line = refused(capsys, files, systems=[f"a={files['hyp']}", "b=/nonexistent/hyp.en"])
    assert "no such file: --system b /nonexistent/hyp.en" in line


@pytest.mark.parametrize("width", ["0", "-5"])
def test_a_width_below_one_is_refused(files, capsys, width):
    # fault: --width -5 gave headers like "5--1" (exit 0), --width 0 a ZeroDivisionError
    assert f"--width must be >= 1, got {width}" in refused(capsys, files, "--width", width)


def test_files_of_other_lengths_are_refused(files, capsys):
    # fault: ValueError traceback "3 hypotheses but 4 references"
    line = refused(capsys, files, systems=[f"a={files['short']}"])
    assert "has 4 lines but --system a" in line and "has 3" in line
    short_source = files["write"]("short.de", SOURCE[:3])
    files["source"] = short_source
    assert "--source " + short_source + " has 3" in refused(capsys, files)


@pytest.mark.parametrize("lang, hint", [("xx", ""), ("ZH", "did you mean zh?"), ("zh-CN", "did you mean zh?"),
                                        ("chinese", "did you mean zh?"), ("english", "did you mean en?"),
                                        ("jpn", "did you mean ja?")])
def test_an_unknown_language_code_is_refused(files, capsys, lang, hint):
    # fault: any code other than zh / ja went to the Moses tokeniser silently (Chinese text
    # with --src xx was counted as one word a sentence)
    line = refused(capsys, files, src=lang)
    assert f"--src {lang!r} is not an ISO 639-1 language code" in line and hint in line
    assert "is not an ISO 639-1" in refused(capsys, files, tgt=lang)


def test_the_projects_languages_are_accepted_silently():
    # the data scripts' languages (WMT en-de, en-fr, zh-en; Tatoeba zh-en, ja-en; ASPEC,
    # OpenSubtitles ja-en) and every code sacremoses has rules for
    for lang in ["en", "de", "fr", "zh", "ja", "cs", "ru", "yue"]:
        assert length_buckets.check_language("--src", lang) == (None, None)


def test_a_code_without_moses_rules_warns_and_runs(files, capsys):
    assert run(files, src="ko") == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "--src ko" in warnings[0] and "English nonbreaking prefixes" in warnings[0]
