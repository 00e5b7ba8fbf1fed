"""Data preparation: the download layer (local HTTP server) and every prepare script end
to end on tiny corpora generated in the real file layouts (sgm / tsv / OPUS / ASPEC)."""
import functools
import hashlib
import http.server
import io
import json
import os
import random
import re
import shutil
import tarfile
import threading
import zipfile

import pytest

from fairseq_ctx.data import corpora
from fairseq_ctx.data.download import ChecksumError, DownloadError, download, fetch
from tests.conftest import ROOT, run

# -- a local HTTP server with Range support ----------------------------------------------------


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory; honours ``Range: bytes=N-`` like statmt.org / OPUS do."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.requests.append(self.headers.get("Range"))
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404)
            return
        with open(path, "rb") as handle:
            data = handle.read()
        start = 0
        ranged = self.headers.get("Range")
        if ranged and self.server.honour_range:
            start = int(ranged.split("=")[1].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])


@pytest.fixture
def http_server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(RangeHandler, directory=str(root)))
    server.requests, server.honour_range = [], True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}", server
    server.shutdown()
    server.server_close()


def test_interrupted_download_resumes_with_range_and_verifies_sha256(http_server, tmp_path):
    root, url, server = http_server
    payload = os.urandom(3 * (1 << 20) + 123)
    (root / "corpus.tgz").write_bytes(payload)
    dest = str(tmp_path / "cache" / "corpus.tgz")
    with pytest.raises(DownloadError, match="kept for resumption"):
        download(f"{url}/corpus.tgz", dest, max_bytes=1 << 20)
    assert not os.path.exists(dest) and os.path.getsize(dest + ".part") == 1 << 20
    download(f"{url}/corpus.tgz", dest, sha256=hashlib.sha256(payload).hexdigest())
    assert server.requests[-1] == f"bytes={1 << 20}-"  # resumed, not restarted
    assert open(dest, "rb").read() == payload and not os.path.exists(dest + ".part")
    # a complete file is not fetched again
    count = len(server.requests)
    assert fetch(f"{url}/corpus.tgz", cache=str(tmp_path / "cache")) == dest
    assert len(server.requests) == count


def test_server_ignoring_range_restarts_from_zero(http_server, tmp_path):
    root, url, server = http_server
    server.honour_range = False
    payload = os.urandom(2 * (1 << 20) + 7)
    (root / "f.bin").write_bytes(payload)
    dest = str(tmp_path / "f.bin")
    with pytest.raises(DownloadError):
        download(f"{url}/f.bin", dest, max_bytes=1 << 20)
    download(f"{url}/f.bin", dest)
    assert open(dest, "rb").read() == payload


def test_checksum_mismatch_fails_loudly_and_leaves_nothing_complete_looking(http_server, tmp_path):
    root, url, _ = http_server
    (root / "f.bin").write_bytes(b"not what was published\n")
    dest = tmp_path / "cache" / "f.bin"
    with pytest.raises(ChecksumError, match="sha256 mismatch"):
        download(f"{url}/f.bin", str(dest), sha256="0" * 64)
    assert sorted(os.listdir(dest.parent)) == []


def test_unreachable_url_names_the_offline_workaround(tmp_path):
    with pytest.raises(DownloadError, match="offline"):
        download("http://127.0.0.1:9/none.tgz", str(tmp_path / "none.tgz"), timeout=5)
    assert not (tmp_path / "none.tgz").exists()


# -- tiny corpora in the real layouts -------------------------------------------------------------

WORDS = ("house garden small big red green tree river city night day water light dog cat bird "
         "book table window door street car train station road bridge mountain forest").split()
GERMAN = {w: w[::-1] + "en" for w in WORDS}


def sentence_pairs(n, seed, max_words=9):
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, max_words))]
        en = " ".join(words).capitalize() + "."
        de = " ".join(GERMAN[w] for w in words).capitalize() + "."
        pairs.append((en, de))
    return pairs


def sgm(lines, lang):
    body = "".join(f'<seg id="{i + 1}"> {line} </seg>\n' for i, line in enumerate(lines))
    return f'<srcset setid="newstest" srclang="any" trglang="{lang}">\n<doc docid="d1">\n{body}</doc>\n</srcset>\n'


