"""CPU smoke test of the benchmark harness (fairseq_ctx/benchmarking/: fairseq-ctx-benchmark, scripts/benchmark.py).

Tiny dims, 2 timed steps: stock transformer vs stock transformer with another option,
and stock lstm vs stock lstm with another option, in ONE run (two baselines, a system
naming its baseline with ``@``). The architectures of issues 3-6 are added by the lead
once they exist (see EXTRA_SYSTEMS).
"""
import json
import time

import pytest
import torch

from fairseq_ctx import benchmarking as B
from fairseq_ctx.benchmarking import batches, systems, timing

# (name@baseline=ARGS) of plugin systems to include in the smoke run once they exist.
EXTRA_SYSTEMS = [
    "ctx=--arch transformer_context_aware --encoder-context deep_global+deep",
    "multihop@lstm=--arch lstm_multihop --attention-heads 2 --attention-hops 2",
    "cross_agg=--arch transformer_cross_agg",
    "sentential=--arch transformer_sentential --sentential-deep tam",
]


def test_system_specs():
    specs = B.resolve_systems(
        ["transformer=--arch transformer", "lstm=--arch lstm"],
        ["a=--arch transformer --dropout 0.2", "b@lstm=--arch lstm --decoder-hidden-size 96"],
    )
    by = {s.name: s for s in specs}
    assert [s.name for s in specs] == ["transformer", "lstm", "a", "b"]
    assert by["transformer"].is_baseline and by["transformer"].baseline is None
    assert by["a"].baseline == "transformer"  # default: the first baseline
    assert by["b"].baseline == "lstm"
    assert by["b"].args == "--arch lstm --decoder-hidden-size 96"
    with pytest.raises(ValueError):
        B.resolve_systems(["t=--arch transformer"], ["x@nope=--arch transformer"])
    with pytest.raises(ValueError):
        B.resolve_systems(["t=--arch transformer"], ["t=--arch transformer"])
    with pytest.raises(ValueError):
        B.resolve_systems([], ["x=--arch transformer"])


def test_dim_overrides_by_family():
    t = systems.build_argv("--arch transformer --encoder-layers 3", "tiny", "/nonexistent")
    l = systems.build_argv("--arch lstm", "tiny", "/nonexistent")
    assert "--encoder-ffn-embed-dim" in t and "--encoder-hidden-size" not in t
    assert "--encoder-hidden-size" in l and "--encoder-ffn-embed-dim" not in l
    # only options the arch accepts (the transformer has no --decoder-input-dim)
    assert "--decoder-input-dim" not in t
    # an option given by the system wins: it comes after the override
    idx = [i for i, a in enumerate(t) if a == "--encoder-layers"]
    assert t[idx[-1] + 1] == "3"
    args = systems.parse_training_args(t)
    assert args.encoder_layers == 3 and args.encoder_embed_dim == 64 and args.share_all_embeddings
    assert systems.model_family(args) == "transformer" and systems.model_family(systems.parse_training_args(l)) == "lstm"
    # base: the transformer keeps its own (base) defaults, the lstm gets Iida et al.'s base
    lb = systems.parse_training_args(systems.build_argv("--arch lstm", "base", "/nonexistent"))
    assert (lb.encoder_hidden_size, lb.decoder_hidden_size, lb.encoder_bidirectional) == (512, 1024, True)
    unshared = systems.build_argv("--arch transformer --no-share-all-embeddings", "tiny", "/x")
    assert "--no-share-all-embeddings" not in unshared and "--share-all-embeddings" not in unshared


def test_batches_are_deterministic_and_fairseq_shaped():
    d = systems.make_dictionary(100)
    assert len(d) == 100
    a = batches.make_batches(d, 10, 3, 2, seed=1, device="cpu")
    b = batches.make_batches(d, 10, 3, 2, seed=1, device="cpu")
    for x, y in zip(a, b):
        assert torch.equal(x["net_input"]["src_tokens"], y["net_input"]["src_tokens"])
        assert torch.equal(x["target"], y["target"])
    x = a[0]
    src = x["net_input"]["src_tokens"]
    assert src.shape[0] == 3 and 8 <= src.shape[1] <= 10
    assert (src[:, -1] == d.eos()).all()  # left-padded source, EOS last
    assert (x["net_input"]["prev_output_tokens"][:, 0] == d.eos()).all()
    assert x["ntokens"] == int(x["target"].ne(d.pad()).sum())


