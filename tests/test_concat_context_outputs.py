"""fairseq-ctx-make-concat-context / fairseq-ctx-strip-concat-context (fairseq_ctx/data/concat_context.py)
after the first-use review: every output or none, no output over an input or over another
output, --doc-ids held to the same blank-line checks, a marker that stays one token, and one
message (no traceback) for a non-UTF-8 or directory input. In-process: no subprocess needed."""
import os

import pytest

from fairseq_ctx.data import concat_context


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read(path):
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture
def corpus(tmp_path):
    """Three sentence pairs of one document (no blank line), in tmp_path."""
    return write(tmp_path / "s3", ["a", "b", "c"]), write(tmp_path / "t3", ["A", "B", "C"])


def make(capsys, *argv):
    """make_main's exit status and its stderr."""
    status = concat_context.make_main([str(a) for a in argv])
    return status, capsys.readouterr().err


def strip(capsys, *argv):
    status = concat_context.strip_main([str(a) for a in argv])
    return status, capsys.readouterr().err


def one_error(err):
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- 1. all outputs or none ----------------------------------------------------------------------


@pytest.mark.parametrize("second", ["file", "directory"])
def test_make_writes_no_output_when_the_second_cannot_be_written(tmp_path, corpus, capsys, second):
    """--out-tgt under a file (FileExistsError traceback) or naming a directory left o.src behind."""
    src, tgt = corpus
    (tmp_path / "d").mkdir()
    bad = src / "o.tgt" if second == "file" else tmp_path / "d"
    status, err = make(capsys, "--src", src, "--tgt", tgt, "--out-src", tmp_path / "o.src", "--out-tgt", bad)
    line = one_error(err)
    assert status == 1, err
    assert ("is not a directory" if second == "file" else "is a directory") in line, line
    assert sorted(os.listdir(tmp_path)) == ["d", "s3", "t3"]  # no o.src, no temporary
    assert os.listdir(tmp_path / "d") == []


def test_strip_writes_no_output_when_the_second_cannot_be_written(tmp_path, corpus, capsys):
    hyp, ref = corpus
    status, err = strip(capsys, hyp, ref, "-o", tmp_path / "h", hyp / "r")
    assert status == 1 and "is not a directory" in one_error(err)
    assert sorted(os.listdir(tmp_path)) == ["s3", "t3"]


def test_an_error_while_writing_leaves_no_output_and_no_temporary(tmp_path, monkeypatch):
    """Past the up-front checks (a full disk, say): the first output is published only with the second."""
    old = write(tmp_path / "out1", ["old"])

    def failing():
        yield "new"
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        concat_context.write_all_atomically([(str(old), ["x", "y"]), (str(tmp_path / "out2"), failing())])
    assert read(old) == ["old"]
    assert os.listdir(tmp_path) == ["out1"]


def test_make_creates_a_missing_output_folder_as_before(tmp_path, corpus, capsys):
    src, tgt = corpus
    status, err = make(capsys, "--src", src, "--tgt", tgt, "--out-src", tmp_path / "new" / "o.src",
                       "--out-tgt", tmp_path / "o.tgt")
    assert status == 0, err
    assert read(tmp_path / "new" / "o.src") == ["a", "a <CONCAT> b", "b <CONCAT> c"]


# -- 2. no output over another output or over an input ------------------------------------------------


@pytest.mark.parametrize("case", ["same name", "same file", "the source", "the doc ids", "a hard link"])
def test_make_refuses_outputs_that_are_one_file_or_an_input(tmp_path, corpus, capsys, case):
    """--out-src o.s --out-tgt o.s kept the target side only, with exit status 0."""
    src, tgt = corpus
    ids = write(tmp_path / "ids", ["d1", "d1", "d1"])
    os.link(ids, tmp_path / "ids.link")
    out_src, out_tgt = {
        "same name": ("o.s", "o.s"),
        "same file": ("o.s", os.path.join("..", tmp_path.name, "o.s")),
        "the source": ("o.s", "s3"),
        "the doc ids": ("ids", "o.t"),
        "a hard link": ("o.s", "ids.link"),
    }[case]
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    status, err = make(capsys, "--src", src, "--tgt", tgt, "--doc-ids", ids,
                       "--out-src", tmp_path / out_src, "--out-tgt", tmp_path / out_tgt)
    assert status == 1 and "is the same file as" in one_error(err), err
    assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before


