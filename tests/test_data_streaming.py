"""Data preparation streams: a WMT-size corpus (WMT14 En-Fr: ~36M pairs) never sits in
memory. Readers yield lines as they decode them, the raw / clean / tokenise / SentencePiece
steps keep a peak that does not grow with the corpus, and parallel BPE gives the bytes one
core gives. (Peak RSS on millions of pairs: python -m fairseq_ctx.data.memory_check,
recorded in BENCHMARKS.md.)"""
import contextlib
import gzip
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zipfile

import pytest

from fairseq_ctx.data import bpe, corpora, pretokenize, streaming
from fairseq_ctx.data.memory_check import build_corpus
from fairseq_ctx.data.streaming import decoded_lines


def reference_lines(data: bytes, name: str):
    """How a corpus file is read, from its definition: UTF-8 (BOM dropped, bad bytes
    replaced where at most 1% of the lines hold some), split at \\n only, a trailing empty line dropped; .gz decompressed; SGM: the
    stripped <seg> contents; other files: whitespace runs collapsed."""
    import re

    if name.endswith(".gz"):
        data, name = gzip.decompress(data), name[:-3]
    lines = data.decode("utf-8-sig", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if name.endswith(".sgm"):
        found = (re.search(r"<seg[^>]*>(.*)</seg>", line, re.IGNORECASE) for line in lines)
        return [m.group(1).strip() for m in found if m]
    return [" ".join(line.replace("\r", "").split()) for line in lines]


_HEAD = "\ufeffa  b\r\n\tc\u00a0d\n\ne\rf\n".encode("utf-8")
# "é" (2 bytes) starts on the last byte of the first 1 MiB block: a reader that decoded each
# block on its own would turn it into two replacement characters
TRICKY = (_HEAD + b"x" * (streaming.BLOCK - 1 - len(_HEAD)) + "é".encode("utf-8")
          + b"\n" + b"ok\n" * 200 + b"bad \xff\nlast line without newline")
assert TRICKY.index("é".encode("utf-8")) == streaming.BLOCK - 1


@pytest.mark.parametrize("name", ["train.de", "train.de.gz", "newstest.sgm"])
def test_decoded_lines_read_as_the_definition_says(name):
    data = TRICKY
    if name.endswith(".sgm"):
        data = b'<doc>\n<seg id="1"> eins  </seg>\n<SEG id=2>zwei \xc3\xa9</SEG>\nno seg\n</doc>'
    if name.endswith(".gz"):
        data = gzip.compress(data)
    assert list(decoded_lines(io.BytesIO(data), name)) == reference_lines(data, name)


class CountingStream(io.RawIOBase):
    """A large byte stream that records how much of it was read."""

    def __init__(self, lines):
        self.data = io.BytesIO("".join(f"sentence {i} with some words\n" for i in range(lines)).encode())
        self.consumed = 0

    def readable(self):
        return True

    def read(self, size=-1):
        block = self.data.read(size)
        self.consumed += len(block)
        return block


def test_lines_come_before_the_input_is_read_through():
    stream = CountingStream(400_000)  # ~12 MB
    lines = decoded_lines(stream, "train.en")
    assert next(lines) == "sentence 0 with some words"
    assert stream.consumed <= 2**20 + 1  # one block, not the whole corpus


def _peak_bytes(function):
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_raw_step_peak_does_not_grow_with_the_corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(streaming, "BLOCK", 1 << 14)  # both sizes well above one block
    peaks = {}
    for pairs in (4_000, 32_000):
        local = tmp_path / f"local{pairs}"
        manifest = build_corpus(str(local), pairs)
        out = tmp_path / f"raw{pairs}"
        peaks[pairs] = _peak_bytes(lambda: corpora.prepare_wmt(
            "wmt14-en-de", str(out), str(local), str(tmp_path / "cache"), offline=True,
            checksums=corpora.load_checksums(manifest)))
        assert sum(1 for _ in open(out / "train.en")) == pairs
        assert not (out / ".spool").exists()
    # holding the corpus would take ~8 x as much at 8 x the pairs (32K pairs ~ 10 MB of text)
    assert peaks[32_000] < 1.5 * peaks[4_000] + 2**20, peaks


def test_clean_streams_and_keeps_what_the_rule_keeps(tmp_path, monkeypatch):
    monkeypatch.setattr(streaming, "BLOCK", 1 << 14)
    src, tgt = tmp_path / "s", tmp_path / "t"
    rows = [("a b c", "x y z"), ("a", "x y z w"), ("", "x"), ("a " * 300, "x " * 300), ("a b", "x y z")]
    src.write_text("".join(s + "\n" for s, _ in rows * 8000))
    tgt.write_text("".join(t + "\n" for _, t in rows * 8000))

    def rule(s, t, max_len=250, ratio=1.5):  # Moses clean-corpus-n, from its definition
        ls, lt = len(s.split()), len(t.split())
        return 1 <= ls <= max_len and 1 <= lt <= max_len and ls <= ratio * lt and lt <= ratio * ls

    peak = _peak_bytes(lambda: corpora.clean_files(str(src), str(tgt), str(tmp_path / "so"), str(tmp_path / "to")))
    kept = [(s, t) for s, t in rows * 8000 if rule(s, t)]
    assert (tmp_path / "so").read_text() == "".join(s + "\n" for s, _ in kept)
    assert (tmp_path / "to").read_text() == "".join(t + "\n" for _, t in kept)
    assert peak < os.path.getsize(src) / 4, peak  # the input is never held

    tgt.write_text((tmp_path / "to").read_text())  # now misaligned
    with pytest.raises(corpora.CorpusError, match="more lines"):
        corpora.clean_files(str(src), str(tgt), str(tmp_path / "so2"), str(tmp_path / "to2"))
    assert not (tmp_path / "so2").exists() and not (tmp_path / "to2").exists()


def test_parallel_tokenisation_is_bytewise_the_serial_one(tmp_path):
    raw = tmp_path / "raw.en"
    raw.write_text("".join(f"Hello, world #{i}: it's (quite) \"fine\"...\n" for i in range(1_000)))
    pretokenize.tokenize_file("en", str(raw), str(tmp_path / "one"), workers=1)
    pretokenize.tokenize_file("en", str(raw), str(tmp_path / "two"), workers=2)
    assert (tmp_path / "one").read_bytes() == (tmp_path / "two").read_bytes()
    assert len((tmp_path / "one").read_text().splitlines()) == 1_000
    assert "world # 1 : it 's ( quite )" in (tmp_path / "one").read_text()  # the tokeniser ran


def _upper(line):
    return line.upper()


def test_parallel_map_reads_at_most_one_round_ahead_of_what_it_wrote(tmp_path, monkeypatch):
    """Bounded memory: the reader is never more than round_lines lines ahead of
    the writer (a Pool.imap over the file would read all of it at once)."""
    src = tmp_path / "src"
    src.write_text("".join(f"line {i}\n" for i in range(20_000)))
    state = {"read": 0, "written": 0, "lead": 0}

    def counting_progress(lines, *args, **kwargs):
        for line in lines:
            state["read"] += 1
            state["lead"] = max(state["lead"], state["read"] - state["written"])
            yield line

    class CountingOut:
        def __init__(self, handle):
            self.handle = handle

        def writelines(self, lines):
            for line in lines:
                self.write(line)

        def write(self, line):
            state["written"] += line.count("\n")
            self.handle.write(line)

    real_atomic_write = streaming.atomic_write

    @contextlib.contextmanager
    def counting_atomic_write(path):
        with real_atomic_write(path) as handle:
            yield CountingOut(handle)

    monkeypatch.setattr(streaming, "progress", counting_progress)
    monkeypatch.setattr(streaming, "atomic_write", counting_atomic_write)
    streaming.parallel_map_lines(str(src), str(tmp_path / "dst"), _upper, "test", workers=3, round_lines=60)
    assert (tmp_path / "dst").read_text() == src.read_text().upper()
    assert state["written"] == 20_000
    assert state["lead"] <= 60, state


def _pid(line):
    time.sleep(0.002)  # long enough for both workers to get chunks
    return str(os.getpid())


def test_parallel_map_runs_on_worker_processes(tmp_path):
    src = tmp_path / "src"
    src.write_text("x\n" * 1_000)
    streaming.parallel_map_lines(str(src), str(tmp_path / "dst"), _pid, "test", workers=2, round_lines=100)
    pids = set((tmp_path / "dst").read_text().split())
    assert len(pids) == 2 and str(os.getpid()) not in pids, pids


def _fail_on_seven(line):
    if line == "7":
        raise ValueError("bad line 7")
    return line


def test_a_worker_error_is_raised_and_leaves_no_output(tmp_path):
    src = tmp_path / "src"
    src.write_text("".join(f"{i}\n" for i in range(100)))
    with pytest.raises(ValueError, match="bad line 7"):
        streaming.parallel_map_lines(str(src), str(tmp_path / "dst"), _fail_on_seven, "test", workers=2)
    assert os.listdir(tmp_path) == ["src"]


def _subword_nmt():
    return shutil.which("subword-nmt") or os.path.join(os.path.dirname(sys.executable), "subword-nmt")


def _realistic_lines(rng, n):
    """Tokenised-looking text: mixed case, digits, punctuation, Moses entities, accents, CJK,
    empty lines, leading / trailing / repeated spaces, a few very long lines."""
    vocabulary = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyzéüçßABCDE0123456789-")
                          for _ in range(rng.randint(1, 12))) for _ in range(3_000)]
    vocabulary += ["&apos;s", "&quot;", "&amp;", "@-@", ",", ".", "(", ")", "東京", "Müller", "l&apos;"]
    lines = []
    for i in range(n):
        words = [rng.choice(vocabulary) for _ in range(rng.choice([0, 3, 12, 25, 400 if i % 997 == 0 else 8]))]
        line = " ".join(words)
        if i % 13 == 0:
            line = "  " + line
        if i % 17 == 0:
            line = line + " "
        if i % 19 == 0:
            line = line.replace(" ", "  ", 1)
        lines.append(line)
    return lines


