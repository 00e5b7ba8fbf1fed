#!/usr/bin/env python3
"""Evaluation step of the "2-to-2" setup (Iida et al., 2019, Section 4.1): keep only the
part after the <CONCAT> marker of each line before scoring.

A line without the marker is kept whole (the first sentence of a document, or a
hypothesis in which the model produced no marker). If the marker occurs more than
once, the part after the LAST one is kept (the current sentence is always last).

Usage:
    strip_concat_context.py HYP REF -o HYP.stripped REF.stripped
    strip_concat_context.py HYP -o -        # to stdout
Several inputs (hypotheses and references) must have the same number of lines:
they are checked for alignment before anything is written. Outputs are written to
temporary files and renamed into place; nothing is written on error (exit status 1).
"""
import argparse
import os
import re
import sys
from typing import List, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_concat_context import MARKER, CorpusError, read_lines, write_atomically  # noqa: E402


def strip_context(line: str, marker: str = MARKER) -> str:
    """The part after the last whitespace-delimited marker; the whole line if there is none."""
    matches = list(re.finditer(r"(?:^|\s)" + re.escape(marker) + r"(?=\s|$)", line))
    if not matches:
        return line
    return line[matches[-1].end() :].strip()


def strip_files(inputs: Sequence[str], marker: str = MARKER) -> List[List[str]]:
    contents = [read_lines(path) for path in inputs]
    lengths = {path: len(lines) for path, lines in zip(inputs, contents)}
    if len(set(lengths.values())) > 1:
        raise CorpusError(f"inputs are not aligned (line counts differ): {lengths}")
    return [[strip_context(line, marker) for line in lines] for lines in contents]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    sys.exit(main())
