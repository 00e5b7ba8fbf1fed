"""The papers' corpora: where they come from, and how they become raw parallel text.

``python -m fairseq_ctx.data.corpora wmt --corpus wmt14-en-de --outdir RAW [--local-dir DIR]``
writes ``RAW/{train,valid,test}.{src,tgt}`` (one sentence per line, untokenised).

Sources (the papers' setups):
* wmt14-en-de (Yang, Cao, Wang): Europarl v7 + Common Crawl + News Commentary v9
  (the 4.5M-pair set of Vaswani et al.), valid newstest2013, test newstest2014 (full).
* wmt17-zh-en (Yang, Cao): News Commentary v12 + UN v1.0 downloadable; the CWMT parts
  need registration: pass them with ``--extra-train PREFIX`` (PREFIX.zh / PREFIX.en).
  Without any, the command refuses unless ``--without-cwmt`` is given (the corpus is
  then ~35% smaller than the papers'). Valid newsdev2017, test newstest2017.
* wmt14-en-fr (Wang Table 2): Europarl v7 + Common Crawl + UN + News Commentary v9 +
  10^9 French-English, valid newstest2013, test newstest2014 (full).
The dev/test archives are checked against the md5 sums sacreBLEU publishes for them
(downloaded or given in --local-dir); statmt.org publishes no checksums for the training
archives (none is checked). After reading, the dev / test sentence counts are checked
against the known sizes (newstest2013 3000, newstest2014 full 3003, newsdev2017 zh-en
2002, newstest2017 zh-en 2001, ASPEC-JE dev 1790 / test 1812). Nothing is written
unless every check passed.

Checksum manifest (``--checksums FILE``): a JSON file
``{"archives": {filename: md5}, "counts": {"<corpus>/<split>": n}}`` whose entries
override (or add to) the published md5 sums and the known counts, e.g. for a mirror
that repacked the archives, or for the mini archives of the smoke rehearsal
(fairseq_ctx/reproduce/smoke_data.py), which go through exactly the same checks.
Counts are sentence pairs READ from the input of that split (for train: all archives
plus --extra-train, before cleaning). Corpus keys: wmt14-en-de, wmt14-en-fr,
wmt17-zh-en, aspec, opensubtitles. ASPEC's files can be listed under "archives" by
their paths inside ASPEC-JE (``dev/dev.txt``).

Offline: ``--local-dir DIR`` may hold each archive under its file name
(``training-parallel-europarl-v7.tgz``; md5-checked like a download) or its members
already extracted, under their paths inside the archive (``training/europarl-v7.de-en.en``)
or just their base names (these cannot be md5-checked: only their counts are, and a
warning says so). With ``--offline`` nothing is downloaded and a missing input is one
clear error. A truncated or corrupt archive is one clear error too.

ASPEC (Iida) is licensed by application: ``aspec`` reads the local ``ASPEC-JE``
directory. OpenSubtitles2018 Ja-En comes from OPUS (``opensubtitles``).
"""
import argparse
import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import sys
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ..atomic import atomic_write
from .download import ChecksumError, DownloadError, default_cache, download
from . import streaming
from .streaming import NotUtf8Error, decoded_lines, file_lines, progress


class CorpusError(RuntimeError):
    """A corpus input is missing or malformed (one clear message for the user)."""


@dataclass
class Archive:
    urls: Sequence[str]  # several URLs = parts of one file, concatenated (UN v1.0)
    members: Sequence[Tuple[str, str]]  # (source file, target file) paths inside it
    md5: Optional[str] = None

    @property
    def filename(self):
        return os.path.basename(self.urls[0]).split("?")[0].replace(".tar.gz.00", ".tar.gz")


@dataclass
class Corpus:
    src: str
    tgt: str
    train: List[Archive]
    valid: Archive
    test: Archive
    notes: str = ""
    extra: Dict[str, str] = field(default_factory=dict)


STATMT = "https://statmt.org"
WMT17 = "https://data.statmt.org/wmt17/translation-task"
EUROPARL = f"{STATMT}/wmt13/training-parallel-europarl-v7.tgz"
COMMONCRAWL = f"{STATMT}/wmt13/training-parallel-commoncrawl.tgz"
NC_V9 = f"{STATMT}/wmt14/training-parallel-nc-v9.tgz"
# md5 sums as published in sacreBLEU's dataset registry (sacrebleu/dataset/__init__.py)
WMT13_TEST = (f"{STATMT}/wmt13/test.tgz", "48eca5d02f637af44e85186847141f67")
WMT14_TEST_FULL = (f"{STATMT}/wmt14/test-full.tgz", "a8cd784e006feb32ac6f3d9ec7eb389a")
WMT17_DEV = (f"{WMT17}/dev.tgz", "9b1aa63c1cf49dccdd20b962fe313989")
WMT17_TEST = (f"{WMT17}/test.tgz", "86a1724c276004aa25455ae2a04cef26")

