"""The "2-to-2" extended-context setup of Iida et al. (2019), Section 4.1 (after
Tiedemann and Scherrer, 2017): build the corpus, and strip the context before scoring.

Building: every sentence pair is joined with the PREVIOUS pair of the same document, on
both sides: "<previous> <CONCAT> <current>". The first sentence of a document has no
previous sentence and is written alone (no marker). Run it on text that is already
tokenized / subword-segmented (or protect the marker, e.g. SentencePiece
--user_defined_symbols='<CONCAT>'), so that the marker stays one token.

Scoring: only the part after the LAST marker counts (the current sentence is always
last). The marker is found wherever it stands: after SentencePiece decoding
(``--remove-bpe sentencepiece``) it is usually glued to a neighbouring word
(``foo<CONCAT>bar``, ``<CONCAT>bar``, ``foo<CONCAT>``), because the marker piece carries
no word-boundary symbol. A line without the marker is kept whole (the first sentence of
a document, or a hypothesis in which the model produced no marker).

Command-line tools: fairseq-ctx-make-concat-context and fairseq-ctx-strip-concat-context
(:func:`make_main`, :func:`strip_main`; scripts/make_concat_context.py and
scripts/strip_concat_context.py in a checkout), or ``python -m fairseq_ctx.data.concat_context
make|strip ...`` (what the data-preparation scripts run).
"""
import argparse
import contextlib
import os
import sys
from typing import Iterable, List, Optional, Sequence, Tuple

from ..atomic import atomic_path, atomic_write_lines
from .streaming import CarriageReturnInside, lines_of

MARKER = "<CONCAT>"


class CorpusError(Exception):
    """The input corpus is missing or misaligned."""


def read_lines(path: str) -> List[str]:
    """The lines of a UTF-8 file; a missing file, a directory or another encoding is a CorpusError."""
    if os.path.isdir(path):
        raise CorpusError(f"input {path} is a directory, not a file")
    if not os.path.exists(path):
        raise CorpusError(f"input file not found: {path}")
    try:
        # split at "\n" only, a BOM dropped, as the preparation steps read; a "\r" left inside a
        # sentence is refused (text mode split it silently here, and fairseq-preprocess splits
        # there too: the two sides' counts would differ)
        return lines_of(path)
    except UnicodeDecodeError:
        # the wording of the data-preparation steps (fairseq_ctx.data.streaming.NotUtf8Error)
        raise CorpusError(f"{path}: not valid UTF-8 (first at {_first_invalid_line(path)}): is it in another "
                          "encoding? Convert it first, e.g. iconv -f GB18030 -t UTF-8 (Chinese) or -f SHIFT_JIS "
                          "(Japanese)") from None
    except CarriageReturnInside as error:
        raise CorpusError(str(error)) from None
    except OSError as error:
        raise CorpusError(f"cannot read {path}: {error.strerror or error}") from None


