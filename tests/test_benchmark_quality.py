"""fairseq_ctx/quality_compare.py (fairseq-ctx-quality-compare, scripts/quality_compare.py): baseline assignment, resume, statistics and sacreBLEU's
paired bootstrap, with training / evaluation replaced by fakes (the real run is heavy;
see docs/notes/benchmark.md for a real tiny-budget run)."""
import json
import os
import random

import pytest

from fairseq_ctx import quality_compare
from fairseq_ctx.paths import CONFIGS


@pytest.fixture(scope="module")
def qc():
    return quality_compare


def test_baselines_of_demo_configs(qc):
    cdir = os.path.join(CONFIGS, "demo")
    names = [f[:-5] for f in os.listdir(cdir) if f.endswith(".args")]
    configs = {n: qc.read_args_file(os.path.join(cdir, n + ".args")) for n in names}
    base = qc.assign_baselines(configs)
    for n, args in configs.items():
        arch = qc.arch_of(args)
        if arch in ("transformer", "lstm"):
            assert base[n] is None
        elif arch.startswith("lstm"):
            assert qc.arch_of(configs[base[n]]) == "lstm"
        else:
            assert qc.arch_of(configs[base[n]]) == "transformer"


def test_assign_and_override(qc):
    configs = {"00-t": ["--arch", "transformer"], "05-l": ["--arch", "lstm"],
               "06-m": ["--arch", "lstm_multihop"], "01-c": ["--arch", "transformer_context_aware"],
               "02-t2": ["--arch", "transformer", "--dropout", "0.3"]}
    b = qc.assign_baselines(configs)
    assert b == {"00-t": None, "05-l": None, "06-m": "05-l", "01-c": "00-t", "02-t2": "00-t"}
    b = qc.assign_baselines(configs, ["01-c=02-t2"])
    assert b["01-c"] == "02-t2"
    # a Transformer-Big arch with a stock Big, never with the base Transformer
    big = {**configs, "03-cb": ["--arch", "transformer_context_aware_big"], "07-s": ["--arch=transformer_sentential_big"]}
    without = qc.assign_baselines(big)  # no stock Big among them: no baseline (a warning says so)
    assert without == {**qc.assign_baselines(configs), "03-cb": None, "07-s": None}
    assert list(qc.baseline_warnings(big, without)) == ["03-cb has no baseline among the selected configs",
                                                        "07-s has no baseline among the selected configs"]
    for stock in ("transformer_vaswani_wmt_en_fr_big", "transformer_wmt_en_de_big", "transformer_wmt_en_de_big_t2t"):
        b = qc.assign_baselines({**big, "04-tb": ["--arch", stock]})
        assert (b["03-cb"], b["07-s"], b["04-tb"], b["01-c"]) == ("04-tb", "04-tb", None, "00-t"), stock
        assert list(qc.baseline_warnings({**big, "04-tb": ["--arch", stock]}, b)) == [
            f"03-cb (transformer_context_aware_big) is compared with 04-tb ({stock}), not with the stock arch its "
            "family is built on (transformer_vaswani_wmt_en_de_big)",
            f"07-s (transformer_sentential_big) is compared with 04-tb ({stock}), not with the stock arch its family "
            "is built on (transformer_vaswani_wmt_en_de_big)"]
    # a stock arch compared with another of its family: not ours, nothing said
    two = {"04-tb": ["--arch", "transformer_wmt_en_de_big_t2t"], "05-tb": ["--arch", "transformer_wmt_en_de_big"]}
    assert list(qc.baseline_warnings(two, qc.assign_baselines(two))) == []
    # the one ours are built on first, whatever the names' order; the other stock Big compared with it
    big.update({"04-tb": ["--arch", "transformer_wmt_en_de_big_t2t"], "09-tb": ["--arch", "transformer_vaswani_wmt_en_de_big"]})
    b = qc.assign_baselines(big)
    assert (b["03-cb"], b["07-s"], b["04-tb"], b["09-tb"], b["01-c"]) == ("09-tb", "09-tb", "09-tb", None, "00-t")
    assert list(qc.baseline_warnings(big, b)) == []
    # not a Transformer-Big: a LightConv Big is of no Transformer's family
    assert qc.assign_baselines({**big, "08-lc": ["--arch", "lightconv_wmt_en_de_big"]})["08-lc"] == "00-t"
    with pytest.raises(ValueError):
        qc.assign_baselines(configs, ["01-c=nope"])