CORPORA: Dict[str, Corpus] = {
    "wmt14-en-de": Corpus(
        "en", "de",
        train=[
            Archive([EUROPARL], [("training/europarl-v7.de-en.en", "training/europarl-v7.de-en.de")]),
            Archive([COMMONCRAWL], [("commoncrawl.de-en.en", "commoncrawl.de-en.de")]),
            Archive([NC_V9], [("training/news-commentary-v9.de-en.en", "training/news-commentary-v9.de-en.de")]),
        ],
        valid=Archive([WMT13_TEST[0]], [("test/newstest2013-src.en.sgm", "test/newstest2013-src.de.sgm")], WMT13_TEST[1]),
        test=Archive([WMT14_TEST_FULL[0]], [("test-full/newstest2014-deen-src.en.sgm",
                                             "test-full/newstest2014-deen-ref.de.sgm")], WMT14_TEST_FULL[1]),
    ),
    "wmt17-zh-en": Corpus(
        "zh", "en",
        train=[
            Archive([f"{WMT17}/training-parallel-nc-v12.tgz"],
                    [("training/news-commentary-v12.zh-en.zh", "training/news-commentary-v12.zh-en.en")]),
            Archive(["https://stuncorpusprod.blob.core.windows.net/corpusfiles/UNv1.0.en-zh.tar.gz.00",
                     "https://stuncorpusprod.blob.core.windows.net/corpusfiles/UNv1.0.en-zh.tar.gz.01"],
                    [("en-zh/UNv1.0.en-zh.zh", "en-zh/UNv1.0.en-zh.en")]),
        ],
        valid=Archive([WMT17_DEV[0]], [("dev/newsdev2017-zhen-src.zh.sgm", "dev/newsdev2017-zhen-ref.en.sgm")], WMT17_DEV[1]),
        test=Archive([WMT17_TEST[0]], [("test/newstest2017-zhen-src.zh.sgm", "test/newstest2017-zhen-ref.en.sgm")], WMT17_TEST[1]),
        notes="CWMT (casia2015, casict2011, casict2015, datum2015, datum2017, neu2017) needs registration: "
              "pass each with --extra-train PREFIX",
    ),
    "wmt14-en-fr": Corpus(
        "en", "fr",
        train=[
            Archive([EUROPARL], [("training/europarl-v7.fr-en.en", "training/europarl-v7.fr-en.fr")]),
            Archive([COMMONCRAWL], [("commoncrawl.fr-en.en", "commoncrawl.fr-en.fr")]),
            Archive([f"{STATMT}/wmt13/training-parallel-un.tgz"], [("un/undoc.2000.fr-en.en", "un/undoc.2000.fr-en.fr")]),
            Archive([NC_V9], [("training/news-commentary-v9.fr-en.en", "training/news-commentary-v9.fr-en.fr")]),
            Archive([f"{STATMT}/wmt10/training-giga-fren.tar"],
                    [("giga-fren.release2.fixed.en.gz", "giga-fren.release2.fixed.fr.gz")]),
        ],
        valid=Archive([WMT13_TEST[0]], [("test/newstest2013-src.en.sgm", "test/newstest2013-src.fr.sgm")], WMT13_TEST[1]),
        test=Archive([WMT14_TEST_FULL[0]], [("test-full/newstest2014-fren-src.en.sgm",
                                             "test-full/newstest2014-fren-ref.fr.sgm")], WMT14_TEST_FULL[1]),
    ),
}


# Sentence counts of the held-out sets (sacreBLEU / fairseq: newstest2014 full "3003
# sentences" for En-De and En-Fr; newstest2013 3000; WMT17 Zh-En newsdev2017 2002 and
# newstest2017 2001; ASPEC-JE's dev.txt / test.txt, Nakazawa et al. 2016).
KNOWN_COUNTS: Dict[str, int] = {
    "wmt14-en-de/valid": 3000, "wmt14-en-de/test": 3003,
    "wmt14-en-fr/valid": 3000, "wmt14-en-fr/test": 3003,
    "wmt17-zh-en/valid": 2002, "wmt17-zh-en/test": 2001,
    "aspec/valid": 1790, "aspec/test": 1812,
}
# the CWMT corpora of WMT17 zh-en (registration needed; reproduce's tables print them as --extra-train CWMT/<part>)
CWMT_PART_NAMES = ("casia2015", "casict2011", "casict2015", "datum2015", "datum2017", "neu2017")
CWMT_PARTS = ", ".join(CWMT_PART_NAMES)
MD5 = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class Checksums:
    """Published md5 sums / known counts, overridden by a checksum manifest's entries."""
    archives: Dict[str, str] = field(default_factory=dict)
    counts: Dict[str, int] = field(default_factory=dict)
    path: Optional[str] = None  # the manifest, if any

    def md5(self, filename: str, published: Optional[str] = None) -> Tuple[Optional[str], str]:
        """(expected md5 or None, where it comes from)"""
        if filename in self.archives:
            return self.archives[filename], f"the md5 in {self.path}"
        return published, "the published md5"

    def count(self, key: str) -> Tuple[Optional[int], str]:
        if key in self.counts:
            return self.counts[key], f"the count in {self.path}"
        return KNOWN_COUNTS.get(key), "the known size"


