"""Write files so that an interrupted run never leaves an output that looks complete."""
import contextlib
import os
import tempfile


@contextlib.contextmanager
def atomic_write(path, mode="w", encoding="utf-8"):
    """Open a temporary sibling of ``path``; rename it over ``path`` only on success."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".partial-", dir=directory)
    os.close(fd)
    try:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