def test_strip_refuses_one_output_for_the_hypotheses_and_the_references(tmp_path, capsys):
    """`strip hyp ref -o same same` left the stripped references only: BLEU 100 against themselves."""
    hyp = write(tmp_path / "hyp", ["x <CONCAT> h1", "h2"])
    ref = write(tmp_path / "ref", ["r1", "r2"])
    status, err = strip(capsys, hyp, ref, "-o", tmp_path / "same", tmp_path / "same")
    assert status == 1 and "is the same file as output" in one_error(err)
    status, err = strip(capsys, hyp, "-o", hyp)
    assert status == 1 and "is the same file as input" in one_error(err)
    assert sorted(os.listdir(tmp_path)) == ["hyp", "ref"] and read(hyp) == ["x <CONCAT> h1", "h2"]
    status, err = strip(capsys, hyp, ref, "-o", tmp_path / "h", tmp_path / "r")  # what works still works
    assert status == 0, err
    assert read(tmp_path / "h") == ["h1", "h2"] and read(tmp_path / "r") == ["r1", "r2"]


def test_strip_to_stdout_is_not_a_file(tmp_path, capsys):
    hyp = write(tmp_path / "hyp", ["x <CONCAT> h1", "h2"])
    assert concat_context.strip_main([str(hyp), "-o", "-"]) == 0
    assert capsys.readouterr().out == "h1\nh2\n"


def test_two_outputs_to_stdout_are_refused(tmp_path, capsys):
    """`strip HYP REF -o - -` wrote the references after the hypotheses into one stream."""
    hyp, ref = write(tmp_path / "hyp", ["x <CONCAT> h1"]), write(tmp_path / "ref", ["y <CONCAT> r1"])
    status, err = strip(capsys, hyp, ref, "-o", "-", "-")
    assert status == 1 and "only one output can be '-'" in one_error(err)
    assert capsys.readouterr().out == ""


def test_lines_are_split_as_the_preparation_steps_split_them(tmp_path, corpus, capsys):
    """At "\n" only, a BOM dropped, a CRLF ending taken off (the BOM stayed in the first sentence);
    a lone "\r" inside a sentence is refused: text mode split it in two here, one side then a line
    longer, and fairseq-preprocess (text mode too) would split it where the tool had not."""
    path = tmp_path / "side"
    path.write_bytes("\ufeffone\r\ntwo\nthree".encode("utf-8"))
    assert concat_context.read_lines(str(path)) == ["one", "two", "three"]
    src, tgt = corpus
    src.write_bytes(b"a\nb \r b2\nc\n")
    status, err = make(capsys, "--src", src, "--tgt", tgt, "--out-src", tmp_path / "o.s", "--out-tgt", tmp_path / "o.t")
    assert status == 1 and "line 2 holds a carriage return inside the sentence" in one_error(err)
    assert not (tmp_path / "o.s").exists()


# -- 3. --doc-ids: the blank-line checks of the default mode ---------------------------------------------


