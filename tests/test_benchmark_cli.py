"""fairseq-ctx-benchmark's command line (fairseq_ctx/benchmarking/cli.py): options and system
specs refused before any model is built (exit status 2), the baseline each system is compared
with, and exit status 1 when a system failed. Fast: the refusals never reach run_benchmark
(it is replaced by one that fails the test), and the one real run fails at its first build."""
import json

import pytest

from fairseq_ctx import cli
from fairseq_ctx.benchmarking import cli as bench_cli
from fairseq_ctx.benchmarking.run import BenchConfig

FAST = ["--dims", "tiny", "--src-lens", "8", "--device", "cpu", "--threads", "1", "--quick", "--no-memory",
        "--batch-sentences", "2", "--vocab", "100"]


@pytest.fixture
def no_run(monkeypatch):
    def run_benchmark(*args, **kwargs):
        raise AssertionError("the benchmark ran: the options should have been refused first")

    monkeypatch.setattr(bench_cli, "run_benchmark", run_benchmark)


def refused(capsys, *argv):
    with pytest.raises(SystemExit) as info:
        cli.benchmark([*FAST, *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


@pytest.mark.parametrize("argv, says", [
    # fault: ZeroDivisionError in run.py (bsz = max_tokens // 0)
    (["--src-lens", "0"], "--src-lens must be >= 2 (tokens, EOS included), got 0"),
    (["--src-lens", "20", "1"], "--src-lens must be >= 2 (tokens, EOS included), got 1"),
    (["--src-lens", "20", "20"], "a value is given twice"),
    # fault: --steps 0 ran and reported every training column as "-" (exit 0)
    (["--steps", "0", "--warmup", "0"], "--steps must be >= 1, got 0"),
    (["--warmup", "-1"], "--warmup must be >= 0, got -1"),
    (["--decode-repeats", "0"], "--decode-repeats must be >= 1, got 0"),
    (["--beams", "4", "0"], "--beams must be >= 1, got 0"),
    (["--batch-sentences", "-2"], "--batch-sentences must be >= 1, got -2"),
    (["--vocab", "4"], "--vocab must be >= 5"),
    (["--at-update", "-1"], "--at-update must be >= 0, got -1"),
])
def test_options_out_of_range_are_refused(no_run, capsys, argv, says):
    assert says in refused(capsys, "--system", "x=--arch transformer", *argv)


@pytest.mark.parametrize("argv, says", [
    # fault: ValueError traceback "unknown baseline 'nope'"
    (["--baseline", "t=--arch transformer", "--system", "x@nope=--arch transformer"], "unknown baseline 'nope'"),
    (["--system", "x@nope=--arch transformer"], "unknown baseline 'nope'"),
    # fault: a duplicate name gave a traceback
    (["--system", "x=--arch transformer", "--system", "x=--arch transformer --dropout 0.2"],
     "duplicate system name 'x'"),
    (["--baseline", "t=--arch transformer", "--system", "t=--arch transformer"], "duplicate system name 't'"),
    (["--system", "transformer=--arch transformer"], "has the name of the assumed baseline"),
    (["--system", "=--arch transformer"], "empty system name"),
    (["--system", "--arch transformer"], "expected NAME=ARGS"),
])
def test_bad_system_specs_are_refused(no_run, capsys, argv, says):
    assert says in refused(capsys, *argv)


def test_config_checked_by_run_benchmark_too():
    for bad in [dict(src_lens=(0,)), dict(steps=0), dict(beams=()), dict(decode_repeats=0)]:
        with pytest.raises(ValueError, match="BenchConfig"):
            BenchConfig(**bad).check()
    BenchConfig().check()


def test_baselines_by_family():
    # a system is compared with the first baseline of its family, an lstm* arch with an lstm
    pair = bench_cli.pair_systems
    baselines, systems, lines = pair(["t=--arch transformer", "l=--arch lstm"],
                                     ["c=--arch transformer_context_aware", "mh=--arch lstm_multihop",
                                      "x@t=--arch lstm_multihop"])
    assert baselines == ["t=--arch transformer", "l=--arch lstm"]
    assert systems == ["c@t=--arch transformer_context_aware", "mh@l=--arch lstm_multihop",
                       "x@t=--arch lstm_multihop"]
    assert lines == ["baselines by model family (no @BASELINE): c -> t, mh -> l"]
    # no baseline of its family: the first, with a warning
    _, systems, lines = pair(["t=--arch transformer"], ["mh=--arch lstm_multihop"])
    assert systems == ["mh@t=--arch lstm_multihop"] and lines[0].startswith("warning: mh (lstm family)")
    # all with the first baseline: nothing to say
    assert pair(["t=--arch transformer"], ["c=--arch transformer_cross_agg"])[2] == []


def test_a_big_arch_is_timed_against_the_stock_big_transformer():
    """--dims base keeps a *_big arch's sizes (1024 / 4096 / 16 heads): paired with the base
    Transformer (the family rule read only lstm*), its ratios counted the Big model's size as the
    mechanism's cost."""
    pair = bench_cli.pair_systems
    baselines, systems, lines = pair(["t=--arch transformer", "big=--arch transformer_vaswani_wmt_en_de_big"],
                                     ["c=--arch transformer_context_aware", "cb=--arch transformer_context_aware_big",
                                      "sb=--arch=transformer_sentential_big", "t2t=--arch transformer_wmt_en_de_big_t2t"])
    assert systems == ["c@t=--arch transformer_context_aware", "cb@big=--arch transformer_context_aware_big",
                       "sb@big=--arch=transformer_sentential_big", "t2t@big=--arch transformer_wmt_en_de_big_t2t"]
    assert lines == ["baselines by model family (no @BASELINE): c -> t, cb -> big, sb -> big, t2t -> big"]
    baselines, systems, lines = pair([], ["xb=--arch transformer_cross_agg_big", "x=--arch transformer_cross_agg"])
    assert baselines == ["transformer=--arch transformer", "transformer_big=--arch transformer_vaswani_wmt_en_de_big"]
    assert systems == ["xb@transformer_big=--arch transformer_cross_agg_big", "x@transformer=--arch transformer_cross_agg"]
    assert pair([], ["xb=--arch transformer_cross_agg_big"])[0] == [
        "transformer_big=--arch transformer_vaswani_wmt_en_de_big"]
    # the Big that ours are built on first, whatever the order
    _, systems, _ = pair(["t=--arch transformer", "t2t=--arch transformer_wmt_en_de_big_t2t",
                          "big=--arch transformer_vaswani_wmt_en_de_big"], ["cb=--arch transformer_context_aware_big"])
    assert systems == ["cb@big=--arch transformer_context_aware_big"]
    # no big baseline given: the first, with a warning
    _, systems, lines = pair(["t=--arch transformer"], ["xb=--arch transformer_cross_agg_big"])
    assert systems == ["xb@t=--arch transformer_cross_agg_big"] and lines[0].startswith(
        "warning: xb (transformer_big family) is compared with t")


def test_without_baseline_the_stock_arch_of_each_family_is_assumed_and_said():
    # fault: transformer=--arch transformer was inserted silently, lstm_multihop measured against it
    pair = bench_cli.pair_systems
    baselines, systems, lines = pair([], ["mh=--arch lstm_multihop"])
    assert baselines == ["lstm=--arch lstm"] and systems == ["mh@lstm=--arch lstm_multihop"]
    assert lines == ["no --baseline given: assumed lstm=--arch lstm (the stock arch of each system's family); "
                     "mh -> lstm"]
    baselines, systems, _ = pair([], ["c=--arch transformer_context_aware", "mh=--arch lstm_multihop"])
    assert baselines == ["transformer=--arch transformer", "lstm=--arch lstm"]
    assert systems == ["c@transformer=--arch transformer_context_aware", "mh@lstm=--arch lstm_multihop"]
    assert pair([], []) == (["transformer=--arch transformer"], [],
                            ["no --baseline given: assumed transformer=--arch transformer"])
    assert pair([], ["mh@transformer=--arch lstm_multihop"])[0] == ["transformer=--arch transformer"]


def test_the_assumed_baseline_is_said_on_stderr(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(bench_cli, "run_benchmark",
                        lambda specs, cfg, on_progress=None: seen.append(specs) or {"rows": [], "failed": {}})
    monkeypatch.setattr(bench_cli, "markdown_report", lambda results: "")
    assert cli.benchmark([*FAST, "--system", "mh=--arch lstm_multihop"]) == 0
    assert [(s.name, s.baseline, s.args) for s in seen[0]] == [("lstm", None, "--arch lstm"),
                                                                ("mh", "lstm", "--arch lstm_multihop")]
    assert "fairseq-ctx-benchmark: no --baseline given: assumed lstm=--arch lstm" in capsys.readouterr().err


def test_exit_status_1_when_a_system_failed(tmp_path, capsys):
    # fault: exit status 0 with every system FAILED; the tables are still written
    md, js = tmp_path / "fb.md", tmp_path / "fb.json"
    status = cli.benchmark([*FAST, "--baseline", "transformer=--arch transformer --bogus-opt 3",
                            "--system", "x=--arch transformer_cross_agg", "--markdown", str(md), "--json", str(js)])
    assert status == 1
    err = capsys.readouterr().err
    assert "fairseq-ctx-benchmark: 2 of 2 systems failed (transformer: build, x: baseline transformer failed)" in err
    assert "`transformer`: FAILED in build" in md.read_text()
    assert set(json.loads(js.read_text())["failed"]) == {"transformer", "x"}
    assert bench_cli.exit_status({"rows": [1], "failed": {}}) == 0
    assert bench_cli.exit_status({"rows": [1], "failed": {"x": {}}}) == 1


def test_exit_status_1_when_the_memory_measurement_failed(monkeypatch, capsys):
    """Its columns are empty: status 0 read as a complete benchmark."""
    monkeypatch.setattr(bench_cli, "run_benchmark", lambda specs, cfg, on_progress=None: {
        "rows": [1], "failed": {}, "memory_error": "Traceback ...\nRuntimeError: out of memory\n"})
    monkeypatch.setattr(bench_cli, "markdown_report", lambda results: "")
    assert cli.benchmark([*FAST, "--system", "mh=--arch lstm_multihop"]) == 1
    assert "the memory measurement failed" in capsys.readouterr().err