@pytest.mark.parametrize("pair,says", [("01-transformer_context_aware", "SYSTEM=BASELINE"),
                                       ("01-transformer_context_aware=nope", "'nope' not among the selected")])
def test_a_bad_pair_is_one_message_before_anything_is_made(qc, tmp_path, capsys, pair, says):
    """--pair without '=' or naming no selected config was a ValueError traceback."""
    with pytest.raises(SystemExit) as exit_info:
        qc.main(["--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "out"), "--pair", pair])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and says in err and "Traceback" not in err
    assert not (tmp_path / "data").exists() and not (tmp_path / "out").exists()


def test_default_data_and_out_dirs_are_under_the_work_directory(tmp_path):
    """Not under whatever directory the command runs from: FAIRSEQ_CTX_WORK (a checkout's work/)
    is where make demo prepares the data and every other command reads and writes."""
    import subprocess
    import sys

    from fairseq_ctx.paths import python_env
    from tests.conftest import cli_env

    env = dict(python_env(cli_env()), FAIRSEQ_CTX_WORK=str(tmp_path / "w"), COLUMNS="400")
    code = "from fairseq_ctx.quality_compare import main; main(['--help'])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    help_text = " ".join(proc.stdout.split())
    assert f"default {tmp_path / 'w' / 'demo' / 'data'};" in help_text
    assert f"default {tmp_path / 'w' / 'quality'}" in help_text


def _refs(n=120, seed=0):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) for _ in range(n)]


@pytest.mark.parametrize("jobs", [1, 2])
def test_run_resume_stats_and_paired_bootstrap(qc, tmp_path, jobs):
    refs = _refs()
    configs = {"00-transformer": ["--arch", "transformer"], "01-good": ["--arch", "transformer_x"],
               "02-same": ["--arch", "transformer_y"]}
    baselines = qc.assign_baselines(configs)
    calls = []

    def fake_train(data_bin, common, arch_args, updates, seed, save_dir, log_path, threads=0):
        calls.append((arch_args[1], seed))
        os.makedirs(save_dir, exist_ok=True)
        open(os.path.join(save_dir, "checkpoint_last.pt"), "w").close()
        return 0.1

    def fake_eval(data_bin, ckpt, ref, beam, out_dir, gen_args=()):
        # .../runs/NAME/seedS/checkpoints/checkpoint_last.pt (safe with parallel jobs)
        run_dir = os.path.dirname(os.path.dirname(ckpt))
        arch = configs[os.path.basename(os.path.dirname(run_dir))][1]
        seed = int(os.path.basename(run_dir)[len("seed"):])
        rng = random.Random(seed * 7 + len(arch))
        keep = {"transformer": 0.4, "transformer_x": 0.9, "transformer_y": 0.4}[arch]
        hyps = [r if rng.random() < keep else "zz yy xx" for r in refs]
        from sacrebleu.metrics import BLEU

        return {"bleu": round(BLEU().corpus_score(hyps, [refs]).score, 2), "sentences": len(refs)}, hyps

    out = str(tmp_path)
    res = qc.run(configs, baselines, [1, 2], 10, ["--lr", "1e-3"], "bin", "ref", out,
                 train_fn=fake_train, eval_fn=fake_eval, log=lambda m: None, jobs=jobs)
    assert len(calls) == 6
    # seed-major order: every config's seed 1 starts before any seed 2. Only with one
    # job: with parallel jobs the runs are taken in that order, but two workers' calls of
    # the fake can still land in `calls` the other way round (a race, seen in CI)
    if jobs == 1:
        assert [seed for _, seed in calls] == [1, 1, 1, 2, 2, 2]
    assert not any(p.endswith(".partial") for _, _, fs in os.walk(out) for p in fs)
    assert not any(p.endswith(".pt") for _, _, fs in os.walk(out) for p in fs)  # checkpoints removed
    # resume: nothing retrained with the same settings, everything retrained with others
    res2 = qc.run(configs, baselines, [1, 2], 10, ["--lr", "1e-3"], "bin", "ref", out,
                  train_fn=fake_train, eval_fn=fake_eval, log=lambda m: None)
    assert len(calls) == 6
    assert res2["01-good"][2]["bleu"] == res["01-good"][2]["bleu"]
    summary = {n: qc.summarize([res[n][s]["bleu"] for s in (1, 2)]) for n in configs}
    assert summary["01-good"]["mean"] > summary["00-transformer"]["mean"] + 10
    assert summary["00-transformer"]["std"] >= 0
    comp = qc.compare(res, baselines, refs, n_samples=200)
    assert set(comp) == {"01-good", "02-same"}
    good = comp["01-good"]
    assert good["baseline"] == "00-transformer" and good["seeds"] == [1, 2]
    assert all(good["per_seed"][s]["p_value"] < 0.05 for s in (1, 2))
    assert "pooled" not in good and good["significant_better"] == 2
    assert good["significant_worse"] == 0 and good["mean_diff"] > 10
    # per-seed BLEU from the bootstrap equals the corpus BLEU of the run
    assert abs(good["per_seed"][1]["system_bleu"] - res["01-good"][1]["bleu"]) < 0.01
    md = qc.markdown(summary, comp, baselines, {"updates": 10, "seeds": [1, 2], "date": "d", "data": "x",
                                                 "test_sentences": len(refs), "beam": 5, "common": "c"})
    assert "| 01-good | 00-transformer |" in md
    json.dumps(comp)  # serialisable


