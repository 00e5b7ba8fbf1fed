"""Download corpus files into a cache: resumable (HTTP Range), checksummed, atomic.

A download is written to ``<name>.part`` next to its final path and renamed only after
the whole file arrived and (when a sha256 is known) its checksum matched, so a
complete-looking file in the cache is always a verified one. An interrupted transfer
leaves the ``.part`` file behind; the next call resumes it with ``Range: bytes=N-``
(a server that ignores Range answers 200 and the file is fetched again from the start).
A checksum mismatch deletes the ``.part`` file and raises :class:`ChecksumError`.

Transfers use the standard library (urllib; progress bars: tqdm), so offline clusters need nothing extra:
``fetch(..., local=PATH)`` or a pre-filled cache skip the network entirely.

Usage: python -m fairseq_ctx.data.download URL [--sha256 HEX] [--cache DIR] [--name NAME]
"""
import argparse
import os
import shutil
import sys
import urllib.error
import urllib.request

from .streaming import file_digest, progress

CHUNK = 1 << 20


class DownloadError(RuntimeError):
    pass


class ChecksumError(DownloadError):
    pass


def default_cache():
    return os.environ.get("FAIRSEQ_CTX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fairseq-ctx")


def sha256_of(path):
    return file_digest(path, "sha256")


def _verify(path, sha256):
    if sha256:
        actual = sha256_of(path)
        if actual != sha256.lower():
            os.unlink(path)
            raise ChecksumError(f"sha256 mismatch for {path}: expected {sha256.lower()}, got {actual} "
                                "(the partial file was deleted; the next run downloads it again)")


def download(url, dest, sha256=None, timeout=60, max_bytes=None):
    """Fetch ``url`` into ``dest`` (resuming ``dest.part``); returns ``dest``.

    ``max_bytes`` stops after that many bytes of THIS call (used by tests to simulate an
    interrupted transfer: the call raises and the ``.part`` file stays for resumption).
    """
    if os.path.exists(dest):
        return dest
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    part = dest + ".part"
    offset = os.path.getsize(part) if os.path.exists(part) else 0
    request = urllib.request.Request(url, headers={"User-Agent": "fairseq-ctx-download/1"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:  # the .part file is already complete
            response = None
        else:
            raise DownloadError(f"{url}: HTTP {error.code} {error.reason}") from error
    except (urllib.error.URLError, OSError) as error:
        raise DownloadError(f"{url}: {error} (offline? download it elsewhere and pass the local file)") from error
    if response is not None:
        with response:
            status = getattr(response, "status", 200)
            if offset and status != 206:
                offset = 0  # the server ignored Range: start over
            total = response.headers.get("Content-Length")
            total = int(total) + offset if total is not None else None
            written = 0
            with open(part, "ab" if offset else "wb") as out, \
                    progress(None, f"download {os.path.basename(dest)}", unit="B", total=total) as bar:
                bar.update(offset)
                while True:
                    block = response.read(CHUNK if max_bytes is None else min(CHUNK, max_bytes - written))
                    if not block:
                        break
                    out.write(block)
                    written += len(block)
                    bar.update(len(block))
                    if max_bytes is not None and written >= max_bytes:
                        raise DownloadError(f"{url}: stopped after {written} bytes (max_bytes); "
                                            f"{part} is kept for resumption")
            if total is not None and os.path.getsize(part) != total:
                raise DownloadError(f"{url}: got {os.path.getsize(part)} of {total} bytes; "
                                    f"run again to resume from {part}")
    _verify(part, sha256)
    os.replace(part, dest)
    return dest


def fetch(url, sha256=None, cache=None, name=None, local=None):
    """Return a local path for ``url``: ``local`` if given (checked), else the cached copy,
    downloading it first if needed."""
    name = name or os.path.basename(url.split("?")[0])
    if local:
        if not os.path.exists(local):
            raise DownloadError(f"local file not found: {local}")
        if sha256 and sha256_of(local) != sha256.lower():
            raise ChecksumError(f"sha256 mismatch for local file {local} (expected {sha256})")
        return local
    cache = cache or default_cache()
    return download(url, os.path.join(cache, name), sha256=sha256)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--sha256", default=None)
    parser.add_argument("--cache", default=None)
    parser.add_argument("--name", default=None)
    parser.add_argument("--copy-to", default=None, help="also copy the verified file here")
    args = parser.parse_args(argv)
    try:
        path = fetch(args.url, args.sha256, args.cache, args.name)
    except DownloadError as error:
        sys.exit(f"download: {error}")
    if args.copy_to:
        shutil.copyfile(path, args.copy_to)
    print(path)


if __name__ == "__main__":
    main()
