"""torch.save to a temporary sibling, renamed into place only when complete."""
import os
import tempfile

import torch


def atomic_torch_save(obj, path):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="partial-", suffix=".pt.tmp", dir=directory)  # torch rejects dot-files
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