def test_a_seed_whose_outputs_are_the_baselines_gets_no_bootstrap_p(qc):
    """No resample can differ: sacreBLEU's p is its floor (1 / 201 here), which would read as
    significant; the report says n/a, as fairseq-ctx-evaluate does."""
    refs = _refs()
    hyps = [r if i % 3 else "zz yy" for i, r in enumerate(refs)]
    other = [r if i % 4 else "zz yy" for i, r in enumerate(refs)]
    results = {"00-transformer": {1: {"bleu": 1.0, "hyps": hyps}, 2: {"bleu": 1.0, "hyps": hyps}},
               "01-x": {1: {"bleu": 1.0, "hyps": list(hyps)}, 2: {"bleu": 2.0, "hyps": other}}}
    baselines = {"00-transformer": None, "01-x": "00-transformer"}
    comp = qc.compare(results, baselines, refs, n_samples=200)
    same, differ = comp["01-x"]["per_seed"][1], comp["01-x"]["per_seed"][2]
    assert same["p_value"] <= 1 / 201 + 1e-12 and same["p_value_meaningful"] is False
    assert differ["p_value_meaningful"] is True
    summary = {n: qc.summarize([results[n][s]["bleu"] for s in (1, 2)]) for n in results}
    md = qc.markdown(summary, comp, baselines, {"updates": 10, "seeds": [1, 2], "date": "d", "data": "x",
                                                 "test_sentences": len(refs), "beam": 5, "common": "c"})
    row = next(line for line in md.splitlines() if line.startswith("| 01-x |"))
    assert f"n/a (equal) / {differ['p_value']:.3f}" in row, row


def test_failed_run_raises_and_leaves_no_result(qc, tmp_path):
    configs = {"00-transformer": ["--arch", "transformer"], "01-broken": ["--arch", "transformer_x"]}

    def train_or_fail(data_bin, common, arch_args, updates, seed, save_dir, log_path, threads=0):
        if arch_args[1] == "transformer_x":
            raise RuntimeError("training failed (rc 1)")
        os.makedirs(save_dir, exist_ok=True)
        return 0.1

    def fake_eval(data_bin, ckpt, ref, beam, out_dir, gen_args=()):
        return {"bleu": 1.0, "sentences": 1}, ["x"]

    with pytest.raises(qc.RunFailed, match="01-broken seed 1: training failed"):
        qc.run(configs, qc.assign_baselines(configs), [1], 10, [], "bin", "ref", str(tmp_path),
               train_fn=train_or_fail, eval_fn=fake_eval, log=lambda m: None, jobs=2)
    assert not os.path.exists(tmp_path / "runs" / "01-broken" / "seed1" / "result.json")