def _first_invalid_line(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        return f"line {line}, {error.reason}"
    return "some line"  # the bytes decoded after all (the file changed meanwhile)


def write_atomically(path: str, lines: Iterable[str]) -> None:
    atomic_write_lines(path, lines)


def check_outputs(outputs: Sequence[str], inputs: Sequence[str]) -> None:
    """Refuse, before any work, outputs that could not be written or that would overwrite one
    another or an input: each must not be a directory, the nearest existing folder above it
    must be a directory (missing folders are created, as every writer here does), and no
    output may be the same file as an input or another output (by real path, or the same
    inode where both exist). ``-`` (stdout) is not a file and is not checked."""
    if list(outputs).count("-") > 1:
        raise CorpusError("only one output can be '-' (stdout): the others would follow it into the same stream")
    seen = {os.path.realpath(path): f"input {path}" for path in inputs if path != "-"}  # real path -> its name
    for path in outputs:
        if path == "-":
            continue
        if os.path.isdir(path):
            raise CorpusError(f"output {path} is a directory")
        folder = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(folder):
            folder = os.path.dirname(folder)
        if not os.path.isdir(folder):
            raise CorpusError(f"output {path}: {folder} is not a directory")
        real = os.path.realpath(path)
        same = seen.get(real)
        if same is None and os.path.exists(path):
            same = next((named for other, named in seen.items()
                         if os.path.exists(other) and os.path.samefile(other, path)), None)
        if same is not None:
            raise CorpusError(f"output {path} is the same file as {same}: every output must be a "
                              "file of its own, neither an input nor another output")
        seen[real] = f"output {path}"


def write_all_atomically(outputs: Sequence[Tuple[str, Iterable[str]]]) -> None:
    """Write every (path, lines) to a temporary file beside its path and rename them all into
    place only once every one is written: an error leaves none of them (and no temporary).
    ``-`` writes to stdout, at once (what reached stdout before an error stays there)."""
    with contextlib.ExitStack() as stack:  # an error discards every temporary
        for path, lines in outputs:
            if path == "-":
                sys.stdout.write("".join(line + "\n" for line in lines))
                continue
            tmp = stack.enter_context(atomic_path(path))
            with open(tmp, "w", encoding="utf-8") as handle:
                for line in lines:
                    handle.write(line + "\n")


# -- building ------------------------------------------------------------------------------


def split_documents(
    src: Sequence[str], tgt: Sequence[str], doc_ids: Optional[Sequence[str]] = None
) -> List[List[Tuple[str, str]]]:
    """Group aligned lines into documents (lists of (src, tgt) pairs).

    Boundaries: where ``doc_ids`` changes from the previous line, or (without ``doc_ids``)
    a line blank on BOTH sides; a line blank on one side only is an error. With ``doc_ids``
    the ids alone mark documents, so a line blank on both sides is an error too (a blank
    pair would be joined to its neighbours as "previous <CONCAT> " lines)."""
    if len(src) != len(tgt):
        raise CorpusError(f"source has {len(src)} lines but target has {len(tgt)}")
    if doc_ids is not None and len(doc_ids) != len(src):
        raise CorpusError(f"doc-ids has {len(doc_ids)} lines but the corpus has {len(src)}")
    documents: List[List[Tuple[str, str]]] = []
    current: List[Tuple[str, str]] = []
    previous_id = None
    for i, (s, t) in enumerate(zip(src, tgt)):
        blank_s, blank_t = s.strip() == "", t.strip() == ""
        if blank_s != blank_t:
            side = "source" if blank_s else "target"
            raise CorpusError(f"line {i + 1}: {side} is blank but the other side is not (a misaligned corpus, "
                              "or a line the tokeniser emptied: drop such pairs before this step)")
        if doc_ids is not None:
            if blank_s:
                raise CorpusError(f"line {i + 1} is blank on both sides: with --doc-ids the ids mark the documents, "
                                  "not blank lines; remove the line from the corpus and from the doc-ids file")
            doc_id = doc_ids[i].strip()
            if doc_id == "":
                raise CorpusError(f"doc-ids line {i + 1} is empty")
            if current and doc_id != previous_id:
                documents.append(current)
                current = []
            previous_id = doc_id
            current.append((s, t))
            continue
        if blank_s:  # blank on both sides: a document boundary
            if current:
                documents.append(current)
            current = []
        else:
            current.append((s, t))
    if current:
        documents.append(current)
    return documents


def concat_with_previous(
    documents: Iterable[List[Tuple[str, str]]], marker: str = MARKER
) -> Tuple[List[str], List[str]]:
    """2-to-2: each pair joined with the previous pair of its document, on both sides."""
    out_src, out_tgt = [], []
    for document in documents:
        previous = None
        for s, t in document:
            if previous is None:
                out_src.append(s)
                out_tgt.append(t)
            else:
                out_src.append(f"{previous[0]} {marker} {s}")
                out_tgt.append(f"{previous[1]} {marker} {t}")
            previous = (s, t)
    return out_src, out_tgt


# -- scoring ------------------------------------------------------------------------------------


def strip_context(line: str, marker: str = MARKER) -> str:
    """The part after the LAST marker, wherever it stands (also glued to a word, as after
    SentencePiece decoding); the whole line if there is no marker."""
    at = line.rfind(marker)
    if at < 0:
        return line
    return line[at + len(marker):].strip()


def strip_files(inputs: Sequence[str], marker: str = MARKER) -> List[List[str]]:
    contents = [read_lines(path) for path in inputs]
    lengths = {path: len(lines) for path, lines in zip(inputs, contents)}
    if len(set(lengths.values())) > 1:
        raise CorpusError(f"inputs are not aligned (line counts differ): {lengths}")
    return [[strip_context(line, marker) for line in lines] for lines in contents]


# -- command lines ------------------------------------------------------------------------------

MAKE_USAGE = """Build the 2-to-2 extended-context corpus (Iida et al. 2019, Section 4.1).

Input: a document-ordered parallel corpus, one sentence per line (--src/--tgt), UTF-8.
Document boundaries, one of:
  * --doc-ids FILE: one document id per line, aligned with the corpus; a new document
    starts wherever the id changes from the previous line. Every line must hold a
    sentence on both sides: a blank line (on one side or both) is an error;
  * default: blank lines. A line that is blank on BOTH sides ends a document and is
    not written; a line blank on one side only is an error (misaligned corpus).
Fails (exit status 1, nothing written) on a missing, unreadable or non-UTF-8 input,
different line counts, a blank line as above, an input line that already holds the
marker, or outputs that cannot be written (a directory, a path under a file) or that
name the same file as each other or as an input. Both outputs are written to temporary
files beside them and renamed into place only when both are complete. A --marker that is
empty or contains whitespace is refused (exit status 2): it must stay one token.
"""

STRIP_USAGE = """Evaluation step of the 2-to-2 setup: keep only the part after the last
<CONCAT> marker of each line (wherever the marker stands) before scoring.

Usage:
    strip_concat_context.py HYP REF -o HYP.stripped REF.stripped
    strip_concat_context.py HYP -o -        # to stdout
Several inputs must have the same number of lines: they are checked for alignment
before anything is written. Nothing is written on error (exit status 1): a missing,
unreadable or non-UTF-8 input, inputs of different lengths, or outputs that cannot be
written or that name the same file as each other or as an input (a reference stripped
over a hypothesis would score the system against itself). The outputs are written to
temporary files and renamed into place only when every one is complete. A --marker that
is empty or contains whitespace is refused (exit status 2).
"""


def _check_marker(parser: argparse.ArgumentParser, marker: str) -> None:
    if marker == "" or marker.split() != [marker]:
        parser.error(f"--marker must be one non-empty token without whitespace, not {marker!r}")


def make_main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=MAKE_USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True, help="document-ordered source sentences, one per line")
    parser.add_argument("--tgt", required=True, help="target sentences aligned with --src")
    parser.add_argument("--doc-ids", help="one document id per line; default: blank lines separate documents")
    parser.add_argument("--out-src", required=True)
    parser.add_argument("--out-tgt", required=True)
    parser.add_argument("--marker", default=MARKER, help=f"joining token (default {MARKER})")
    args = parser.parse_args(argv)
    _check_marker(parser, args.marker)
    try:
        check_outputs([args.out_src, args.out_tgt], [p for p in (args.src, args.tgt, args.doc_ids) if p])
        src, tgt = read_lines(args.src), read_lines(args.tgt)
        doc_ids = read_lines(args.doc_ids) if args.doc_ids else None
        for side, lines in (("source", src), ("target", tgt)):
            for i, line in enumerate(lines):
                if args.marker in line:  # anywhere: scoring strips at any occurrence
                    raise CorpusError(f"{side} line {i + 1} already contains the marker {args.marker}")
        documents = split_documents(src, tgt, doc_ids)
        out_src, out_tgt = concat_with_previous(documents, args.marker)
    except CorpusError as e:
        print(f"make_concat_context: error: {e}", file=sys.stderr)
        return 1
    write_all_atomically([(args.out_src, out_src), (args.out_tgt, out_tgt)])
    print(
        f"make_concat_context: {len(documents)} documents, {len(out_src)} pairs "
        f"({len(out_src) - len(documents)} with a previous sentence)",
        file=sys.stderr,
    )
    return 0


def strip_main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=STRIP_USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help="hypothesis / reference files, one sentence per line")
    parser.add_argument("-o", "--outputs", nargs="+", required=True, help="one output per input ('-' = stdout)")
    parser.add_argument("--marker", default=MARKER)
    args = parser.parse_args(argv)
    _check_marker(parser, args.marker)
    if len(args.outputs) != len(args.inputs):
        parser.error(f"{len(args.inputs)} inputs but {len(args.outputs)} outputs")
    try:
        check_outputs(args.outputs, args.inputs)
        stripped = strip_files(args.inputs, args.marker)
    except CorpusError as e:
        print(f"strip_concat_context: error: {e}", file=sys.stderr)
        return 1
    write_all_atomically(list(zip(args.outputs, stripped)))
    return 0


if __name__ == "__main__":
    _tools = {"make": make_main, "strip": strip_main}
    if len(sys.argv) < 2 or sys.argv[1] not in _tools:
        sys.exit("usage: python -m fairseq_ctx.data.concat_context make|strip [options] (--help)")
    sys.exit(_tools[sys.argv[1]](sys.argv[2:]))