def test_smoke_run_cpu(tmp_path):
    out_json, out_md = tmp_path / "b.json", tmp_path / "b.md"
    argv = [
        "--baseline", "transformer=--arch transformer",
        "--baseline", "lstm=--arch lstm",
        "--system", "noscale=--arch transformer --no-scale-embedding",
        "--system", "lstm96@lstm=--arch lstm --decoder-hidden-size 96",
        "--system", "broken=--arch no_such_arch",  # reported as failed, the rest goes on
        "--system", "ca_stopgrad=--arch transformer_cross_agg --routing-stop-gradient-updates 50",
        *sum((["--system", s] for s in EXTRA_SYSTEMS), []),
        "--dims", "tiny", "--src-lens", "8", "--device", "cpu", "--quick",
        "--steps", "2", "--warmup", "1", "--batch-sentences", "4", "--vocab", "500",
        "--memory-isolation", "all", "--threads", "1",
        "--json", str(out_json), "--markdown", str(out_md),
    ]
    t0 = time.time()
    res = B.main(argv)  # fairseq-ctx-benchmark, scripts/benchmark.py
    elapsed = time.time() - t0
    data = json.loads(out_json.read_text())
    names = {"transformer", "lstm", "noscale", "lstm96", *(s.split("=")[0].split("@")[0] for s in EXTRA_SYSTEMS)}
    assert set(data["systems"]) >= names
    assert data["systems"]["lstm96"]["baseline"] == "lstm"
    assert data["systems"]["noscale"]["baseline"] == "transformer"
    assert data["systems"]["lstm"]["family"] == "lstm"
    assert "broken" in data["failed"] and "broken" not in data["systems"]
    assert "no_such_arch" in data["failed"]["broken"]["error"]
    rows = {r["system"]: r for r in data["rows"]}
    for name in names:
        r = rows[name]
        assert len(r["train_step_s"]) == 2
        assert r["train_tok_s"] > 0 and r["decode_beam4_sent_s"] > 0 and r["decode_beam1_sent_s"] > 0
        assert r["peak_mem_bytes"] > 0
        for k in ("train_tok_s", "decode_beam4_sent_s", "decode_beam1_sent_s", "peak_mem_bytes", "params"):
            assert r["ratios"][k] > 0
    for base in ("transformer", "lstm"):
        assert all(abs(v - 1.0) < 1e-9 for v in rows[base]["ratios"].values() if not isinstance(v, list))
        assert rows[base]["ratios"]["train_tok_s_paired"] == 1.0
    assert rows["noscale"]["ratios"]["train_tok_s_paired"] > 0
    assert rows["noscale"]["ratios"]["params"] == 1.0  # same parameters, another option
    assert rows["lstm96"]["ratios"]["params"] < 1.0
    md = out_md.read_text()
    assert "| system | vs | src len |" in md and "lstm96" in md and "`broken`: FAILED" in md
    # a system timed before the end of its schedule says so (timed: updates 1-2, after 1 warm-up)
    assert "updates 0.. from the first warm-up step" in md
    assert data["systems"]["ca_stopgrad"]["schedule_note"].startswith(
        "timed at updates 1-2: --routing-stop-gradient-updates 50 (all of them before its end)")
    assert rows["ca_stopgrad"]["train_updates"] == [1, 2]
    assert "schedule_note" not in data["systems"]["cross_agg"]
    assert data["meta"]["device"] == "cpu" and data["meta"]["dtype"] == "fp32"
    assert res["rows"]
    print(f"smoke run took {elapsed:.1f}s")


def test_memory_subprocess_imports_this_copy_whatever_the_working_directory(tmp_path, monkeypatch):
    """`python -c` puts the working directory first on sys.path: run from a directory that
    holds another fairseq_ctx (a checkout beside an installed package), the memory subprocess
    imported that one, and fairseq then refused the --user-dir of this one, so no peak
    memory was measured (seen on a GPU machine, 2026-11-26)."""
    decoy = tmp_path / "fairseq_ctx"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy fairseq_ctx was imported')\n")
    monkeypatch.chdir(tmp_path)
    out_json = tmp_path / "b.json"
    B.main(["--baseline", "transformer=--arch transformer", "--dims", "tiny", "--src-lens", "8",
            "--device", "cpu", "--quick", "--batch-sentences", "2", "--vocab", "200",
            "--memory-isolation", "all", "--threads", "1", "--json", str(out_json)])
    data = json.loads(out_json.read_text())
    assert data["rows"][0]["peak_mem_bytes"] > 0, data.get("failed")