@pytest.fixture(scope="module")
def bpe_text(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe")
    rng = random.Random(0)
    text, other = root / "train.en", root / "train.de"
    text.write_text("".join(line + "\n" for line in _realistic_lines(rng, 6_000)))
    other.write_text("".join(line + "\n" for line in _realistic_lines(rng, 4_000)))
    codes = root / "codes"  # subword-nmt's own learn-bpe, one core
    subprocess.run([_subword_nmt(), "learn-bpe", "-s", "300", "--input", str(text), "--output", str(codes)],
                   check=True)
    return text, other, codes


def test_learn_bpe_on_workers_is_bytewise_subword_nmts_on_one_core(bpe_text, tmp_path):
    text, _, codes = bpe_text
    bpe.main(["learn", "--symbols", "300", "--workers", "2", "--input", str(text), "--output", str(tmp_path / "codes")])
    assert (tmp_path / "codes").read_bytes() == codes.read_bytes()
    assert os.listdir(tmp_path) == ["codes"]  # no temporaries left


def test_fewer_merges_than_asked_are_said_in_one_line(tmp_path, capsys):
    """subword-nmt stops where no pair occurs --min-frequency times ("no pair has frequency >= 2",
    lost among the preparation's logs): 233 of 300 merges on a small slice went unsaid."""
    text = tmp_path / "train.en"
    text.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 3)
    learned = bpe.learn_file(str(text), str(tmp_path / "codes"), 500)
    merges = [line for line in (tmp_path / "codes").read_text().splitlines() if not line.startswith("#version")]
    assert 0 < learned == len(merges) < 500
    assert f"learn-bpe: warning: {learned} of 500 merges learned" in capsys.readouterr().err
    assert bpe.learn_file(str(text), str(tmp_path / "few"), 3) == 3 and "warning" not in capsys.readouterr().err


