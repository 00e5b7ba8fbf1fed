"""Reading and writing corpora line by line, with bounded memory and visible progress.

WMT14 En-Fr is ~36M sentence pairs (tens of GB as Python strings): nothing on the road from
archive to binarised data may hold a whole training corpus in memory. Readers here yield one
line at a time from files, gzip streams and archive members; writers go through
fairseq_ctx.atomic so that an interrupted step never leaves a file that looks complete.

Progress: tqdm on stderr for every long Python step, with a total where one is known (lines
of an input file, bytes of a download). On a terminal the bar refreshes every second (steps
done within a second stay quiet). In a batch log (stderr not a TTY, e.g. SLURM) it writes one
ordinary line per record: the first after a minute, then at most one a minute, and the final
count when the step ends, so a job that runs for hours shows where it is without flooding its
log, and a step done within a minute prints nothing. FAIRSEQ_CTX_PROGRESS=0 silences it.
"""
import codecs
import gzip
import multiprocessing
import os
import re
import sys
from typing import BinaryIO, Callable, Iterable, Iterator, Optional, Sequence

from ..atomic import atomic_write

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


LOG_INTERVAL = 60.0  # seconds between progress records in a batch log (and before the first)


class _LogLines:
    """stderr for tqdm in a batch log: each record on a line of its own (tqdm separates
    them with \r, which a log file keeps as one ever-growing line), repeats dropped."""

    def __init__(self, stream):
        self.stream = stream
        self.last = None

    def write(self, text):
        record = text.replace("\r", "").strip()
        if record and record != self.last:
            self.stream.write(record + "\n")
            self.last = record

    def flush(self):
        self.stream.flush()


def progress(iterable: Optional[Iterable], desc: str, unit: str = "lines", total=None, unit_scale=True):
    """tqdm over ``iterable`` on stderr (see the module docstring for when it prints).
    ``iterable=None`` gives a bar to ``update(n)`` by hand (downloads, checksums)."""
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    return tqdm(iterable, desc=desc, unit=unit, total=total,
                file=sys.stderr if tty else _LogLines(sys.stderr),
                mininterval=1.0 if tty else LOG_INTERVAL, delay=1.0 if tty else LOG_INTERVAL,
                dynamic_ncols=tty, ncols=None if tty else 100, unit_scale=unit_scale,
                disable=os.environ.get("FAIRSEQ_CTX_PROGRESS", "1") == "0")


def file_digest(path: str, algorithm: str) -> str:
    """Hex digest (``hashlib`` name) of a file, read block by block, with a progress bar:
    an archive of tens of GB takes minutes to check."""
    import hashlib

    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle, progress(None, f"{algorithm} {os.path.basename(path)}", unit="B",
                                              total=os.path.getsize(path)) as bar:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def count_lines(path: str) -> int:
    with open(path, "rb") as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))


ROUND_LINES = 20000  # lines per worker per round of parallel_map_lines


def _line_rounds(lines: Iterable[str], size: int) -> Iterator[list]:
    block = []
    for line in lines:
        block.append(line)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def parallel_map_lines(src: str, dst: str, function: Callable[[str], str], desc: str, workers: int = 1,
                       initializer: Optional[Callable] = None, initargs: Sequence = (),
                       round_lines: Optional[int] = None) -> None:
    """Write ``function(line)`` for every line of ``src`` (newline stripped) to ``dst``, in
    order, atomically, on ``workers`` processes, with a progress bar over the line count.

    Streaming: a round of ``workers * round_lines`` lines is read, mapped in parallel and
    written before the next round is read, so memory is bounded by one round whatever the
    file's size (Pool.imap would not do: its feeder thread queues the whole input). A
    worker's exception is raised here and nothing is written to ``dst``. ``initializer``
    runs once per process (in this process too when ``workers == 1``); with the fork start
    method the workers see this module's state as it was at the fork.
    """
    with open(src, encoding="utf-8", newline="\n") as handle, atomic_write(dst) as out:
        lines = progress((line.rstrip("\n") for line in handle), desc, total=count_lines(src))
        round_lines = round_lines or ROUND_LINES
        if workers > 1:
            with multiprocessing.get_context("fork").Pool(workers, initializer, tuple(initargs)) as pool:
                for round_ in _line_rounds(lines, workers * round_lines):
                    chunk = max(1, len(round_) // (4 * workers))
                    out.writelines(line + "\n" for line in pool.map(function, round_, chunksize=chunk))
        else:
            if initializer is not None:
                initializer(*initargs)
            for line in lines:
                out.write(function(line) + "\n")
