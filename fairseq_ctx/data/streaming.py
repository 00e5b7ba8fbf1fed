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
import contextlib
import gzip
import multiprocessing
import os
import re
import signal
import sys
import threading
from typing import BinaryIO, Callable, Iterable, Iterator, List, Optional, Sequence

from ..atomic import atomic_write

SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)
BLOCK = 1 << 20  # bytes decoded at a time: what a reader holds, whatever the corpus size


MAX_INVALID_UTF8 = 0.01  # share of lines with invalid UTF-8 above which a file is refused


class NotUtf8Error(ValueError):
    pass


def decoded_lines(raw: BinaryIO, name: str) -> Iterator[str]:
    """The lines of a byte stream as the corpora are read: UTF-8 (BOM dropped), split at
    "\n" only, gzip-decompressed when ``name`` ends in .gz; SGM files give their <seg>
    contents (as sacreBLEU reads them, no entity unescaping), other files their lines with
    whitespace runs collapsed to one space. Invalid UTF-8: see :func:`_text_lines`."""
    if name.endswith(".gz"):
        raw = gzip.GzipFile(fileobj=raw, mode="rb")
        name = name[:-3]
    text = _text_lines(raw, name)
    if name.endswith(".sgm"):
        for line in text:
            match = SEG.search(line)
            if match:
                yield match.group(1).strip()
    else:
        for line in text:
            yield " ".join(line.replace("\r", "").split())


def _text_lines(raw: BinaryIO, name: str = "input") -> Iterator[str]:
    """Split a byte stream at "\n" and decode it as UTF-8, block by block. (io.TextIOWrapper
    would do, but not over every stream the corpora come in: a tar member read in stream
    mode is not seekable, which TextIOWrapper asks.)

    A file in another encoding (a GBK or Shift-JIS corpus) would otherwise come out as
    U+FFFD garbage with the right line count, which no later check notices: once more than
    MAX_INVALID_UTF8 of the lines read (after the first 1,000, or at the end of a shorter
    file) hold invalid bytes, NotUtf8Error is raised; fewer (a few broken lines in a web
    crawl) are replaced by U+FFFD with one warning on stderr giving their number."""
    pending, lines_read, invalid, first_invalid, start = b"", 0, 0, None, True

    def check(final):
        if invalid and (lines_read >= 1000 or final) and invalid > MAX_INVALID_UTF8 * lines_read:
            raise NotUtf8Error(
                f"{name}: {invalid} of {lines_read} lines read are not valid UTF-8 (first: line "
                f"{first_invalid}): is it in another encoding? Convert it first, e.g. "
                f"iconv -f GB18030 -t UTF-8 (Chinese) or -f SHIFT_JIS (Japanese)")

    def decode(chunk: bytes) -> str:
        nonlocal invalid, first_invalid
        try:
            return chunk.decode("utf-8")
        except UnicodeDecodeError:  # slow path, rare: find the lines
            for index, line in enumerate(chunk.split(b"\n")):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    invalid += 1
                    first_invalid = first_invalid or lines_read + index + 1
            return chunk.decode("utf-8", errors="replace")

    for block in iter(lambda: raw.read(BLOCK), b""):
        if start:
            block, start = (block[len(codecs.BOM_UTF8):] if block.startswith(codecs.BOM_UTF8) else block), False
        head, newline, pending = (pending + block).rpartition(b"\n")
        if newline:  # "\n" never occurs inside a UTF-8 sequence: complete lines decode alone
            lines = decode(head).split("\n")
            lines_read += len(lines)
            check(final=False)
            yield from lines
    if pending:
        line = decode(pending)
        lines_read += 1
        check(final=True)
        yield line
    else:
        check(final=True)
    if invalid:
        print(f"warning: {name}: {invalid} of {lines_read} lines hold invalid UTF-8 bytes, replaced "
              f"by U+FFFD (first: line {first_invalid})", file=sys.stderr)


class CarriageReturnInside(ValueError):
    """A lone "\r" inside a line of a file read whole."""