def test_joint_learn_bpe_is_subword_nmts_learn_joint_bpe_and_vocab(bpe_text, tmp_path):
    text, other, _ = bpe_text
    subprocess.run([_subword_nmt(), "learn-joint-bpe-and-vocab", "-s", "300", "--input", str(text), str(other),
                    "-o", str(tmp_path / "joint"), "--write-vocabulary", str(tmp_path / "v1"), str(tmp_path / "v2")],
                   check=True, env=dict(os.environ, TMPDIR=str(tmp_path)))
    bpe.learn_file([str(text), str(other)], str(tmp_path / "ours"), 300, workers=2)
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "joint").read_bytes()


def test_apply_bpe_on_workers_is_bytewise_subword_nmts_on_one_core(bpe_text, tmp_path, monkeypatch):
    text, _, codes = bpe_text
    serial = tmp_path / "serial"
    with open(text) as stdin, open(serial, "w") as stdout:
        subprocess.run([_subword_nmt(), "apply-bpe", "-c", str(codes)], stdin=stdin, stdout=stdout, check=True)
    monkeypatch.setattr(streaming, "ROUND_LINES", 500)  # many blocks
    bpe.main(["apply", "--codes", str(codes), "--workers", "2", "--input", str(text),
              "--output", str(tmp_path / "parallel")])
    assert (tmp_path / "parallel").read_bytes() == serial.read_bytes()
    assert "@@" in serial.read_text() and "\n  " in serial.read_text() and " \n" in serial.read_text()

    # and the segmentation did run on two worker processes
    monkeypatch.setattr(bpe, "_segment", _pid)
    bpe.apply_file(str(codes), str(text), str(tmp_path / "pids"), workers=2)
    pids = set((tmp_path / "pids").read_text().split())
    assert len(pids) == 2 and str(os.getpid()) not in pids, pids


