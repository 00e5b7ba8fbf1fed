"""One process per training directory: an advisory lock (flock) on a file in it.

``fairseq-ctx-reproduce`` (``<cell>/train.lock``), ``fairseq-ctx-quality-compare``
(``<run>/.lock``) and ``fairseq-ctx-train`` (``<save dir>/train.lock``, node 0) hold it while
they train (quality_compare: or score) there, so a second launch (another shell,
a resubmitted job, a second seed set on the same out-dir) fails at once instead of writing
into the same checkpoints. flock rather than an O_EXCL file: the kernel releases it when the
last process holding it is gone (killed, preempted, node lost), so no stale lock has to be
found and removed, on another host either. The trainings they start inherit it
(``held_fds`` -> ``subprocess``'s ``pass_fds``): a driver killed while fairseq-train goes on
leaves the lock held by the training until it ends, so a relaunch cannot start a second
training in the same directory.

Filesystems: on local disks and NFS with lockd (Linux maps flock onto fcntl locks there) it
holds across hosts; a filesystem that refuses flock (ENOLCK, EOPNOTSUPP: NFS without lockd,
Lustre without ``-o flock``) gets a warning and no lock, as before locks existed; one mounted
with node-local locks (NFS ``local_lock=flock``, Lustre ``localflock``) protects within a node
only. The file is left in place when released (unlinking a locked file would let a third
process lock a new inode beside a second one's lock on the old); it names the last holder.
"""
import errno
import fcntl
import os
import socket
import sys

_HELD = {}  # directory -> open lock file, while held by this process
_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class RunInUse(RuntimeError):
    """The directory is held by another process (``holder``: what its lock file names)."""

    def __init__(self, message, holder=None):
        super().__init__(message)
        self.holder = holder


class RunLock:
    """``inherited``: whether held_fds hands it to the subprocesses that write under DIRECTORY
    (False for a lock that guards something else than the directory's trainings: a report);
    ``guards``: what a filesystem without locks leaves unguarded (its warning)."""

    def __init__(self, directory, name, inherited=True,
                 guards="a second launch from training in the same directory"):
        self.directory = os.path.abspath(directory)
        self.path = os.path.join(self.directory, name)
        self.inherited = inherited
        self.guards = guards
        self._handle = None

    def acquire(self):
        os.makedirs(self.directory, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise RunInUse(f"{self.directory} is in use by {holder}", holder) from None
        except OSError as error:
            if error.errno not in _UNSUPPORTED:
                handle.close()
                raise
            handle.close()
            print(f"warning: {self.path}: this filesystem refuses locks ({os.strerror(error.errno)}): nothing "
                  f"stops {self.guards}", file=sys.stderr, flush=True)
            return self
        handle.truncate(0)
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        self._handle = handle
        if self.inherited:
            _HELD[self.directory] = handle
        return self

    def release(self):
        if self._handle is not None:
            if self.inherited:
                _HELD.pop(self.directory, None)
            self._handle.close()  # the lock stays held while a child that inherited it runs
            self._handle = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def held_fds(path):
    """The file descriptors of the locks this process holds on ``path`` or a directory above
    it: pass them to a subprocess that writes there (``pass_fds``), so that it holds them too."""
    path = os.path.abspath(path)
    return tuple(handle.fileno() for directory, handle in list(_HELD.items())
                 if path == directory or path.startswith(directory + os.sep))