@pytest.mark.parametrize("src_lines,tgt_lines,message", [
    (["a", "", "c"], ["A", "B", "C"], "line 2: source is blank but the other side is not"),
    (["a", "b", "c"], ["A", "B", " "], "line 3: target is blank but the other side is not"),
    (["a", "", "c"], ["A", "", "C"], "line 2 is blank on both sides: with --doc-ids"),
])
def test_doc_ids_mode_refuses_blank_lines(tmp_path, capsys, src_lines, tgt_lines, message):
    """With --doc-ids a blank line was written as half-empty pairs ("a <CONCAT> ") with exit status 0."""
    src, tgt = write(tmp_path / "src", src_lines), write(tmp_path / "tgt", tgt_lines)
    ids = write(tmp_path / "ids", ["d1", "d1", "d1"])
    status, err = make(capsys, "--src", src, "--tgt", tgt, "--doc-ids", ids,
                       "--out-src", tmp_path / "o.src", "--out-tgt", tmp_path / "o.tgt")
    assert status == 1 and message in one_error(err), err
    assert sorted(os.listdir(tmp_path)) == ["ids", "src", "tgt"]


def test_without_doc_ids_a_line_blank_on_both_sides_still_ends_a_document():
    docs = concat_context.split_documents(["a", "", "c"], ["A", "", "C"])
    assert docs == [[("a", "A")], [("c", "C")]]


# -- 4. the marker stays one token -----------------------------------------------------------------------------


@pytest.mark.parametrize("marker", ["", " ", "<A B>", "<CONCAT>\t"])
@pytest.mark.parametrize("tool", ["make", "strip"])
def test_an_empty_or_whitespace_marker_is_refused_at_parsing(tmp_path, corpus, capsys, marker, tool):
    """strip --marker '' blanked every line with exit status 0; make said "already contains the marker"."""
    src, tgt = corpus
    argv = (["--src", src, "--tgt", tgt, "--out-src", tmp_path / "o.s", "--out-tgt", tmp_path / "o.t"]
            if tool == "make" else [src, "-o", tmp_path / "o.s"])
    main = concat_context.make_main if tool == "make" else concat_context.strip_main
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in argv] + ["--marker", marker])
    assert exit_.value.code == 2
    assert "--marker must be one non-empty token without whitespace" in one_error(capsys.readouterr().err)
    assert sorted(os.listdir(tmp_path)) == ["s3", "t3"]


def test_another_one_token_marker_is_used(tmp_path, corpus, capsys):
    src, tgt = corpus
    status, err = make(capsys, "--src", src, "--tgt", tgt, "--out-src", tmp_path / "o.s",
                       "--out-tgt", tmp_path / "o.t", "--marker", "<SEP>")
    assert status == 0, err
    assert read(tmp_path / "o.s") == ["a", "a <SEP> b", "b <SEP> c"]


# -- 5. inputs: one message, no traceback -----------------------------------------------------------------------


def test_a_non_utf8_input_is_one_message(tmp_path, corpus, capsys):
    src, tgt = corpus
    bad = tmp_path / "bad"
    bad.write_bytes("a\n".encode() + "\u4e2d\u6587\n".encode("gb18030") + b"c\n")
    status, err = make(capsys, "--src", bad, "--tgt", tgt, "--out-src", tmp_path / "o.s", "--out-tgt", tmp_path / "o.t")
    line = one_error(err)
    assert status == 1 and "not valid UTF-8" in line and "line 2" in line and "iconv" in line, line
    status, err = strip(capsys, bad, "-o", tmp_path / "o.s")
    assert status == 1 and "not valid UTF-8" in one_error(err)
    assert not (tmp_path / "o.s").exists() and not (tmp_path / "o.t").exists()


def test_a_directory_input_is_called_a_directory(tmp_path, corpus, capsys):
    """--src /tmp said "input file not found: /tmp"."""
    _, tgt = corpus
    status, err = make(capsys, "--src", tmp_path, "--tgt", tgt, "--out-src", tmp_path / "o.s",
                       "--out-tgt", tmp_path / "o.t")
    line = one_error(err)
    assert status == 1 and "is a directory" in line and "not found" not in line, line
    status, err = make(capsys, "--src", tmp_path / "nope", "--tgt", tgt, "--out-src", tmp_path / "o.s",
                       "--out-tgt", tmp_path / "o.t")
    assert status == 1 and "input file not found" in one_error(err)
