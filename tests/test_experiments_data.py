"""Data preparation: the download layer (local HTTP server) and every prepare script end
to end on tiny corpora generated in the real file layouts (sgm / tsv / OPUS / ASPEC)."""
import functools
import hashlib
import http.server
import io
import os
import random
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


def make_wmt14_en_de(local):
    """Europarl as its real archive; Common Crawl / News Commentary / dev / test as
    extracted files under their archive paths (both --local-dir layouts)."""
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
    return train, held


def test_prepare_wmt14_en_de_end_to_end_from_local_files(tmp_path):
    local = tmp_path / "downloads"
    local.mkdir()
    train, held = make_wmt14_en_de(local)
    out = tmp_path / "wmt14"
    cmd = ["bash", os.path.join(ROOT, "scripts", "data", "prepare-wmt14-en-de.sh"), "--out", str(out),
           "--local-dir", str(local), "--offline", "--merges", "60", "--cache", str(tmp_path / "cache")]
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
    again = run(cmd)  # idempotent: every step is skipped
    assert (again.stdout + again.stderr).count("done already, skipping") == 4
    # other settings into the same directory are refused
    proc = run_fail(cmd[:-4] + ["--merges", "61", "--offline", "--local-dir", str(local)])
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
                     "--local-dir", str(local), "--offline", "--cache", str(tmp_path / "cache")])
    assert "missing input: test-full.tgz" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (out / "raw").exists()  # only raw.partial, which the next run redoes
    assert sorted(p.name for p in out.iterdir()) == ["raw.partial", "settings"]


def test_wmt_archive_md5_mismatch_is_rejected(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "test-full.tgz").write_bytes(b"corrupt")
    with pytest.raises(ChecksumError, match="md5"):
        corpora.read_archive_pairs(corpora.CORPORA["wmt14-en-de"].test, None, str(cache), offline=True)
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
    return rows


def test_prepare_aspec_top_pairs_mecab_sentencepiece_binarized(tmp_path):
    local = tmp_path / "ASPEC-JE"
    rows = make_aspec(local)
    out = tmp_path / "aspec"
    run(["bash", os.path.join(ROOT, "scripts", "data", "prepare-aspec.sh"), "--local-dir", str(local),
         "--out", str(out), "--top", "100", "--vocab-size", "60", "--length-eval"])
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
    assert "<CONCAT>" in (out / "spm" / "concat" / "train.en").read_text().split()  # kept whole
    assert (out / "bin" / "train.ja-en.ja.bin").exists() and (out / "bin-concat" / "dict.ja.txt").exists()
    assert "<CONCAT>" in (out / "bin-concat" / "dict.en.txt").read_text()


def test_prepare_wmt_separate_bpe_learns_one_code_file_per_language(tmp_path):
    """The --bpe separate path (the WMT17 Zh-En default) on the En-De layout."""
    local = tmp_path / "downloads"
    local.mkdir()
    make_wmt14_en_de(local)
    out = tmp_path / "wmt14-separate"
    run(["bash", os.path.join(ROOT, "scripts", "data", "prepare-wmt14-en-de.sh"), "--out", str(out),
         "--local-dir", str(local), "--offline", "--merges", "60", "--bpe", "separate",
         "--cache", str(tmp_path / "cache")])
    assert (out / "bpe" / "codes.en").exists() and (out / "bpe" / "codes.de").exists()
    assert not (out / "bpe" / "codes").exists()
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            assert len((out / "bpe" / f"{split}.{lang}").read_text().splitlines()) == \
                len((out / "tok" / f"{split}.{lang}").read_text().splitlines())
    assert (out / "bin" / "dict.en.txt").read_text() != (out / "bin" / "dict.de.txt").read_text()