def _forward_regimes(argv_extra, at_update, n_steps):
    """(detached?, ramp buffer u) seen by the first cross-aggregation module at each
    training step's forward, for a tiny transformer_cross_agg built as the benchmark does;
    and what each step told the model (set_num_updates) before its first forward."""
    from fairseq_ctx.modules.cross_aggregation import CrossAggregation

    d = systems.make_dictionary(300)
    argv = systems.build_argv("--arch transformer_cross_agg " + argv_extra, "tiny", "/nonexistent")
    b = systems.Built(systems.SystemSpec("ca", "", None, False), argv, d, "cpu", at_update=at_update)
    module = next(m for m in b.model.modules() if isinstance(m, CrossAggregation))
    events = []
    module.register_forward_pre_hook(lambda m, _: events.append(
        ("forward", m._detach_logits, int(m.num_updates) if hasattr(m, "num_updates") else None)))
    told = b.model.set_num_updates
    b.model.set_num_updates = lambda u: events.append(("told", u)) or told(u)
    batch = batches.make_batches(d, 6, 2, 1, 1, "cpu")[0]
    seen, told_per_step = [], []
    for _ in range(n_steps):
        events.clear()
        timing.train_step(b, batch, "fp32")
        told_per_step.append([e[1] for e in events if e[0] == "told"])
        assert events[0][0] == "told"  # before the forward, as fairseq's task.train_step
        seen.append(next(e[1:] for e in events if e[0] == "forward"))
    assert all(len(t) == 1 for t in told_per_step)  # once per step (it walks every module)
    return seen, b.num_updates, [t[0] for t in told_per_step]


def test_training_steps_tell_the_model_the_updates_done_as_fairseq_does():
    # fairseq's train_step hands the model u (updates done) before each forward: with
    # --routing-stop-gradient-updates 3, updates 0-2 route detached logits, 3 on do not.
    seen, u, told = _forward_regimes("--routing-stop-gradient-updates 3", 0, 5)
    assert [d for d, _ in seen] == [True, True, True, False, False] and u == 5 and told == [0, 1, 2, 3, 4]
    # --at-update U: the first step is update U
    seen, u, told = _forward_regimes("--routing-stop-gradient-updates 3", 2, 3)
    assert [d for d, _ in seen] == [True, False, False] and u == 5 and told == [2, 3, 4]
    # the ramp's u (persisted buffer) follows the same count
    seen, _, _ = _forward_regimes("--routing-ramp-updates 10", 4, 3)
    assert [r for _, r in seen] == [4, 5, 6]


def test_every_source_length_is_timed_at_the_same_updates():
    cfg = B.BenchConfig(src_lens=(6, 8), steps=2, warmup=1, batch_sentences=2, vocab=300, beams=(1,),
                        decode_repeats=1, memory=False, threads=1, at_update=5, n_batches=1, profile=True)
    specs = B.resolve_systems(["t=--arch transformer"],
                              ["ca=--arch transformer_cross_agg --routing-stop-gradient-updates 7"])
    res = B.run_benchmark(specs, cfg)
    rows = {(r["system"], r["src_len"]): r for r in res["rows"]}
    for name in ("t", "ca"):
        assert rows[(name, 6)]["train_updates"] == rows[(name, 8)]["train_updates"] == [6, 7]
    # update 6 is before the end of the schedule (7), update 7 past it
    assert "updates 6-6 of them before its end" in res["systems"]["ca"]["schedule_note"]


def test_schedule_note_names_options_still_in_their_early_regime():
    args = systems.parse_training_args(systems.build_argv(
        "--arch transformer_cross_agg --routing-ramp-updates 800", "tiny", "/nonexistent"))
    assert "--routing-ramp-updates 800 (all of them before its end)" in systems.schedule_note(args, 3, 12)
    assert "updates 795-799 of them" in systems.schedule_note(args, 795, 805)
    assert systems.schedule_note(args, 800, 812) is None
    plain = systems.parse_training_args(systems.build_argv("--arch transformer", "tiny", "/nonexistent"))
    assert systems.schedule_note(plain, 0, 12) is None


def test_memory_subprocess_builds_at_the_same_update(monkeypatch):
    from fairseq_ctx.benchmarking import memory

    payloads = []
    monkeypatch.setattr(memory, "_run_memory_worker", lambda payload: payloads.append(payload) or [])
    memory.measure_memory([{"spec": {"name": "x", "args": ""}, "argv": [], "src_len": 4, "bsz": 1}],
                          vocab=100, seed=1, device="cpu", dtype="fp32", at_update=7)
    assert payloads and all(p["at_update"] == 7 for p in payloads)
    # and the worker builds each system at that update
    monkeypatch.undo()
    built_at = []

    class Recording(systems.Built):
        def __init__(self, *a, at_update=0, **k):
            built_at.append(at_update)
            super().__init__(*a, at_update=at_update, **k)

    monkeypatch.setattr(memory, "Built", Recording)
    argv = systems.build_argv("--arch transformer", "tiny", "/nonexistent")
    memory.memory_worker(dict(jobs=[{"spec": {"name": "t", "args": "--arch transformer"}, "argv": argv,
                                     "src_len": 4, "bsz": 1}], vocab=100, seed=1, device="cpu",
                              dtype="fp32", steps=1, method="maxrss", repeats=1, at_update=7))
    assert built_at == [7]
