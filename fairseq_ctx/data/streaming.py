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

    tqdm.monitor_interval = 0  # no monitor thread: worker processes are forked while bars run
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


ROUND_LINES = 40000  # lines in flight in map_line_blocks (read, not yet returned), whatever the workers


def default_workers() -> int:
    """The CPUs this process may run on (a SLURM job's allocation, taskset), not the node's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _line_blocks(lines: Iterable[str], size: int) -> Iterator[list]:
    block = []
    for line in lines:
        block.append(line)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def map_line_blocks(src: str, block_function: Callable[[list], object], desc: str, workers: int = 1,
                    initializer: Optional[Callable] = None, initargs: Sequence = (),
                    round_lines: Optional[int] = None) -> Iterator:
    """``block_function(lines)`` for consecutive blocks of the lines of ``src`` (split at
    "\n" only, newline stripped), yielded in order, computed on ``workers`` processes, with a
    progress bar over the line count.

    Bounded: at most ``round_lines`` lines (default ROUND_LINES) are read and not yet yielded,
    whatever the number of workers or the file's size (Pool.imap would not do: its feeder
    thread queues the whole input). ``initializer(*initargs)`` runs here first (a failure is
    raised at once, with its own message) and then in every worker. A worker's exception is
    raised here; a worker that dies (OOM killer, segfault) raises BrokenProcessPool instead
    of hanging. ``block_function`` must be picklable (a module-level function or a
    functools.partial of one).
    """
    round_lines = round_lines or ROUND_LINES
    if initializer is not None:
        initializer(*initargs)
    with open(src, encoding="utf-8", newline="\n") as handle:
        lines = progress((line.rstrip("\n") for line in handle), desc, total=count_lines(src))
        if workers <= 1:
            for block in _line_blocks(lines, max(1, round_lines)):
                yield block_function(block)
            return
        import collections
        from concurrent.futures import ProcessPoolExecutor

        in_flight = 2 * workers  # blocks: enough to keep every worker busy while one is written
        block_lines = max(1, round_lines // in_flight)
        pending = collections.deque()
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                 initializer=initializer, initargs=tuple(initargs)) as pool:
            try:
                for block in _line_blocks(lines, block_lines):
                    pending.append(pool.submit(block_function, block))
                    if len(pending) >= in_flight:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:
                for future in pending:
                    future.cancel()


def _map_each(function, lines):
    return [function(line) for line in lines]


def parallel_map_lines(src: str, dst: str, function: Callable[[str], str], desc: str, workers: int = 1,
                       initializer: Optional[Callable] = None, initargs: Sequence = (),
                       round_lines: Optional[int] = None) -> None:
    """Write ``function(line)`` for every line of ``src`` to ``dst``, in order, atomically
    (an error leaves no ``dst``), on ``workers`` processes (:func:`map_line_blocks`).
    Every output line ends with "\n" (also the last, where ``src`` has none)."""
    import functools

    with atomic_write(dst) as out:
        for mapped in map_line_blocks(src, functools.partial(_map_each, function), desc, workers,
                                      initializer, initargs, round_lines):
            out.writelines(line + "\n" for line in mapped)