def lines_of(path: str) -> List[str]:
    """A whole (small) UTF-8 text file's lines: split at "\n", a BOM dropped, a CRLF's "\r" taken
    off each line end. For references, hypotheses, sources and parallel files read whole. A lone
    "\r" inside a line is refused (CarriageReturnInside): fairseq-preprocess (text mode) splits a
    line there, files split at "\n" do not, so which sentence it belongs to is not known; invalid
    UTF-8 raises UnicodeDecodeError."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        lines = handle.read().split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline ending the last line (or an empty file)
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    inside = next((number for number, line in enumerate(lines, 1) if "\r" in line), None)
    if inside is not None:
        raise CarriageReturnInside(f"{path} line {inside} holds a carriage return inside the sentence, where "
                                   "fairseq-preprocess would split it in two: remove them first (tr -d '\\r'; "
                                   "the preparation steps do)")
    return lines


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


def cgroup_cpu_limit(root: str = "/sys/fs/cgroup") -> Optional[int]:
    """The CPUs a container's CPU quota allows, rounded up (docker --cpus, a Kubernetes limit:
    cgroup v2 cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us); None without a quota. The
    quota does not show in the affinity mask: such a container sees every core of its host."""
    try:
        with open(os.path.join(root, "cpu.max")) as handle:
            quota, period = handle.read().split()[:2]
        return None if quota == "max" else max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as handle:
            quota = int(handle.read())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as handle:
            period = int(handle.read())
        return max(1, -(-quota // period)) if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def default_workers() -> int:
    """The CPUs this process may use: its affinity (a SLURM job's allocation, taskset), not the
    node's cores, and at most what a container's CPU quota allows."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return min(cpus, cgroup_cpu_limit() or cpus)


def _line_blocks(lines: Iterable[str], size: int) -> Iterator[list]:
    block = []
    for line in lines:
        block.append(line)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


@contextlib.contextmanager
def _terminate_as_exit():
    """SIGTERM (``kill``, ``timeout``, SLURM's scancel) raises SystemExit here instead of
    ending the process at once, so the workers are shut down and an atomic output's
    temporary file is removed. Only in the main thread, and only where SIGTERM still has its
    default action (a handler someone else installed is left alone)."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminate(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is terminate:  # not someone else's, set meanwhile
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _worker_setup(parent, initializer, initargs):
    """First thing in every worker: die with the parent, then the caller's initializer."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's SystemExit handler
    try:  # Linux: the kernel sends SIGTERM when the parent dies, even by SIGKILL
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    if initializer is not None:
        initializer(*initargs)


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
    of hanging. SIGTERM to this process stops the workers and raises SystemExit here;
    workers die with this process even when it is killed outright. ``block_function`` must
    be picklable (a module-level function or a functools.partial of one).
    """
    round_lines = round_lines or ROUND_LINES
    if initializer is not None:
        initializer(*initargs)
    with _terminate_as_exit(), open(src, encoding="utf-8", newline="\n") as handle:
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
                                 initializer=_worker_setup,
                                 initargs=(os.getpid(), initializer, tuple(initargs))) as pool:
            try:
                for block in _line_blocks(lines, block_lines):
                    pending.append(pool.submit(block_function, block))
                    if len(pending) >= in_flight:
                        yield _result(pending.popleft())
                while pending:
                    yield _result(pending.popleft())
            except BaseException:  # an error, SIGTERM, Ctrl-C, or the consumer stopped reading
                # (the pending futures are failed by the pool once its workers are gone;
                # cancelling them here would make the pool's own thread raise on them)
                _stop_workers(pool)
                raise


def _result(future):
    """``future.result()``, waking up twice a second: a signal delivered to one of the pool's
    threads (a process-directed SIGTERM may land on any thread) runs its Python handler only
    when the main thread next runs Python code, never while it blocks on a lock."""
    while True:
        try:
            return future.result(timeout=0.5)
        except TimeoutError:
            continue


def _stop_workers(pool):
    """Terminate the workers rather than let them finish the blocks they already hold (the
    executor's shutdown would wait for those). ProcessPoolExecutor has no public way before
    Python 3.14 (terminate_workers)."""
    if hasattr(pool, "terminate_workers"):
        pool.terminate_workers()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(5)
    # a worker killed halfway through sending a result leaves the pool's reader thread waiting
    # for the rest of it forever (this process holds the pipe's write end): close that end, so
    # the reader gets end-of-file and the pool's shutdown returns
    with contextlib.suppress(Exception):
        pool._result_queue._writer.close()
    # blocks queued for the dead workers: the queue's feeder thread may be stuck writing one
    # into a full pipe nobody reads; do not wait for it at exit
    with contextlib.suppress(Exception):
        pool._call_queue.cancel_join_thread()


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
