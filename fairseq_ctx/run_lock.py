"""One process per training directory: an advisory lock (flock) on a file in it.

``fairseq-ctx-reproduce`` (``<cell>/train.lock``) and ``fairseq-ctx-quality-compare``
(``<run>/.lock``) hold it while they train or score there, so a second launch (another shell,
a resubmitted job, a second seed set on the same out-dir) fails at once instead of writing
into the same checkpoints. flock rather than an O_EXCL file: the kernel releases it when the
holder dies (killed, preempted, node lost), so no stale lock has to be found and removed,
on another host either; on NFS Linux maps it onto fcntl locks (lockd). The file is left in
place when released (unlinking a locked file lets a third process lock a new inode beside a
second one's lock on the old); it holds the last holder's host and pid, for the message.
"""
import fcntl
import os
import socket


class RunInUse(RuntimeError):
    """The directory is held by another process."""


class RunLock:
    def __init__(self, directory, name):
        self.path = os.path.join(directory, name)
        self._handle = None

    def acquire(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise RunInUse(f"{os.path.dirname(self.path)} is in use by {holder}") from None
        handle.truncate(0)
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        self._handle = handle
        return self

    def release(self):
        if self._handle is not None:
            self._handle.close()  # closing the file releases the flock
            self._handle = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