def test_a_carriage_return_inside_a_segment_stays_in_its_line(tmp_path):
    """Counted lines are written lines: a \r inside an SGM segment is not a line break."""
    spool = tmp_path / "part"
    spool.write_bytes("one\rstill one\ntwo\n".encode())
    corpora._concatenate([str(spool)], str(tmp_path / "out"))
    assert (tmp_path / "out").read_bytes() == spool.read_bytes()


def _aspec(local, n, shuffle=False):
    """ASPEC-JE layout with ``n`` training rows (scores descending unless ``shuffle``)."""
    rng = random.Random(n)
    rows = [(1 - i / n, f"ja{i} " + "語 " * rng.randint(1, 20), f"en{i} " + "word " * rng.randint(1, 20))
            for i in range(n)]
    lines = [f"{score:.6f} ||| TR-{i} ||| X ||| {ja.strip()} ||| {en.strip()}" for i, (score, ja, en) in enumerate(rows)]
    if shuffle:
        rng.shuffle(lines)
    (local / "train").mkdir(parents=True)
    half = n // 2
    (local / "train" / "train-1.txt").write_text("".join(line + "\n" for line in lines[:half]))
    (local / "train" / "train-2.txt").write_text("".join(line + "\n" for line in lines[half:]))
    for split in ("dev", "test"):
        (local / split).mkdir()
        (local / split / f"{split}.txt").write_text("".join(f"{i} ||| D ||| j{i} ||| e{i}\n" for i in range(5)))
    return lines


def _aspec_checksums(tmp_path, n):
    path = tmp_path / f"aspec-{n}.json"
    path.write_text(json.dumps({"archives": {}, "counts": {"aspec/valid": 5, "aspec/test": 5, "aspec/train": n}}))
    return corpora.load_checksums(str(path))


