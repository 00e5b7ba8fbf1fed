"""The one home of atomic writes: an interrupted run never leaves an output that looks complete.

Every writer goes through :func:`atomic_path`: it hands out a temporary sibling of the
destination (same directory, so the final ``os.replace`` is atomic on POSIX), renames it over
the destination only when the body finished, and removes it otherwise. (The resumable
download in ``data/download.py`` keeps its ``.part`` file on failure on purpose: it is
resumed, not discarded.)
"""
import contextlib
import os
import tempfile


@contextlib.contextmanager
def atomic_path(path, suffix=".tmp"):
    """Yield a temporary path beside ``path``; rename it over ``path`` only on success.

    ``suffix`` lets writers that infer the format from the name (torch.save is fine,
    matplotlib's savefig is not) get a name they accept, e.g. ``suffix=".png"``.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # no leading dot: torch.save rejects dot-files on some versions
    fd, tmp = tempfile.mkstemp(prefix=f"partial-{os.path.basename(path)}.", suffix=suffix, dir=directory)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600: results must be readable as open() would make them
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_write(path, mode="w", encoding="utf-8"):
    """Open a temporary sibling of ``path`` for writing; it replaces ``path`` only on success."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle


def atomic_write_lines(path, lines):
    """Write an iterable of lines (without newlines), streaming, atomically."""
    with atomic_write(path) as handle:
        for line in lines:
            handle.write(line + "\n")


def atomic_torch_save(obj, path):
    import torch  # only the checkpoint writers need torch; data preparation does not

    with atomic_path(path, suffix=".pt") as tmp:
        torch.save(obj, tmp)