def load_checksums(path: Optional[str]) -> Checksums:
    """Read and validate a checksum manifest; None gives the published values only."""
    if not path:
        return Checksums()
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise CorpusError(f"checksum manifest not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorpusError(f"checksum manifest {path}: not readable JSON ({error})") from None
    if not isinstance(data, dict) or set(data) - {"archives", "counts"}:
        raise CorpusError(f'checksum manifest {path}: expected {{"archives": {{filename: md5}}, '
                          f'"counts": {{"<corpus>/<split>": n}}}}')
    archives, counts = data.get("archives", {}), data.get("counts", {})
    if not isinstance(archives, dict) or not all(isinstance(v, str) and MD5.match(v.lower()) for v in archives.values()):
        raise CorpusError(f"checksum manifest {path}: \"archives\" must map file names to 32-digit hex md5 sums")
    if not isinstance(counts, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 and "/" in k for k, v in counts.items()):
        raise CorpusError(f'checksum manifest {path}: "counts" must map "<corpus>/<split>" to a number of sentences')
    return Checksums({k: v.lower() for k, v in archives.items()}, dict(counts), path)


def check_count(checksums: Checksums, key: str, found: int, what: str):
    expected, source = checksums.count(key)
    if expected is not None and found != expected:
        raise CorpusError(f"{key}: read {found} sentence pairs from {what}, but {source} is {expected} "
                          "(a truncated, incomplete or different file?)")
    return expected


def check_md5(path: str, expected: Optional[str], source: str):
    """md5 of a local file (an archive in --local-dir): a mismatch is one clear error; the
    user's file is left alone."""
    if expected:
        actual = _md5(path)
        if actual != expected:
            raise CorpusError(f"{path}: md5 {actual} does not match {source} {expected} "
                              "(a truncated or different file? fetch it again)")


def require_cwmt(name: str, extra_train: Sequence[str], without_cwmt: bool):
    """WMT17 Zh-En as in the papers includes CWMT: refuse to go on silently without it."""
    if name != "wmt17-zh-en":
        if without_cwmt:
            raise CorpusError(f"--without-cwmt only applies to wmt17-zh-en, not {name}")
        return
    if extra_train and without_cwmt:
        raise CorpusError("--without-cwmt and --extra-train contradict each other: pass one of them")
    if not extra_train and not without_cwmt:
        raise CorpusError(
            f"wmt17-zh-en: the papers' training data includes the CWMT corpora ({CWMT_PARTS}), which need "
            "registration and cannot be downloaded by script: pass each one with --extra-train PREFIX "
            "(PREFIX.zh / PREFIX.en), or pass --without-cwmt to go on with News Commentary v12 + UN v1.0 "
            "only (about 35% fewer training pairs than the papers')")
    if without_cwmt:
        print(f"warning: wmt17-zh-en WITHOUT the CWMT corpora ({CWMT_PARTS}): the training corpus is about "
              "35% smaller than the papers'; results are not comparable to their tables", file=sys.stderr)


# -- reading ---------------------------------------------------------------------------------


def _md5(path):
    return streaming.file_digest(path, "md5")


def locate_archive(archive: Archive, local_dir: Optional[str], cache: str, offline: bool,
                   checksums: Optional[Checksums] = None):
    """Return ('archive', path) or ('files', {member: path}) for already-extracted members.
    An archive with a known md5 (published, or in the checksum manifest) is checked, in
    --local-dir as in the download cache."""
    checksums = checksums or Checksums()
    expected, source = checksums.md5(archive.filename, archive.md5)
    if local_dir:
        candidate = os.path.join(local_dir, archive.filename)
        if os.path.exists(candidate):
            check_md5(candidate, expected, source)
            return "archive", candidate
        files = {}
        for pair in archive.members:
            for member in pair:
                for path in (os.path.join(local_dir, member), os.path.join(local_dir, os.path.basename(member)),
                             os.path.join(local_dir, os.path.basename(member)[:-3]) if member.endswith(".gz") else None):
                    if path and os.path.exists(path):
                        files[member] = path
                        break
        if len(files) == 2 * len(archive.members):
            return "files", files
    cached = os.path.join(cache, archive.filename)
    if not os.path.exists(cached):
        if offline:
            wanted = ", ".join(m for pair in archive.members for m in pair)
            raise CorpusError(f"missing input: {archive.filename} (from {archive.urls[0]}); put it, or its "
                              f"extracted files ({wanted}), in --local-dir, or run without --offline")
        try:
            if len(archive.urls) == 1:
                download(archive.urls[0], cached)
            else:  # multi-part archive: download the parts, then join them atomically
                parts = [download(url, os.path.join(cache, os.path.basename(url))) for url in archive.urls]
                with atomic_write(cached, "wb") as out:
                    for part in parts:
                        with open(part, "rb") as handle:
                            for block in iter(lambda: handle.read(1 << 20), b""):
                                out.write(block)
        except DownloadError as error:
            raise CorpusError(str(error)) from error
    if expected and _md5(cached) != expected:
        os.unlink(cached)
        raise ChecksumError(f"{cached}: md5 does not match {source} {expected} (deleted; run again)")
    return "archive", cached


# what a truncated / corrupt tar, zip or gzip raises while it is read
UNREADABLE = (tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, OSError)


def _spool(lines, path, desc):
    """Write ``lines`` to ``path`` one at a time; return how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for line in progress(lines, desc):
            out.write(line + "\n")
            count += 1
    return count


def spool_archive_pairs(archive: Archive, local_dir, cache, offline, spool_dir,
                        checksums: Optional[Checksums] = None) -> List[Tuple[str, str, int]]:
    """Decode every member pair of ``archive`` into ``spool_dir``, streaming (one line in
    memory at a time, whatever the corpus size): -> [(source file, target file, lines)] in
    the order of ``archive.members``. Members are read in the order the archive stores them
    (a compressed tar cannot be read out of order without decompressing it again)."""
    kind, where = locate_archive(archive, local_dir, cache, offline, checksums)
    os.makedirs(spool_dir, exist_ok=True)
    wanted = {m for pair in archive.members for m in pair}
    spooled: Dict[str, Tuple[str, int]] = {}

    def spool(member, raw, name):
        path = os.path.join(spool_dir, f"{archive.filename}.{len(spooled)}")
        spooled[member] = (path, _spool(decoded_lines(raw, name), path, os.path.basename(name)))

    if kind == "files":
        print(f"warning: {archive.filename}: using its extracted files from --local-dir "
              f"({', '.join(sorted(where.values()))}); extracted files cannot be md5-checked against the "
              "archive's checksum, only their sentence counts are checked", file=sys.stderr)
        for member, path in where.items():
            try:
                with open(path, "rb") as handle:
                    spool(member, handle, path)
            except UNREADABLE as error:
                raise CorpusError(f"{path}: cannot be read ({type(error).__name__}: {error}); "
                                  "a truncated or corrupt file? fetch it again") from None
    else:
        by_base = {os.path.basename(m): m for m in wanted}
        try:
            if where.endswith(".zip"):
                with zipfile.ZipFile(where) as bundle:
                    for name in bundle.namelist():
                        member = by_base.get(os.path.basename(name))
                        if member is not None and member not in spooled:
                            with bundle.open(name) as raw:
                                spool(member, raw, name)
            else:
                with tarfile.open(where, "r|*") as bundle:  # a stream: one pass, in stored order
                    for info in bundle:
                        member = by_base.get(os.path.basename(info.name))
                        if info.isfile() and member is not None and member not in spooled:
                            spool(member, bundle.extractfile(info), info.name)
        except UNREADABLE as error:
            raise CorpusError(f"{where}: cannot read the archive ({type(error).__name__}: {error}); "
                              "a truncated or corrupt download? delete it and fetch it again") from None
    missing = sorted(wanted - set(spooled))
    if missing:
        raise CorpusError(f"{where}: does not contain {', '.join(missing)}")
    pairs = []
    for src_member, tgt_member in archive.members:
        (src, n_src), (tgt, n_tgt) = spooled[src_member], spooled[tgt_member]
        if n_src != n_tgt:
            raise CorpusError(f"{src_member} has {n_src} lines but {tgt_member} has {n_tgt}")
        pairs.append((src, tgt, n_src))
    return pairs



def _concatenate(parts, path):
    """Concatenate spooled files into ``path`` (atomically), streaming."""
    with atomic_write(path) as out:
        for part in parts:
            with open(part, encoding="utf-8", newline="") as handle:  # \r inside a line is kept, not a break
                shutil.copyfileobj(handle, out, streaming.BLOCK)


def prepare_wmt(name, outdir, local_dir=None, cache=None, offline=False, extra_train=(), reverse=False,
                checksums: Optional[Checksums] = None, without_cwmt=False):
    corpus = CORPORA[name]
    require_cwmt(name, extra_train, without_cwmt)
    checksums = checksums or Checksums()
    cache = cache or default_cache()
    spool_root = os.path.join(outdir, ".spool")
    try:
        _prepare_wmt_splits(name, corpus, outdir, spool_root, local_dir, cache, offline, extra_train, checksums)
    finally:  # decoded copies of the inputs: never left behind, also not after a failed check
        shutil.rmtree(spool_root, ignore_errors=True)


def _prepare_wmt_splits(name, corpus, outdir, spool_root, local_dir, cache, offline, extra_train, checksums):
    splits = {}
    # held-out sets first (small, checksummed, counted): a bad one fails before the big reads.
    # Every split is decoded into spool files (bounded memory: WMT14 En-Fr has ~36M pairs) and
    # counted; the output files are written only after every split was read and checked.
    # (--reverse only changes which side is the source: files are named by language.)
    for split, archives in (("valid", [corpus.valid]), ("test", [corpus.test]), ("train", corpus.train)):
        spool_dir = os.path.join(spool_root, split)
        parts = []
        for archive in archives:
            parts += spool_archive_pairs(archive, local_dir, cache, offline, spool_dir, checksums)
        if split == "train":
            for index, prefix in enumerate(extra_train):
                counts = []
                for lang in (corpus.src, corpus.tgt):
                    path = f"{prefix}.{lang}"
                    if not os.path.exists(path):
                        raise CorpusError(f"missing input: {path}")
                    spooled = os.path.join(spool_dir, f"extra{index}.{lang}")
                    counts.append(_spool(file_lines(path), spooled, os.path.basename(path)))
                if counts[0] != counts[1]:
                    raise CorpusError(f"{prefix}.{corpus.src} has {counts[0]} lines but .{corpus.tgt} has {counts[1]}")
                parts.append((os.path.join(spool_dir, f"extra{index}.{corpus.src}"),
                              os.path.join(spool_dir, f"extra{index}.{corpus.tgt}"), counts[0]))
        total = sum(n for _, _, n in parts)
        check_count(checksums, f"{name}/{split}", total, " + ".join(a.filename for a in archives)
                    + ("".join(f" + {p}.*" for p in extra_train) if split == "train" else ""))
        splits[split] = (parts, total)
    for split in ("train", "valid", "test"):
        parts, total = splits[split]
        _concatenate([src for src, _, _ in parts], os.path.join(outdir, f"{split}.{corpus.src}"))
        _concatenate([tgt for _, tgt, _ in parts], os.path.join(outdir, f"{split}.{corpus.tgt}"))
        print(f"{name} {split}: {total} pairs", file=sys.stderr)


def write_split(outdir, split, src_lang, tgt_lang, src_lines, tgt_lines):
    for lang, lines in ((src_lang, src_lines), (tgt_lang, tgt_lines)):
        with atomic_write(os.path.join(outdir, f"{split}.{lang}")) as out:
            out.writelines(line + "\n" for line in lines)



# -- ASPEC-JE (Nakazawa et al. 2016), local files only -------------------------------------


ASPEC_TRAIN = ("train/train-1.txt", "train/train-2.txt", "train/train-3.txt")
ASPEC_HELDOUT = {"valid": "dev/dev.txt", "test": "test/test.txt"}


def read_aspec_train(path):
    """train-N.txt: ``score ||| id ||| source-id ||| ja ||| en`` (sorted by score, best first)."""
    for lineno, line in enumerate(_open_text(path), 1):
        fields = [f.strip() for f in line.rstrip("\n").split(" ||| ")]
        if len(fields) != 5:
            raise CorpusError(f"{path} line {lineno}: expected 5 ' ||| '-separated fields, got {len(fields)}")
        yield float(fields[0]), fields[3], fields[4]


def read_aspec_heldout(path):
    """dev.txt / test.txt: ``id ||| doc-id ||| ja ||| en``."""
    for lineno, line in enumerate(_open_text(path), 1):
        fields = [f.strip() for f in line.rstrip("\n").split(" ||| ")]
        if len(fields) != 4:
            raise CorpusError(f"{path} line {lineno}: expected 4 ' ||| '-separated fields, got {len(fields)}")
        yield fields[2], fields[3]


def _open_text(path):
    if not os.path.exists(path):
        raise CorpusError(f"missing input: {path} (ASPEC is licensed by application and cannot be "
                          "downloaded by script: pass the ASPEC-JE directory with --local-dir)")
    with open(path, encoding="utf-8") as handle:
        try:
            yield from handle
        except UnicodeDecodeError as error:  # ASPEC is distributed in UTF-8: a damaged copy
            raise NotUtf8Error(f"{path}: not valid UTF-8 ({error}); ASPEC is distributed in UTF-8: "
                               "a damaged or re-encoded copy?") from None


def length_eval_subsets(pairs, tokenize_src, width=10, max_bucket=13, tokens_per_bucket=20000):
    """Iida et al. Section 4.3: per source-length bucket of ``width`` words, sentences in
    order (best alignment score first) until the bucket holds ``tokens_per_bucket`` words."""
    buckets: Dict[int, List[Tuple[str, str]]] = {}
    totals: Dict[int, int] = {}
    for ja, en in pairs:
        length = len(tokenize_src(ja).split())
        bucket = length // width
        if bucket > max_bucket or totals.get(bucket, 0) >= tokens_per_bucket:
            continue
        buckets.setdefault(bucket, []).append((ja, en))
        totals[bucket] = totals.get(bucket, 0) + length
        if len(totals) == max_bucket + 1 and all(t >= tokens_per_bucket for t in totals.values()):
            break
    return buckets


def prepare_aspec(local_dir, outdir, direction="ja-en", top=1_000_000, length_eval=False,
                  checksums: Optional[Checksums] = None, length_eval_tokens=20000):
    if not os.path.isdir(local_dir or ""):
        raise CorpusError(f"missing input: ASPEC-JE directory {local_dir!r} (ASPEC is licensed by application; "
                          "pass the unpacked ASPEC-JE directory with --local-dir)")
    checksums = checksums or Checksums()
    for name in ASPEC_TRAIN + tuple(ASPEC_HELDOUT.values()):  # files the manifest gives an md5 for
        path = os.path.join(local_dir, name)
        expected, source = checksums.md5(name)
        if expected and os.path.exists(path):
            check_md5(path, expected, source)
    src_lang, tgt_lang = direction.split("-")
    lang_of = {"ja": 0, "en": 1}
    heldout = {}
    for split, name in ASPEC_HELDOUT.items():  # first: small, and counted
        rows = list(read_aspec_heldout(os.path.join(local_dir, name)))
        check_count(checksums, f"aspec/{split}", len(rows), os.path.join(local_dir, name))
        heldout[split] = rows
    def train_rows():
        """(score, ja, en) of train-1..3.txt in order; a later file may be absent when the
        earlier ones already give ``top`` pairs."""
        seen = 0
        for name in ASPEC_TRAIN:
            path = os.path.join(local_dir, name)
            if name != ASPEC_TRAIN[0] and not os.path.exists(path) and seen >= top:
                return
            for row in read_aspec_train(path):
                seen += 1
                yield row

    # The files are published sorted by alignment score, best first, so "the top pairs" are
    # the first ones: pass 1 counts, checks that order and picks the length subsets from the
    # pairs after the top ones; pass 2 writes the top pairs. Nothing is held but the subsets.
    # (Files out of order are sorted in memory: the only case that holds the corpus.)
    total, in_order, previous = 0, True, float("inf")
    tokenize_src = None
    if length_eval:
        from .tokenize import tokenizer

        tokenize_src = tokenizer(src_lang)

    def pool_rows():
        nonlocal total, in_order, previous
        for score, ja, en in progress(train_rows(), "ASPEC: count", unit="pairs"):
            total += 1
            in_order = in_order and score <= previous
            previous = score
            if total > top:
                yield (ja, en) if src_lang == "ja" else (en, ja)

    subsets, pool = {}, pool_rows()
    if length_eval:
        subsets = length_eval_subsets(pool, tokenize_src, tokens_per_bucket=length_eval_tokens)
    for _ in pool:  # the rest of the count (length_eval_subsets stops when its buckets are full)
        pass
    check_count(checksums, "aspec/train", total, f"{local_dir}/train/train-*.txt")
    if in_order:
        top_rows = itertools.islice(train_rows(), top)
    else:
        print("aspec: the training files are not sorted by alignment score: sorting them in memory",
              file=sys.stderr)
        everything = sorted(train_rows(), key=lambda row: -row[0])
        top_rows = everything[:top]
        if length_eval:
            rest = [(r[1], r[2]) if src_lang == "ja" else (r[2], r[1]) for r in everything[top:]]
            subsets = length_eval_subsets(rest, tokenize_src, tokens_per_bucket=length_eval_tokens)
    # every input was read and checked: write
    kept = 0
    with atomic_write(os.path.join(outdir, f"train.{src_lang}")) as src_out, \
            atomic_write(os.path.join(outdir, f"train.{tgt_lang}")) as tgt_out:
        for row in progress(top_rows, "ASPEC: write", unit="pairs", total=min(top, total)):
            src_out.write(row[1 + lang_of[src_lang]] + "\n")
            tgt_out.write(row[1 + lang_of[tgt_lang]] + "\n")
            kept += 1
    for split, rows in heldout.items():
        write_split(outdir, split, src_lang, tgt_lang, [r[lang_of[src_lang]] for r in rows],
                    [r[lang_of[tgt_lang]] for r in rows])
    for bucket, rows in sorted(subsets.items()):
        write_split(outdir, f"len{bucket * 10}", src_lang, tgt_lang, [r[0] for r in rows], [r[1] for r in rows])
    print(f"aspec: train {kept} pairs (top by alignment score)"
          + (f", {len(subsets)} length subsets of up to {length_eval_tokens} source words" if length_eval else ""),
          file=sys.stderr)


# -- OpenSubtitles2018 Ja-En (OPUS) --------------------------------------------------------------

OPENSUBTITLES_URL = "https://object.pouta.csc.fi/OPUS-OpenSubtitles/v2018/moses/en-ja.txt.zip"
OPENSUBTITLES_ZIP = "en-ja.txt.zip"
OPENSUBTITLES_MEMBERS = ("OpenSubtitles.en-ja.en", "OpenSubtitles.en-ja.ja", "OpenSubtitles.en-ja.ids")
SPLIT_SALT = "fairseq-ctx-opensubtitles-split-v1"


def document_split(doc_id, valid=0.05, test=0.05):
    """90/5/5 by document (movie) so that a document's sentences, and their 2-to-2
    context, never straddle two splits; stable hash, independent of file order."""
    rank = int.from_bytes(hashlib.sha256(f"{SPLIT_SALT}\t{doc_id}".encode()).digest()[:8], "big") / 2 ** 64
    return "test" if rank < test else "valid" if rank < test + valid else "train"


def prepare_opensubtitles(outdir, local=None, cache=None, offline=False, direction="ja-en",
                          checksums: Optional[Checksums] = None):
    checksums = checksums or Checksums()
    files = {}
    if local and os.path.isdir(local):
        for member in OPENSUBTITLES_MEMBERS:
            path = os.path.join(local, member)
            if os.path.exists(path):
                files[member] = path
        if len(files) < 3:
            zipped = os.path.join(local, OPENSUBTITLES_ZIP)
            local = zipped if os.path.exists(zipped) else None
    if len(files) < 3:
        path = local
        # OPUS publishes no md5 sum: only a checksum manifest can give one
        expected, source = checksums.md5(OPENSUBTITLES_ZIP)
        if path:
            check_md5(path, expected, source)
        else:
            cached = os.path.join(cache or default_cache(), "OpenSubtitles2018.en-ja.txt.zip")
            if not os.path.exists(cached) and offline:
                raise CorpusError(f"missing input: {OPENSUBTITLES_ZIP} (from {OPENSUBTITLES_URL}) or "
                                  f"{', '.join(OPENSUBTITLES_MEMBERS)} in --local-dir")
            try:
                path = download(OPENSUBTITLES_URL, cached)
            except DownloadError as error:
                raise CorpusError(str(error)) from error
            check_md5(path, expected, source)
        try:
            with zipfile.ZipFile(path) as bundle:
                names = {os.path.basename(n): n for n in bundle.namelist()}
                for member in OPENSUBTITLES_MEMBERS:
                    if member not in names:
                        raise CorpusError(f"{path}: does not contain {member}")
        except UNREADABLE as error:
            raise CorpusError(f"{path}: cannot read the archive ({type(error).__name__}: {error}); "
                              "a truncated or corrupt download? delete it and fetch it again") from None

        @contextlib.contextmanager
        def open_members():
            try:
                with zipfile.ZipFile(path) as bundle:
                    with contextlib.ExitStack() as members:
                        yield [decoded_lines(members.enter_context(bundle.open(names[m])), m)
                               for m in OPENSUBTITLES_MEMBERS]
            except UNREADABLE as error:
                raise CorpusError(f"{path}: cannot read the archive ({type(error).__name__}: {error}); "
                                  "a truncated or corrupt download? delete it and fetch it again") from None
    else:
        print(f"warning: using the extracted files {', '.join(sorted(files.values()))} from --local-dir instead "
              f"of {OPENSUBTITLES_ZIP}: extracted files cannot be md5-checked against the archive's checksum, "
              "only their sentence counts are checked", file=sys.stderr)

        @contextlib.contextmanager
        def open_members():
            yield [file_lines(files[m]) for m in OPENSUBTITLES_MEMBERS]

    # Two streaming passes (a corpus is never held): count and check, then write.
    def rows(desc):
        """(en, ja, document) per line, the three members read in step."""
        with open_members() as (en, ja, ids):
            for index, row in enumerate(progress(itertools.zip_longest(en, ja, ids), desc, unit="pairs")):
                if None in row:
                    missing = [m for m, line in zip(OPENSUBTITLES_MEMBERS, row) if line is None]
                    raise CorpusError(f"OpenSubtitles: {', '.join(missing)} ended at line {index + 1}, "
                                      "before the other members (their line counts differ)")
                fields = row[2].split("\t") if "\t" in row[2] else row[2].split()
                yield row[0], row[1], fields[0] + " " + (fields[1] if len(fields) > 1 else "")  # en + ja file = one movie

    counts = {"train": 0, "valid": 0, "test": 0}
    for _, _, doc in rows("OpenSubtitles: count"):
        counts[document_split(doc)] += 1
    for split, n in counts.items():
        check_count(checksums, f"opensubtitles/{split}", n, f"the {split} documents of OpenSubtitles")
    src_lang, tgt_lang = direction.split("-")
    # a pair with a blank side (an untranslated or empty subtitle) is no translation example, and
    # the 2-to-2 variant (concat_context --doc-ids) refuses it: dropped here, for both variants
    # alike, and counted (the manifest's counts are of the release's pairs, before this). Blank
    # as the tokenisers leave it: the Moses tokeniser deletes ASCII control characters
    blank = dict.fromkeys(counts, 0)
    with contextlib.ExitStack() as outputs:  # an error discards every output
        out = {(split, kind): outputs.enter_context(atomic_write(os.path.join(outdir, f"{split}.{kind}")))
               for split in counts for kind in (src_lang, tgt_lang, "docs")}
        for en, ja, doc in rows("OpenSubtitles: write"):
            split = document_split(doc)
            if blank_after_tokenising(en) or blank_after_tokenising(ja):
                blank[split] += 1
                continue
            side = {"en": en, "ja": ja}
            out[split, src_lang].write(side[src_lang] + "\n")
            out[split, tgt_lang].write(side[tgt_lang] + "\n")
            out[split, "docs"].write(doc + "\n")
    for split, n in counts.items():
        dropped = f" ({blank[split]} with a blank side dropped: {n - blank[split]} written)" if blank[split] else ""
        print(f"opensubtitles {split}: {n} pairs{dropped}", file=sys.stderr)


ASCII_CONTROL = re.compile(r"[\x00-\x1f]")


def blank_after_tokenising(text):
    """Whether ``text`` is blank once tokenised: nothing but whitespace and ASCII control
    characters (which sacremoses' tokeniser deletes; MeCab keeps them, so a Japanese side that
    is only those is dropped as well: no sentence either)."""
    return not ASCII_CONTROL.sub("", text).strip()


# -- cleaning (train only, after tokenisation) -------------------------------------------------


def keep_pair(s, t, max_len=250, min_len=1, ratio=1.5):
    """Moses clean-corpus-n: keep a pair whose token counts are in [min_len, max_len] and
    whose length ratio is at most ``ratio`` (fairseq's WMT settings: 1-250, 1.5; counted here in
    tokenised words, where fairseq's prepare-wmt14en2de.sh counts subwords after BPE).
    ``max_len`` 49 gives Cao et al.'s "sentence length less than 50"."""
    ls, lt = len(s.split()), len(t.split())
    if not (min_len <= ls <= max_len and min_len <= lt <= max_len):
        return False
    return not (ratio and (ls > ratio * lt or lt > ratio * ls))


def clean_pairs(src_lines, tgt_lines, max_len=250, min_len=1, ratio=1.5):
    """The pairs ``keep_pair`` keeps (a list; small inputs)."""
    return [(s, t) for s, t in zip(src_lines, tgt_lines) if keep_pair(s, t, max_len, min_len, ratio)]


def clean_files(src_in, tgt_in, src_out, tgt_out, max_len=250, ratio=1.5):
    """``keep_pair`` over two files, streaming; -> (kept, read). Misaligned inputs (one file
    longer) are an error and leave no output."""
    for path in (src_in, tgt_in):
        if not os.path.exists(path):
            raise CorpusError(f"missing input: {path}")
    end = object()
    kept = read = 0
    with atomic_write(src_out) as src_handle, atomic_write(tgt_out) as tgt_handle:
        pairs = itertools.zip_longest(file_lines(src_in), file_lines(tgt_in), fillvalue=end)
        for s, t in progress(pairs, "clean", unit="pairs"):
            if s is end or t is end:
                longer, shorter = (tgt_in, src_in) if s is end else (src_in, tgt_in)
                raise CorpusError(f"{longer} has more lines than {shorter} ({read} pairs read)")
            read += 1
            if keep_pair(s, t, max_len, ratio=ratio):
                src_handle.write(s + "\n")
                tgt_handle.write(t + "\n")
                kept += 1
    return kept, read


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    wmt = sub.add_parser("wmt", help="assemble a WMT corpus")
    wmt.add_argument("--corpus", choices=sorted(CORPORA), required=True)
    wmt.add_argument("--reverse", action="store_true", help="swap source and target (e.g. de-en)")
    wmt.add_argument("--extra-train", action="append", default=[], metavar="PREFIX",
                     help="more training text PREFIX.<src> / PREFIX.<tgt> (e.g. CWMT parts)")
    wmt.add_argument("--without-cwmt", action="store_true",
                     help="wmt17-zh-en: go on without the CWMT parts (a corpus ~35%% smaller than the papers')")
    aspec = sub.add_parser("aspec", help="ASPEC-JE from local files")
    aspec.add_argument("--direction", choices=["ja-en", "en-ja"], default="ja-en")
    aspec.add_argument("--top", type=int, default=1_000_000, help="training pairs with the best alignment scores")
    aspec.add_argument("--length-eval", action="store_true", help="also write Section 4.3's per-length subsets")
    aspec.add_argument("--length-eval-tokens", type=int, default=20000, metavar="N",
                       help="source words per length subset (the paper: 20000)")
    subs = sub.add_parser("opensubtitles", help="OpenSubtitles2018 Ja-En (OPUS), 90/5/5 by document")
    subs.add_argument("--direction", choices=["ja-en", "en-ja"], default="ja-en")
    clean = sub.add_parser("clean", help="length / ratio filter of a tokenised parallel corpus")
    clean.add_argument("--src-in", required=True)
    clean.add_argument("--tgt-in", required=True)
    clean.add_argument("--src-out", required=True)
    clean.add_argument("--tgt-out", required=True)
    clean.add_argument("--max-len", type=int, default=250)
    clean.add_argument("--ratio", type=float, default=1.5)
    for p in (wmt, aspec, subs):
        p.add_argument("--outdir", required=True)
        p.add_argument("--local-dir", default=None)
        p.add_argument("--checksums", default=None, metavar="FILE",
                       help='checksum manifest {"archives": {filename: md5}, "counts": {"<corpus>/<split>": n}} '
                            "overriding the published md5 sums and known sentence counts")
    for p in (wmt, subs):
        p.add_argument("--cache", default=None)
        p.add_argument("--offline", action="store_true", help="never download; fail if an input is missing")
    args = parser.parse_args(argv)
    try:
        if args.command == "wmt":
            prepare_wmt(args.corpus, args.outdir, args.local_dir, args.cache, args.offline, args.extra_train,
                        args.reverse, load_checksums(args.checksums), args.without_cwmt)
        elif args.command == "aspec":
            if args.length_eval_tokens <= 0:
                raise CorpusError(f"--length-eval-tokens must be positive, not {args.length_eval_tokens}")
            prepare_aspec(args.local_dir, args.outdir, args.direction, args.top, args.length_eval,
                          load_checksums(args.checksums), args.length_eval_tokens)
        elif args.command == "opensubtitles":
            prepare_opensubtitles(args.outdir, args.local_dir, args.cache, args.offline, args.direction,
                                  load_checksums(args.checksums))
        else:
            kept, read = clean_files(args.src_in, args.tgt_in, args.src_out, args.tgt_out,
                                     args.max_len, ratio=args.ratio)
            print(f"clean: kept {kept} of {read} pairs", file=sys.stderr)
    except (CorpusError, ChecksumError, NotUtf8Error) as error:
        sys.exit(f"{args.command}: {error}")


if __name__ == "__main__":
    main()