def add_tar(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def write_manifest(path, counts, archives=None):
    """A checksum manifest for tiny corpora (their dev / test are not the real sizes)."""
    path.write_text(json.dumps({"archives": archives or {}, "counts": counts}))
    return path


WMT14_TINY_COUNTS = {"wmt14-en-de/valid": 11, "wmt14-en-de/test": 13}


def make_wmt14_en_de(local):
    """Europarl as its real archive; Common Crawl / News Commentary / dev / test as
    extracted files under their archive paths (both --local-dir layouts). Writes
    local/checksums.json with the tiny dev / test counts."""
    train = sentence_pairs(300, 1)
    parts = [train[:150], train[150:250], train[250:]]
    add_tar(local / "training-parallel-europarl-v7.tgz", {
        "training/europarl-v7.de-en.en": "".join(e + "\n" for e, _ in parts[0]),
        "training/europarl-v7.de-en.de": "".join(d + "\n" for _, d in parts[0]),
        "training/europarl-v7.fr-en.en": "unused\n",
    })
    for member, rows in (("commoncrawl.de-en", parts[1]), ("training/news-commentary-v9.de-en", parts[2])):
        (local / member).parent.mkdir(parents=True, exist_ok=True)
        (local / f"{member}.en").write_text("".join(e + "\n" for e, _ in rows))
        (local / f"{member}.de").write_text("".join(d + "\n" for _, d in rows))
    held = sentence_pairs(24, 2)
    for split, name, rows in (("test", "newstest2013-src", held[:11]), ("test-full", "newstest2014-deen", held[11:])):
        (local / split).mkdir(exist_ok=True)
        src = f"{name}.en.sgm" if split == "test" else f"{name}-src.en.sgm"
        ref = f"{name}.de.sgm" if split == "test" else f"{name}-ref.de.sgm"
        (local / split / src).write_text(sgm([e for e, _ in rows], "en"))
        (local / split / ref).write_text(sgm([d for _, d in rows], "de"))
    write_manifest(local / "checksums.json", WMT14_TINY_COUNTS)
    return train, held


def test_prepare_wmt14_en_de_end_to_end_from_local_files(tmp_path):
    local = tmp_path / "downloads"
    local.mkdir()
    train, held = make_wmt14_en_de(local)
    out = tmp_path / "wmt14"
    cmd = ["bash", os.path.join(ROOT, "scripts", "data", "prepare-wmt14-en-de.sh"), "--out", str(out),
           "--local-dir", str(local), "--offline", "--checksums", str(local / "checksums.json"),
           "--merges", "60", "--cache", str(tmp_path / "cache")]
    first = run(cmd)
    raw_train = (out / "raw" / "train.en").read_text().splitlines()
    assert raw_train == [e for e, _ in train]  # all three archives, in order
    assert (out / "raw" / "test.de").read_text().splitlines() == [d for _, d in held[11:]]  # sgm contents
    assert (out / "raw" / "valid.en").read_text().splitlines() == [e for e, _ in held[:11]]
    assert (out / "tok" / "test.en").read_text().splitlines()[0].endswith(" .")  # Moses split the period
    assert (out / "bpe" / "codes").exists()  # joint BPE for En-De
    for name in ("dict.en.txt", "dict.de.txt", "train.en-de.en.bin", "test.en-de.de.idx"):
        assert (out / "bin" / name).exists(), name
    assert (out / "bin" / "dict.en.txt").read_text() == (out / "bin" / "dict.de.txt").read_text()  # joined
    assert "done already" not in first.stderr + first.stdout
    # the extracted members cannot be md5-checked: said so
    assert "commoncrawl.de-en.en" in first.stderr and "cannot be md5-checked" in first.stderr
    again = run(cmd)  # idempotent: every step is skipped
    assert (again.stdout + again.stderr).count("done already, skipping") == 4
    # other settings into the same directory are refused
    proc = run_fail(cmd[:4] + ["--merges", "61", "--offline", "--local-dir", str(local)])
    assert "different settings" in proc.stderr


def run_fail(cmd):
    import subprocess

    from tests.conftest import cli_env

    proc = subprocess.run(cmd, capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return proc


def test_missing_input_gives_one_clear_message_and_nothing_half_written(tmp_path):
    local = tmp_path / "downloads"
    local.mkdir()
    make_wmt14_en_de(local)
    os.unlink(local / "test-full" / "newstest2014-deen-ref.de.sgm")
    out = tmp_path / "wmt14"
    proc = run_fail(["bash", os.path.join(ROOT, "scripts", "data", "prepare-wmt14-en-de.sh"), "--out", str(out),
                     "--local-dir", str(local), "--offline", "--checksums", str(local / "checksums.json"),
                     "--cache", str(tmp_path / "cache")])
    assert "missing input: test-full.tgz" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "raw").exists()  # only raw.partial, which the next run redoes
    assert sorted(p.name for p in out.iterdir()) == [".lock", "raw.partial", "settings"]  # .lock: empty, kept


def test_wmt_archive_md5_mismatch_is_rejected(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "test-full.tgz").write_bytes(b"corrupt")
    with pytest.raises(ChecksumError, match="md5"):
        corpora.locate_archive(corpora.CORPORA["wmt14-en-de"].test, None, str(cache), offline=True)
    assert not (cache / "test-full.tgz").exists()


def test_cao_length_filter_and_zh_segmentation(tmp_path):
    rows = [("我们 的 房子 很 大", "Our house is big ."), ("一 二 三", " ".join(["w"] * 60)), ("你好", "")]
    src = tmp_path / "s"
    tgt = tmp_path / "t"
    src.write_text("".join(r[0] + "\n" for r in rows))
    tgt.write_text("".join(r[1] + "\n" for r in rows))
    run([__import__("sys").executable, "-m", "fairseq_ctx.data.corpora", "clean", "--max-len", "49",
         "--ratio", "0", "--src-in", str(src), "--tgt-in", str(tgt), "--src-out", str(tmp_path / "o.zh"),
         "--tgt-out", str(tmp_path / "o.en")])
    assert (tmp_path / "o.en").read_text().splitlines() == ["Our house is big ."]


JA = {w: f"{w}の" for w in WORDS}


def make_aspec(local, n_train=120):
    """ASPEC-JE layout: train/train-{1,2,3}.txt (score ||| id ||| src-id ||| ja ||| en), dev, test."""
    pairs = sentence_pairs(n_train + 30, 3, max_words=12)
    (local / "train").mkdir(parents=True)
    scores = sorted((random.Random(4).random() for _ in range(n_train)), reverse=True)
    rows = [f"{s:.3f} ||| TR-{i} ||| X-{i} ||| {''.join(JA[w.strip('.').lower()] for w in e.split())}。 ||| {e}"
            for i, (s, (e, _)) in enumerate(zip(scores, pairs[:n_train]))]
    (local / "train" / "train-1.txt").write_text("".join(r + "\n" for r in rows[:60]))
    (local / "train" / "train-2.txt").write_text("".join(r + "\n" for r in rows[60:]))
    for split, sub in (("dev", pairs[n_train:n_train + 13]), ("test", pairs[n_train + 13:])):
        (local / split).mkdir()
        (local / split / f"{split}.txt").write_text("".join(
            f"{i} ||| D{i} ||| {''.join(JA[w.strip('.').lower()] for w in e.split())}。 ||| {e}\n"
            for i, (e, _) in enumerate(sub)))
    write_manifest(local.parent / "aspec-checksums.json", {"aspec/valid": 13, "aspec/test": 17})
    return rows


def test_prepare_aspec_top_pairs_mecab_sentencepiece_binarized(tmp_path):
    local = tmp_path / "ASPEC-JE"
    rows = make_aspec(local)
    out = tmp_path / "aspec"
    run(["bash", os.path.join(ROOT, "scripts", "data", "prepare-aspec.sh"), "--local-dir", str(local),
         "--out", str(out), "--top", "100", "--vocab-size", "60", "--length-eval",
         "--checksums", str(tmp_path / "aspec-checksums.json")])
    train_en = (out / "raw" / "train.en").read_text().splitlines()
    assert train_en == [r.split(" ||| ")[4] for r in rows[:100]]  # the 100 best-scored pairs
    assert len((out / "raw" / "test.ja").read_text().splitlines()) == 17
    assert " " in (out / "tok" / "train.ja").read_text().splitlines()[0]  # MeCab segmented
    assert "\u2581" in (out / "spm" / "train.en").read_text()
    assert (out / "bin" / "test.ja-en.ja.bin").exists() and (out / "bin" / "dict.en.txt").exists()
    subsets = (out / "bin" / "length-subsets.tsv").read_text().splitlines()
    assert subsets and all((out / "bin" / f"{s.split()[0]}.ja-en.ja.bin").exists() for s in subsets)


def test_prepare_aspec_without_local_files_says_it_cannot_be_downloaded(tmp_path):
    proc = run_fail(["bash", os.path.join(ROOT, "scripts", "data", "prepare-aspec.sh"), "--out", str(tmp_path / "a")])
    assert "licensed by application" in proc.stderr


def make_opensubtitles_zip(path, docs=12, per_doc=9):
    pairs = sentence_pairs(docs * per_doc, 5)
    en, ja, ids = [], [], []
    for d in range(docs):
        for k in range(per_doc):
            e, _ = pairs[d * per_doc + k]
            en.append(e)
            ja.append("".join(JA[w.strip(".").lower()] for w in e.split()) + "。")
            ids.append(f"en/2000/{d}/{d}.xml.gz\tja/2000/{d}/{d}.xml.gz\t{k + 1}\t{k + 1}")
    with zipfile.ZipFile(path, "w") as bundle:
        bundle.writestr("OpenSubtitles.en-ja.en", "".join(x + "\n" for x in en))
        bundle.writestr("OpenSubtitles.en-ja.ja", "".join(x + "\n" for x in ja))
        bundle.writestr("OpenSubtitles.en-ja.ids", "".join(x + "\n" for x in ids))
        bundle.writestr("README", "OPUS")
    return en, ja, ids


def test_prepare_opensubtitles_document_split_and_2to2_variant(tmp_path):
    local = tmp_path / "opus"
    local.mkdir()
    en, ja, ids = make_opensubtitles_zip(local / "en-ja.txt.zip", docs=40, per_doc=6)
    out = tmp_path / "os"
    run(["bash", os.path.join(ROOT, "scripts", "data", "prepare-opensubtitles.sh"), "--local-dir", str(local),
         "--out", str(out), "--vocab-size", "70", "--offline"])
    docs = {s: set((out / "raw" / f"{s}.docs").read_text().splitlines()) for s in ("train", "valid", "test")}
    assert not (docs["train"] & docs["test"]) and not (docs["train"] & docs["valid"])  # whole documents
    sizes = {s: len((out / "raw" / f"{s}.en").read_text().splitlines()) for s in docs}
    assert sum(sizes.values()) == len(en) and sizes["train"] > sizes["test"]
    concat = (out / "concat" / "train.ja").read_text().splitlines()
    tok = (out / "tok" / "train.ja").read_text().splitlines()
    assert len(concat) == len(tok) and concat[1] == f"{tok[0]} <CONCAT> {tok[1]}"  # same document
    assert "<CONCAT>" in (out / "spm-concat" / "train.en").read_text().split()  # kept whole
    assert (out / "bin" / "train.ja-en.ja.bin").exists() and (out / "bin-concat" / "dict.ja.txt").exists()
    assert "<CONCAT>" in (out / "bin-concat" / "dict.en.txt").read_text()


def test_prepare_opensubtitles_plain_then_both_adds_the_same_2to2_corpus(tmp_path):
    """A directory prepared with --variant plain gains bin-concat when re-run with the default
    (both), identical to a single run's; it used to fail in bin-concat (the concat encoding
    lived inside the finished spm step)."""
    local = tmp_path / "opus"
    local.mkdir()
    make_opensubtitles_zip(local / "en-ja.txt.zip", docs=30, per_doc=6)
    script = os.path.join(ROOT, "scripts", "data", "prepare-opensubtitles.sh")
    common = ["--local-dir", str(local), "--vocab-size", "70", "--offline"]
    stepwise, whole = tmp_path / "stepwise", tmp_path / "whole"
    run(["bash", script, "--out", str(stepwise), "--variant", "plain", *common])
    assert (stepwise / "bin").is_dir() and not (stepwise / "bin-concat").exists()
    run(["bash", script, "--out", str(stepwise), *common])
    run(["bash", script, "--out", str(whole), *common])
    for name in ("dict.ja.txt", "dict.en.txt", "test.ja-en.ja.bin", "train.ja-en.en.bin"):
        assert (stepwise / "bin-concat" / name).read_bytes() == (whole / "bin-concat" / name).read_bytes(), name
    # a directory from before spm-concat was a step keeps its encoding in spm/concat: used, not redone
    shutil.rmtree(whole / "bin-concat")
    (whole / "spm-concat").rename(whole / "spm" / "concat")
    run(["bash", script, "--out", str(whole), *common])
    assert not (whole / "spm-concat").exists()
    for name in ("dict.ja.txt", "train.ja-en.en.bin"):
        assert (stepwise / "bin-concat" / name).read_bytes() == (whole / "bin-concat" / name).read_bytes(), name


def test_prepare_wmt_separate_bpe_learns_one_code_file_per_language(tmp_path):
    """The --bpe separate path (the WMT17 Zh-En default) on the En-De layout."""
    local = tmp_path / "downloads"
    local.mkdir()
    make_wmt14_en_de(local)
    out = tmp_path / "wmt14-separate"
    run(["bash", os.path.join(ROOT, "scripts", "data", "prepare-wmt14-en-de.sh"), "--out", str(out),
         "--local-dir", str(local), "--offline", "--merges", "60", "--bpe", "separate",
         "--checksums", str(local / "checksums.json"), "--cache", str(tmp_path / "cache")])
    assert (out / "bpe" / "codes.en").exists() and (out / "bpe" / "codes.de").exists()
    assert not (out / "bpe" / "codes").exists()
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            assert len((out / "bpe" / f"{split}.{lang}").read_text().splitlines()) == \
                len((out / "tok" / f"{split}.{lang}").read_text().splitlines())
    assert (out / "bin" / "dict.en.txt").read_text() != (out / "bin" / "dict.de.txt").read_text()


def test_opensubtitles_pairs_with_a_blank_side_are_dropped_and_counted(tmp_path, capsys):
    """The 2-to-2 step (concat_context --doc-ids) refuses a blank line; an OPUS release can hold
    empty subtitles: such pairs are dropped when the corpus is read, for both variants alike."""
    local = tmp_path / "opus"
    local.mkdir()
    en, ja, ids = make_opensubtitles_zip(tmp_path / "clean.zip", docs=40, per_doc=6)
    # one-sided, one-sided (spaces), both sides, and what the Moses tokeniser empties (control characters)
    en[3], ja[10], en[20], ja[20], en[30] = "", "  ", "", "", "\x01 \x02"
    with zipfile.ZipFile(local / "en-ja.txt.zip", "w") as bundle:
        for suffix, lines in (("en", en), ("ja", ja), ("ids", ids)):
            bundle.writestr(f"OpenSubtitles.en-ja.{suffix}", "".join(x + "\n" for x in lines))
    out = tmp_path / "raw"
    corpora.prepare_opensubtitles(str(out), str(local), offline=True)
    written = {s: (out / f"{s}.en").read_text().splitlines() for s in ("train", "valid", "test")}
    assert sum(map(len, written.values())) == len(en) - 4
    for split in written:
        for lang in ("ja", "docs"):
            assert len((out / f"{split}.{lang}").read_text().splitlines()) == len(written[split])
        assert all(line.strip() for lang in ("en", "ja") for line in (out / f"{split}.{lang}").read_text().splitlines())
    err = capsys.readouterr().err
    assert sum(int(n) for n in re.findall(r"\((\d+) with a blank side dropped", err)) == 4


# -- checksums and counts (local archives, truncated archives, dev/test sizes, manifest) ---------


def corpora_cli(*args):
    """python -m fairseq_ctx.data.corpora ... (returns the CompletedProcess, whatever its status)."""
    import subprocess
    import sys

    from tests.conftest import cli_env

    env = dict(cli_env(), FAIRSEQ_CTX_NO_MODELS="1")
    return subprocess.run([sys.executable, "-m", "fairseq_ctx.data.corpora", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=ROOT)


def tar_members(path, directory, names):
    """Pack extracted files back into a .tgz under their member paths (and remove them)."""
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            tar.add(directory / name, arcname=name)
            os.unlink(directory / name)


def md5_of(path):
    return hashlib.md5(open(path, "rb").read()).hexdigest()


def test_local_archive_with_a_published_md5_is_checked_and_nothing_is_written(tmp_path):
    local = tmp_path / "downloads"
    local.mkdir()
    make_wmt14_en_de(local)
    # a damaged copy of the WMT14 full test set under its real name: sacreBLEU publishes its md5
    (local / "test-full.tgz").write_bytes(b"\x1f\x8b not really the test set")
    out = tmp_path / "raw"
    with pytest.raises(corpora.CorpusError, match="md5 .* does not match the published md5 a8cd784e"):
        corpora.prepare_wmt("wmt14-en-de", str(out), str(local), str(tmp_path / "cache"), offline=True,
                            checksums=corpora.load_checksums(str(local / "checksums.json")))
    assert not out.exists() or not os.listdir(out)
    assert (local / "test-full.tgz").exists()  # the user's file is left alone


def test_manifest_md5_and_a_truncated_archive_give_one_clear_error(tmp_path):
    local = tmp_path / "downloads"
    local.mkdir()
    make_wmt14_en_de(local)
    tar_members(local / "test-full.tgz", local, ["test-full/newstest2014-deen-src.en.sgm",
                                                 "test-full/newstest2014-deen-ref.de.sgm"])
    europarl = local / "training-parallel-europarl-v7.tgz"
    manifest = write_manifest(tmp_path / "manifest.json", WMT14_TINY_COUNTS,
                              {"test-full.tgz": md5_of(local / "test-full.tgz"), europarl.name: md5_of(europarl)})
    out = tmp_path / "raw"
    proc = corpora_cli("wmt", "--corpus", "wmt14-en-de", "--outdir", out, "--local-dir", local, "--offline",
                       "--checksums", manifest, "--cache", tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    assert len((out / "test.de").read_text().splitlines()) == 13

    # truncated: the manifest's md5 catches it (the published one would, for a real test-full.tgz)
    data = europarl.read_bytes()
    europarl.write_bytes(data[: len(data) // 2])
    out2 = tmp_path / "raw2"
    proc = corpora_cli("wmt", "--corpus", "wmt14-en-de", "--outdir", out2, "--local-dir", local, "--offline",
                       "--checksums", manifest, "--cache", tmp_path / "cache")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{europarl.name}: md5" in proc.stderr and "does not match the md5 in" in proc.stderr
    assert not out2.exists() or not os.listdir(out2)

    # no md5 known (statmt.org publishes none for training archives): the reader says it is truncated
    no_europarl_md5 = write_manifest(tmp_path / "no-europarl.json", WMT14_TINY_COUNTS,
                                     {"test-full.tgz": md5_of(local / "test-full.tgz")})
    proc = corpora_cli("wmt", "--corpus", "wmt14-en-de", "--outdir", out2, "--local-dir", local, "--offline",
                       "--checksums", no_europarl_md5, "--cache", tmp_path / "cache")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot read the archive" in proc.stderr and "truncated or corrupt" in proc.stderr
    assert proc.stderr.strip().count("\n") <= 1 + proc.stderr.count("warning:")  # one message
    assert not out2.exists() or not os.listdir(out2)


def test_dev_and_test_counts_are_checked_against_the_known_sizes(tmp_path):
    local = tmp_path / "downloads"
    local.mkdir()
    make_wmt14_en_de(local)
    out = tmp_path / "raw"
    # without a manifest, the tiny newstest2013 (11 lines) is not the real one (3000)
    with pytest.raises(corpora.CorpusError, match=r"wmt14-en-de/valid: read 11 sentence pairs .* known size is 3000"):
        corpora.prepare_wmt("wmt14-en-de", str(out), str(local), str(tmp_path / "cache"), offline=True)
    assert not out.exists() or not os.listdir(out)
    # a manifest count for train is checked too (all archives together, before cleaning)
    manifest = write_manifest(tmp_path / "m.json", dict(WMT14_TINY_COUNTS, **{"wmt14-en-de/train": 299}))
    with pytest.raises(corpora.CorpusError, match=r"wmt14-en-de/train: read 300 sentence pairs .* count in"):
        corpora.prepare_wmt("wmt14-en-de", str(out), str(local), str(tmp_path / "cache"), offline=True,
                            checksums=corpora.load_checksums(str(manifest)))
    assert not out.exists() or not os.listdir(out)
    assert corpora.KNOWN_COUNTS["wmt14-en-fr/test"] == 3003 and corpora.KNOWN_COUNTS["wmt17-zh-en/valid"] == 2002


@pytest.mark.parametrize("content,message", [
    ("{not json", "not readable JSON"),
    ('{"archives": {"test.tgz": "xyz"}}', "32-digit hex md5"),
    ('{"counts": {"wmt14-en-de/test": "3003"}}', "number of sentences"),
    ('{"sums": {}}', "expected"),
])
def test_a_malformed_checksum_manifest_is_one_clear_error(tmp_path, content, message):
    (tmp_path / "m.json").write_text(content)
    with pytest.raises(corpora.CorpusError, match=message):
        corpora.load_checksums(str(tmp_path / "m.json"))
    with pytest.raises(corpora.CorpusError, match="not found"):
        corpora.load_checksums(str(tmp_path / "missing.json"))


def test_wmt17_zh_en_without_cwmt_is_refused_unless_asked_for(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    script = os.path.join(ROOT, "scripts", "data", "prepare-wmt17-zh-en.sh")
    out = tmp_path / "zh"
    proc = run_fail(["bash", script, "--out", str(out), "--local-dir", str(empty), "--offline"])
    assert "casia2015" in proc.stderr and "--extra-train PREFIX" in proc.stderr and "--without-cwmt" in proc.stderr
    assert proc.stderr.count("\n") == 1 and not out.exists()  # one message, nothing written
    with pytest.raises(corpora.CorpusError, match="CWMT corpora .*casia2015.*--without-cwmt"):
        corpora.prepare_wmt("wmt17-zh-en", str(out), str(empty), str(tmp_path / "cache"), offline=True)
    with pytest.raises(corpora.CorpusError, match="contradict"):
        corpora.prepare_wmt("wmt17-zh-en", str(out), str(empty), offline=True, extra_train=["x"], without_cwmt=True)
    # explicitly without: a warning, the settings record it (here it then stops at the missing archives)
    proc = run_fail(["bash", script, "--out", str(out), "--local-dir", str(empty), "--offline", "--without-cwmt"])
    assert "WITHOUT the CWMT corpora" in proc.stderr and "35% smaller" in proc.stderr
    assert "missing input" in proc.stderr
    assert (out / "settings").read_text().strip().endswith("extra=none cwmt=without")
    proc = run_fail(["bash", os.path.join(ROOT, "scripts", "data", "prepare-wmt14-en-de.sh"), "--out",
                     str(tmp_path / "de"), "--without-cwmt"])
    assert "only applies to wmt17-zh-en" in proc.stderr


def test_aspec_dev_test_counts_and_manifest_md5_are_checked(tmp_path):
    local = tmp_path / "ASPEC-JE"
    make_aspec(local)
    out = tmp_path / "raw"
    with pytest.raises(corpora.CorpusError, match=r"aspec/valid: read 13 sentence pairs .* known size is 1790"):
        corpora.prepare_aspec(str(local), str(out))
    assert not out.exists() or not os.listdir(out)
    manifest = write_manifest(tmp_path / "m.json", {"aspec/valid": 13, "aspec/test": 17},
                              {"dev/dev.txt": "0" * 32})
    with pytest.raises(corpora.CorpusError, match=r"dev\.txt: md5 .* does not match the md5 in"):
        corpora.prepare_aspec(str(local), str(out), checksums=corpora.load_checksums(str(manifest)))
    assert not out.exists() or not os.listdir(out)


def test_opensubtitles_zip_counts_and_truncation_are_checked(tmp_path):
    local = tmp_path / "opus"
    local.mkdir()
    en, _, _ = make_opensubtitles_zip(local / "en-ja.txt.zip", docs=40, per_doc=6)
    zipped = local / "en-ja.txt.zip"
    good = write_manifest(tmp_path / "good.json", {}, {"en-ja.txt.zip": md5_of(zipped)})
    out = tmp_path / "raw"
    corpora.prepare_opensubtitles(str(out), str(local), offline=True, checksums=corpora.load_checksums(str(good)))
    sizes = {s: len((out / f"{s}.en").read_text().splitlines()) for s in ("train", "valid", "test")}
    assert sum(sizes.values()) == len(en)
    wrong = write_manifest(tmp_path / "wrong.json", {"opensubtitles/test": sizes["test"] + 1})
    out2 = tmp_path / "raw2"
    with pytest.raises(corpora.CorpusError, match=f"opensubtitles/test: read {sizes['test']} sentence pairs"):
        corpora.prepare_opensubtitles(str(out2), str(local), offline=True,
                                      checksums=corpora.load_checksums(str(wrong)))
    data = zipped.read_bytes()
    zipped.write_bytes(data[: len(data) - 200])
    with pytest.raises(corpora.CorpusError, match="md5 .* does not match the md5 in"):
        corpora.prepare_opensubtitles(str(out2), str(local), offline=True, checksums=corpora.load_checksums(str(good)))
    proc = corpora_cli("opensubtitles", "--outdir", out2, "--local-dir", local, "--offline")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "cannot read the archive" in proc.stderr
    assert not out2.exists() or not os.listdir(out2)
