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
import os
import sys
from typing import Iterable, List, Optional, Sequence, Tuple

from ..atomic import atomic_write_lines

MARKER = "<CONCAT>"


class CorpusError(Exception):
    """The input corpus is missing or misaligned."""


def read_lines(path: str) -> List[str]:
    if not os.path.isfile(path):
        raise CorpusError(f"input file not found: {path}")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f]


def write_atomically(path: str, lines: Iterable[str]) -> None:
    atomic_write_lines(path, lines)


# -- building ------------------------------------------------------------------------------


def split_documents(
    src: Sequence[str], tgt: Sequence[str], doc_ids: Optional[Sequence[str]] = None
) -> List[List[Tuple[str, str]]]:
    """Group aligned lines into documents (lists of (src, tgt) pairs).

    Boundaries: where ``doc_ids`` changes from the previous line, or (without ``doc_ids``)
    a line blank on BOTH sides; a line blank on one side only is an error."""
    if len(src) != len(tgt):
        raise CorpusError(f"source has {len(src)} lines but target has {len(tgt)}")
    if doc_ids is not None and len(doc_ids) != len(src):
        raise CorpusError(f"doc-ids has {len(doc_ids)} lines but the corpus has {len(src)}")
    documents: List[List[Tuple[str, str]]] = []
    current: List[Tuple[str, str]] = []
    previous_id = None
    for i, (s, t) in enumerate(zip(src, tgt)):
        if doc_ids is not None:
            doc_id = doc_ids[i].strip()
            if doc_id == "":
                raise CorpusError(f"doc-ids line {i + 1} is empty")
            if current and doc_id != previous_id:
                documents.append(current)
                current = []
            previous_id = doc_id
            current.append((s, t))
            continue
        blank_s, blank_t = s.strip() == "", t.strip() == ""
        if blank_s and blank_t:  # document boundary
            if current:
                documents.append(current)
            current = []
        elif blank_s or blank_t:
            side = "source" if blank_s else "target"
            raise CorpusError(f"line {i + 1}: {side} is blank but the other side is not (misaligned corpus)")
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

Input: a document-ordered parallel corpus, one sentence per line (--src/--tgt).
Document boundaries, one of:
  * --doc-ids FILE: one document id per line, aligned with the corpus; a new document
    starts wherever the id changes from the previous line;
  * default: blank lines. A line that is blank on BOTH sides ends a document and is
    not written; a line blank on one side only is an error (misaligned corpus).
Fails (exit status 1, nothing written) on missing files, different line counts or a
one-sided blank line; outputs are written to temporary files and renamed into place.
"""

STRIP_USAGE = """Evaluation step of the 2-to-2 setup: keep only the part after the last
<CONCAT> marker of each line (wherever the marker stands) before scoring.

Usage:
    strip_concat_context.py HYP REF -o HYP.stripped REF.stripped
    strip_concat_context.py HYP -o -        # to stdout
Several inputs must have the same number of lines: they are checked for alignment
before anything is written. Nothing is written on error (exit status 1).
"""


def make_main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=MAKE_USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True, help="document-ordered source sentences, one per line")
    parser.add_argument("--tgt", required=True, help="target sentences aligned with --src")
    parser.add_argument("--doc-ids", help="one document id per line; default: blank lines separate documents")
    parser.add_argument("--out-src", required=True)
    parser.add_argument("--out-tgt", required=True)
    parser.add_argument("--marker", default=MARKER, help=f"joining token (default {MARKER})")
    args = parser.parse_args(argv)
    try:
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
    write_atomically(args.out_src, out_src)
    write_atomically(args.out_tgt, out_tgt)
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
    if len(args.outputs) != len(args.inputs):
        parser.error(f"{len(args.inputs)} inputs but {len(args.outputs)} outputs")
    try:
        stripped = strip_files(args.inputs, args.marker)
    except CorpusError as e:
        print(f"strip_concat_context: error: {e}", file=sys.stderr)
        return 1
    for path, lines in zip(args.outputs, stripped):
        if path == "-":
            sys.stdout.write("".join(line + "\n" for line in lines))
        else:
            write_atomically(path, lines)
    return 0


if __name__ == "__main__":
    _tools = {"make": make_main, "strip": strip_main}
    if len(sys.argv) < 2 or sys.argv[1] not in _tools:
        sys.exit("usage: python -m fairseq_ctx.data.concat_context make|strip [options] (--help)")
    sys.exit(_tools[sys.argv[1]](sys.argv[2:]))
