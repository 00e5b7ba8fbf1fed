"""Reading and writing corpora line by line, with bounded memory and visible progress.

WMT14 En-Fr is ~36M sentence pairs (tens of GB as Python strings): nothing on the road from
archive to binarised data may hold a whole training corpus in memory. Readers here yield one
line at a time from files, gzip streams and archive members; writers go through
fairseq_ctx.atomic so that an interrupted step never leaves a file that looks complete.

Progress: tqdm on stderr for every long step. On a terminal it refreshes every second; in a
batch log (stderr not a TTY, e.g. SLURM) it writes a line at most every minute, so a job that
runs for hours shows where it is without flooding its log (a step done within 5 s prints
nothing there). FAIRSEQ_CTX_PROGRESS=0 silences it.
"""
import codecs
import gzip
import os
import re
import sys
from typing import BinaryIO, Iterable, Iterator

SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)
BLOCK = 1 << 20  # bytes decoded at a time: what a reader holds, whatever the corpus size


def decoded_lines(raw: BinaryIO, name: str) -> Iterator[str]:
    """The lines of a byte stream as the corpora are read: UTF-8 (BOM dropped, undecodable
    bytes replaced), split at "\\n" only, gzip-decompressed when ``name`` ends in .gz; SGM
    files give their <seg> contents (as sacreBLEU reads them, no entity unescaping), other
    files their lines with whitespace runs collapsed to one space."""
    if name.endswith(".gz"):
        raw = gzip.GzipFile(fileobj=raw, mode="rb")
        name = name[:-3]
    text = _text_lines(raw)
    if name.endswith(".sgm"):
        for line in text:
            match = SEG.search(line)
            if match:
                yield match.group(1).strip()
    else:
        for line in text:
            yield " ".join(line.replace("\r", "").split())


def _text_lines(raw: BinaryIO) -> Iterator[str]:
    """Split a byte stream at "\n" while decoding it block by block. (io.TextIOWrapper
    would do, but not over every stream the corpora come in: a tar member read in stream
    mode is not seekable, which TextIOWrapper asks.)"""
    decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
    pending = ""
    for block in iter(lambda: raw.read(BLOCK), b""):
        *lines, pending = (pending + decoder.decode(block)).split("\n")
        yield from lines
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


def file_lines(path: str) -> Iterator[str]:
    """``decoded_lines`` of a file on disk."""
    with open(path, "rb") as handle:
        yield from decoded_lines(handle, path)


def progress(iterable: Iterable, desc: str, unit: str = "lines", total=None):
    """tqdm over ``iterable`` on stderr (see the module docstring for when it prints)."""
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    return tqdm(iterable, desc=desc, unit=unit, total=total, file=sys.stderr,
                mininterval=1.0 if tty else 60.0, delay=0 if tty else 5.0,  # quick steps stay quiet
                dynamic_ncols=tty, unit_scale=True,
                disable=os.environ.get("FAIRSEQ_CTX_PROGRESS", "1") == "0")


def count_lines(path: str) -> int:
    with open(path, "rb") as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))