def test_aspec_top_pairs_stream_and_out_of_order_files_still_give_the_best(tmp_path):
    """train = the ``top`` pairs of highest alignment score, ja -> en, whatever the files' order;
    in order (as published) the peak does not grow with the corpus."""
    peaks = {}
    for n in (2_000, 16_000):
        local = tmp_path / f"aspec{n}"
        lines = _aspec(local, n)
        out = tmp_path / f"out{n}"
        peaks[n] = _peak_bytes(lambda: corpora.prepare_aspec(str(local), str(out), top=n // 2,
                                                            checksums=_aspec_checksums(tmp_path, n)))
        assert (out / "train.en").read_text() == "".join(line.split(" ||| ")[4] + "\n" for line in lines[: n // 2])
    assert peaks[16_000] < 1.5 * peaks[2_000] + 2**20, peaks

    local = tmp_path / "shuffled"
    lines = _aspec(local, 1_000, shuffle=True)
    corpora.prepare_aspec(str(local), str(tmp_path / "s"), top=100, checksums=_aspec_checksums(tmp_path, 1_000))
    best = sorted(lines, key=lambda line: -float(line.split(" ||| ")[0]))[:100]
    assert (tmp_path / "s" / "train.ja").read_text() == "".join(line.split(" ||| ")[3] + "\n" for line in best)


def _opensubtitles(path, n):
    with zipfile.ZipFile(path, "w") as bundle:
        bundle.writestr("OpenSubtitles.en-ja.en", "".join(f"english {i} line\n" for i in range(n)))
        bundle.writestr("OpenSubtitles.en-ja.ja", "".join(f"日本語 {i}\n" for i in range(n)))
        bundle.writestr("OpenSubtitles.en-ja.ids", "".join(f"en/{i // 50}.xml.gz\tja/{i // 50}.xml.gz\t1\t1\n"
                                                          for i in range(n)))


def test_opensubtitles_streams_and_refuses_members_of_different_length(tmp_path, monkeypatch):
    monkeypatch.setattr(streaming, "BLOCK", 1 << 14)  # both sizes well above one block
    peaks = {}
    for n in (4_000, 32_000):
        local = tmp_path / f"opus{n}"
        local.mkdir()
        _opensubtitles(local / "en-ja.txt.zip", n)
        out = tmp_path / f"out{n}"
        peaks[n] = _peak_bytes(lambda: corpora.prepare_opensubtitles(str(out), str(local), offline=True))
        assert sum(len((out / f"{s}.en").read_text().splitlines()) for s in ("train", "valid", "test")) == n
        for split in ("train", "valid", "test"):  # aligned: line k of en, ja and docs is pair k
            en, ja, docs = ((out / f"{split}.{kind}").read_text().splitlines() for kind in ("en", "ja", "docs"))
            assert [e.split()[1] for e in en] == [j.split()[1] for j in ja]
            assert all(d == f"en/{int(e.split()[1]) // 50}.xml.gz ja/{int(e.split()[1]) // 50}.xml.gz"
                       for e, d in zip(en, docs))
    assert peaks[32_000] < 1.5 * peaks[4_000] + 2**20, peaks

    bad = tmp_path / "bad"
    bad.mkdir()
    with zipfile.ZipFile(bad / "en-ja.txt.zip", "w") as bundle:
        bundle.writestr("OpenSubtitles.en-ja.en", "a\nb\nc\n")
        bundle.writestr("OpenSubtitles.en-ja.ja", "a\nb\n")
        bundle.writestr("OpenSubtitles.en-ja.ids", "x y\nx y\nx y\n")
    with pytest.raises(corpora.CorpusError, match="OpenSubtitles.en-ja.ja ended at line 3"):
        corpora.prepare_opensubtitles(str(tmp_path / "badout"), str(bad), offline=True)
    assert not (tmp_path / "badout").exists() or not os.listdir(tmp_path / "badout")


def test_progress_in_a_batch_log_writes_one_record_per_line_without_repeats(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)  # not a terminal
    monkeypatch.setenv("FAIRSEQ_CTX_PROGRESS", "1")
    monkeypatch.setattr(streaming, "LOG_INTERVAL", 0.0)  # a record for every step
    for _ in streaming.progress(range(4), "tokenise x", total=4):
        pass
    records = log.getvalue().split("\n")
    assert "\r" not in log.getvalue() and records[-1] == "", records
    assert all(r.startswith("tokenise x:") for r in records[:-1]), records
    assert len(set(records[:-1])) == len(records[:-1])  # no record twice
    assert [r.split("|")[0].split()[-1] for r in records[:-1]][-1] == "100%", records  # the final count


def test_a_quick_step_prints_nothing_in_a_batch_log(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setenv("FAIRSEQ_CTX_PROGRESS", "1")
    for _ in streaming.progress(range(1000), "clean", total=1000):
        pass
    assert log.getvalue() == ""


def _kill_self_on_seven(line):
    if line == "7":
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does
    return line


def test_a_killed_worker_is_an_error_not_a_hang(tmp_path):
    src = tmp_path / "src"
    src.write_text("".join(f"{i}\n" for i in range(100)))
    code = ("import sys; from fairseq_ctx.data import streaming; from tests.test_data_streaming import "
            "_kill_self_on_seven as f\n"
            f"streaming.parallel_map_lines({str(src)!r}, {str(tmp_path / 'dst')!r}, f, 'test', workers=2)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          env=dict(os.environ, FAIRSEQ_CTX_NO_MODELS="1"))
    assert proc.returncode != 0 and "BrokenProcessPool" in proc.stderr, proc.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_a_worker_setup_error_is_raised_at_once_and_leaves_no_output(tmp_path):
    src = tmp_path / "src"
    src.write_text("a b c\n" * 100)
    started = time.time()
    with pytest.raises(FileNotFoundError, match="no-such-codes"):
        bpe.apply_file(str(tmp_path / "no-such-codes"), str(src), str(tmp_path / "dst"), workers=2)
    assert time.time() - started < 30 and sorted(os.listdir(tmp_path)) == ["src"]


def test_default_workers_are_the_cpus_this_job_may_use():
    assert streaming.default_workers() == min(len(os.sched_getaffinity(0)),
                                              streaming.cgroup_cpu_limit() or len(os.sched_getaffinity(0)))


@pytest.mark.parametrize("files, cpus", [
    ({"cpu.max": "150000 100000\n"}, 2),  # v2, docker --cpus 1.5
    ({"cpu.max": "50000 100000\n"}, 1),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4),  # v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
])
def test_a_containers_cpu_quota_limits_the_workers(tmp_path, files, cpus):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert streaming.cgroup_cpu_limit(str(tmp_path)) == cpus


def test_the_default_workers_obey_a_quota_below_the_affinity(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))  # a 64-core host
    monkeypatch.setattr(streaming, "cgroup_cpu_limit", lambda: 2)
    assert streaming.default_workers() == 2


# -- input that is not UTF-8 ----------------------------------------------------------------------

GBK_LINE = "他们企图暗杀总统。".encode("gbk") + b"\n"


def test_a_file_in_another_encoding_is_refused_with_one_message(tmp_path):
    """A GBK corpus would otherwise come out as U+FFFD garbage with the right line count."""
    src, tgt = tmp_path / "train.zh", tmp_path / "train.en"
    src.write_bytes(GBK_LINE * 50)
    tgt.write_text("They tried to assassinate the president.\n" * 50)
    with pytest.raises(SystemExit) as exit_info:
        corpora.main(["clean", "--src-in", str(src), "--tgt-in", str(tgt),
                      "--src-out", str(tmp_path / "c.zh"), "--tgt-out", str(tmp_path / "c.en")])
    message = str(exit_info.value.code)
    assert "train.zh" in message and "not valid UTF-8" in message and "first: line 1" in message, message
    assert sorted(os.listdir(tmp_path)) == ["train.en", "train.zh"]


def test_a_file_in_another_encoding_is_refused_before_it_is_read_through():
    stream = CountingStream(0)
    stream.data = io.BytesIO(GBK_LINE * 1_000_000)  # ~19 MB
    with pytest.raises(streaming.NotUtf8Error, match="not valid UTF-8"):
        for _ in decoded_lines(stream, "train.zh"):
            pass
    assert stream.consumed <= 2 * streaming.BLOCK


def test_a_few_broken_lines_are_replaced_and_counted_in_one_warning(capsys):
    data = "".join(f"line {i}\n" for i in range(1000)).encode() + b"broken \xff\xfe\n" + b"after\n"
    lines = list(decoded_lines(io.BytesIO(data), "crawl.en"))
    assert len(lines) == 1002 and lines[1000] == "broken \ufffd\ufffd" and lines[1001] == "after"
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "crawl.en: 1 of 1002 lines" in err and "line 1001" in err, err


# -- stopping a parallel step ---------------------------------------------------------------------

def _slow_pid(line):
    directory = os.environ["PID_DIR"]
    open(os.path.join(directory, str(os.getpid())), "w").close()
    time.sleep(0.01)
    return line


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its reaper is gone too
        return stat.read().split(")")[-1].split()[0] != "Z"


def _start_slow_parallel_map(tmp_path):
    src, pid_dir = tmp_path / "src", tmp_path / "pids"
    # long lines: a block is larger than a pipe's buffer, as real blocks of text are
    src.write_text("".join(f"{i} {'word ' * 20}\n" for i in range(100_000)))
    pid_dir.mkdir()
    code = ("from fairseq_ctx.data import streaming; from tests.test_data_streaming import _slow_pid as f\n"
            f"streaming.parallel_map_lines({str(src)!r}, {str(tmp_path / 'dst')!r}, f, 'test', workers=2)")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            env=dict(os.environ, FAIRSEQ_CTX_NO_MODELS="1", PID_DIR=str(pid_dir)))
    deadline = time.time() + 60
    while len(os.listdir(pid_dir)) < 2 and time.time() < deadline:
        time.sleep(0.1)
    workers = [int(p) for p in os.listdir(pid_dir)]
    assert len(workers) == 2, workers
    return proc, workers


def _wait_gone(pids, seconds):
    deadline = time.time() + seconds
    while any(_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_sigterm_stops_the_workers_and_leaves_no_output(tmp_path):
    """kill / timeout / scancel send SIGTERM: the step ends at once, its workers with it, and
    no temporary output is left beside the destination."""
    proc, workers = _start_slow_parallel_map(tmp_path)
    time.sleep(1.0)  # mid-block: the step's main thread waits on a result, the pool's threads run
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert _wait_gone(workers, 10) == []
    assert sorted(os.listdir(tmp_path)) == ["pids", "src"], os.listdir(tmp_path)


def test_workers_die_with_a_step_that_is_killed_outright(tmp_path):
    proc, workers = _start_slow_parallel_map(tmp_path)
    proc.kill()  # SIGKILL: no handler runs in the step itself
    proc.wait(timeout=30)
    try:
        assert _wait_gone(workers, 10) == []
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# -- resources -------------------------------------------------------------------------------------

def test_the_bpe_word_cache_of_a_worker_stays_bounded(bpe_text, monkeypatch):
    _, _, codes = bpe_text
    monkeypatch.setattr(bpe, "CACHE_WORDS", 50)
    bpe._load_codes(str(codes))
    for i in range(1000):
        bpe._segment(f"rareword{i} another{i}")
    assert len(bpe._bpe.cache) <= 51


def test_data_preparation_uses_every_cpu_even_with_omp_num_threads_set():
    """GNU nproc obeys OMP_NUM_THREADS, which cluster job scripts often set to 1."""
    common = os.path.join(os.path.dirname(streaming.__file__), os.pardir, "scripts", "data", "common.sh")
    env = {k: v for k, v in os.environ.items() if k != "WORKERS"}  # (a parallel test worker sets it)
    out = subprocess.run(["bash", "-c", f'source "{common}"; echo "$WORKERS"'], capture_output=True, text=True,
                         env=dict(env, OMP_NUM_THREADS="1", PY=sys.executable), check=True).stdout
    assert out.split()[-1] == str(streaming.default_workers())


def test_sentencepiece_encoding_on_workers_is_the_librarys_line_by_line(bpe_text, tmp_path, monkeypatch):
    import sentencepiece as spm

    from fairseq_ctx.data import sentencepiece_model

    text, _, _ = bpe_text
    sentencepiece_model.train(str(text), str(tmp_path / "spm"), 300)
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    want = "".join(" ".join(processor.encode(line.strip(), out_type=str)) + "\n"
                   for line in text.read_text().split("\n")[:-1])
    monkeypatch.setattr(streaming, "ROUND_LINES", 500)  # many blocks
    sentencepiece_model.main(["encode", "--model", str(tmp_path / "spm.model"), "--workers", "2",
                              "--input", str(text), "--output", str(tmp_path / "pieces")])
    assert (tmp_path / "pieces").read_text() == want and "\u2581" in want

    monkeypatch.setattr(sentencepiece_model, "_encode_line", _pid)  # and it ran on two workers
    sentencepiece_model.encode_file(str(tmp_path / "spm.model"), str(text), str(tmp_path / "pids"), workers=2)
    pids = set((tmp_path / "pids").read_text().split())
    assert len(pids) == 2 and str(os.getpid()) not in pids, pids
