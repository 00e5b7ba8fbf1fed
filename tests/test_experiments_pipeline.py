"""prepare (conftest's Tatoeba slice) -> train a few updates with 2 CPU processes (gloo,
torchrun) -> average checkpoints -> evaluate (every sentence, sacreBLEU + tokenised BLEU,
bootstrap, length buckets) -> table; and the gate / routing statistics of trained models."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from fairseq_ctx.analysis import model_statistics
from fairseq_ctx.reproduce import runner, tables
from tests.conftest import ROOT, TINY_TEST_SENTENCES, cli_env, free_port, run, shadow_checkout

# on one parallel test worker (scripts/run-tests.sh): its torchrun training (distributed_run) is made once
pytestmark = pytest.mark.xdist_group("test_experiments_pipeline")

TINY = ("--encoder-embed-dim 16 --encoder-ffn-embed-dim 32 --encoder-layers 2 --encoder-attention-heads 2 "
        "--decoder-embed-dim 16 --decoder-ffn-embed-dim 32 --decoder-layers 2 --decoder-attention-heads 2 "
        "--share-decoder-input-output-embed --optimizer adam --lr 1e-3 --criterion label_smoothed_cross_entropy "
        "--label-smoothing 0.1 --dropout 0.1")
CONTEXT_AWARE = "--arch transformer_context_aware --encoder-context deep_global+deep --decoder-context deep_global " + TINY
CROSS_AGG = "--arch transformer_cross_agg --routing-side both --routing-vertical --routing-horizontal " + TINY
QUICK = ["--max-tokens", "400", "--num-workers", "0", "--no-progress-bar", "--log-interval", "1",
         "--required-batch-size-multiple", "1", "--no-epoch-checkpoints", "--seed", "1"]


def write_config(tmp_path, name, text):
    path = tmp_path / "configs" / "testpaper" / f"{name}.args"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# tiny test row\n{text}\n")
    return str(path)


@pytest.fixture(scope="module")
def distributed_run(tiny_corpus, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pipeline")
    config = write_config(tmp, "context_aware", CONTEXT_AWARE)
    save_dir = tmp / "ckpt"
    proc = run(
        ["bash", os.path.join(ROOT, "scripts", "train", "train.sh"), config, "cpu", "--gpus", "2",
         "--launcher", "torchrun", "--backend", "gloo", "--master-port", str(free_port()),
         "--data", str(tiny_corpus / "bin"), "--save-dir", str(save_dir), "--",
         *QUICK, "--max-update", "4", "--save-interval-updates", "2", "--keep-interval-updates", "5"])
    return tmp, save_dir, proc.stdout + proc.stderr


def test_two_cpu_processes_train_through_fairseq_distributed(distributed_run):
    _, save_dir, log = distributed_run
    assert "initialized host" in log and re.search(r"distributed init \(rank 1\)", log), log[-3000:]
    assert "'distributed_world_size': 2" in log and "'distributed_backend': 'gloo'" in log
    assert re.search(r"num_updates\D+4\b", log)
    assert {"checkpoint_1_2.pt", "checkpoint_1_4.pt", "checkpoint_last.pt"} <= set(os.listdir(save_dir))
    # fairseq-ctx-train's record of the start: torchrun's two processes, nothing resumed, ended at update 4
    start, end = [json.loads(line) for line in (save_dir / "train_starts.jsonl").read_text().splitlines()]
    assert (start["event"], start["world_size"], start["resumed"]) == ("start", 2, None)
    assert start["command"][1:3] == ["-m", "torch.distributed.run"]
    assert (end["event"], end["exit_code"], end["checkpoint_last_update"]) == ("end", 0, 4)


def test_the_direction_fairseq_inferred_is_recorded_and_read_with_the_checkpoint_elsewhere(distributed_run,
                                                                                         tiny_corpus, tmp_path):
    """fairseq-ctx-train names no languages, so the checkpoint's cfg holds none: its starts record
    keeps the pair fairseq inferred, and the evaluation reads it from the copied --save-dir."""
    from fairseq_ctx.evaluation.direction import stored_task, trained_direction

    _, save_dir, _ = distributed_run
    start = json.loads((save_dir / "train_starts.jsonl").read_text().splitlines()[0])
    assert (start["data"], start["languages"]) == (str(tiny_corpus / "bin"), ["zh", "en"])
    task = stored_task(str(save_dir / "checkpoint_last.pt"))
    assert (task["source_lang"], task["target_lang"], task["data"]) == (None, None, start["data"])
    copied = tmp_path / "copied"
    copied.mkdir()
    for name in ("checkpoint_last.pt", "train_starts.jsonl"):
        shutil.copy(save_dir / name, copied / name)
    assert trained_direction(str(copied / "checkpoint_last.pt")) == (
        "zh", "en", f"recorded in train_starts.jsonl when it was trained on {tiny_corpus / 'bin'}", False)


def test_torchrun_workers_run_this_copy_from_the_root_of_another_checkout(tiny_corpus, tmp_path):
    """fairseq-ctx-train --launcher torchrun started where another checkout's fairseq_ctx lies:
    torchrun's `-m` workers put the working directory first on sys.path unless told not to."""
    shadow = shadow_checkout(tmp_path / "other-checkout")
    config = write_config(tmp_path, "transformer", "--arch transformer " + TINY)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    env.update(PYTHONPATH=ROOT, OMP_NUM_THREADS="1")  # the driver itself: this copy (-P below)
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "fairseq_ctx.reproduce.train", config, "cpu", "--gpus", "1",
         "--launcher", "torchrun", "--backend", "gloo", "--master-port", str(free_port()),
         "--data", str(tiny_corpus / "bin"), "--save-dir", str(tmp_path / "ckpt"), "--",
         *QUICK, "--max-update", "1"], capture_output=True, text=True, cwd=shadow, env=env, timeout=600)
    log = proc.stdout + proc.stderr
    assert "working directory" not in log, log[-3000:]
    assert proc.returncode == 0 and re.search(r"num_updates\D+1\b", log), log[-3000:]


def test_evaluate_averages_checks_every_sentence_and_scores_with_significance(distributed_run, tiny_corpus):
    tmp, save_dir, _ = distributed_run
    results = tmp / "results"
    # a table of the demo's evaluation settings (a table's paper decides them: evaluation/defaults.py)
    table = tables.Table("demo", "t", "tiny", [tables.Column("Zh-En", "tatoeba", "zh", "en")], [
        tables.Row("base", "first checkpoint", "unused", {"Zh-En": 1.0}),
        tables.Row("avg", "average of the last 2", "unused", {"Zh-En": 2.0}),
        tables.Row("never", "never trained", "unused", {"Zh-En": 3.0}),
    ])
    cells = {row.key: runner.Cell(table, row, table.columns[0], str(results / row.key), str(tiny_corpus), ["test"], [], None)
             for row in table.rows}
    out = {key: cell.eval_dir("test") for key, cell in cells.items()}
    common = [sys.executable, os.path.join(ROOT, "scripts", "evaluate.py"), "--data", str(tiny_corpus / "bin"),
              "--src", "zh", "--tgt", "en", "--ref", str(tiny_corpus / "raw" / "test.en"),
              "--source", str(tiny_corpus / "raw" / "test.zh"), "--beam", "2", "--max-len-b", "12",
              "--length-buckets", "--bootstrap-samples", "100"]
    run(common + ["--path", str(save_dir / "checkpoint_1_2.pt"), "--out-dir", out["base"]])
    proc = run(common + ["--save-dir", str(save_dir), "--average-last", "2", "--out-dir", out["avg"],
                         "--baseline-hyp", os.path.join(out["base"], "hyp.detok.en")])
    result = json.load(open(os.path.join(out["avg"], "result.json")))
    assert result["averaged"] == ["checkpoint_1_2.pt", "checkpoint_1_4.pt"]
    # the average it kept (fairseq-generate loaded it) holds the direction its checkpoints' record gave:
    # copied alone, the reverse is refused
    alone = tmp / "alone"
    alone.mkdir()
    shutil.copy(os.path.join(out["avg"], "average_last2.pt"), alone / "average_last2.pt")
    refused = subprocess.run(common[:2] + ["--data", str(tiny_corpus / "bin"), "--src", "en", "--tgt", "zh", "--ref",
                                           str(tiny_corpus / "raw" / "test.zh"), "--path", str(alone / "average_last2.pt"),
                                           "--out-dir", str(tmp / "reversed")], capture_output=True, text=True,
                             env=cli_env(), cwd=ROOT)
    assert refused.returncode == 2 and ("was trained zh -> en (recorded in this average of checkpoints: recorded in "
                                        f"train_starts.jsonl when it was trained on {tiny_corpus / 'bin'})"
                                        ) in refused.stderr, refused.stderr
    assert result["sentences"] == TINY_TEST_SENTENCES  # not a multiple of 8: nothing dropped
    assert len(open(os.path.join(out["avg"], "hyp.detok.en")).read().splitlines()) == TINY_TEST_SENTENCES
    assert result["sacrebleu"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "pretok:en" in result["tokenized"]["signature"] and 0 <= result["tokenized"]["bleu"] <= 100
    assert set(result["bootstrap"]) >= {"baseline", "system", "delta", "p_value"}
    assert sum(r["sentences"] for r in result["length_buckets"]) == TINY_TEST_SENTENCES
    assert "BLEU" in proc.stdout
    text = tables.format_table(table, list(cells.values()))
    lines = {line.split("|")[2].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert f"| {result['tokenized']['bleu']:.2f}" in lines["average of the last 2"]
    assert lines["never trained"].count("missing") == 2
    assert "sacreBLEU: nrefs:1" in text


def test_gate_statistics_of_the_context_aware_model(distributed_run, tiny_corpus):
    tmp, save_dir, _ = distributed_run
    out = tmp / "gates"
    run([sys.executable, os.path.join(ROOT, "scripts", "analysis", "gate_statistics.py"), "--data",
         str(tiny_corpus / "bin"), "--path", str(save_dir / "checkpoint_last.pt"), "--out-dir", str(out)])
    gates = json.load(open(out / "gates.json"))["gates"]
    assert [r["layer"] for r in gates["encoder"]] == [1, 2] and [r["layer"] for r in gates["decoder"]] == [1, 2]
    for row in gates["encoder"] + gates["decoder"]:
        assert 0 < row["lambda_q"] < 1 and 0 < row["lambda_k"] < 1 and row["positions"] > 0
        assert all(row[name] > 0 for name in ("context_q", "context_k", "tv_context", "tv_stock"))
    first = gates["encoder"][0]
    assert (f"| encoder | 1 | {first['lambda_q']:.4f} | {first['lambda_k']:.4f} | {first['context_q']:.4f} | "
            f"{first['context_k']:.4f} | {first['tv_context']:.4f} | {first['tv_stock']:.4f} | "
            f"{first['positions']} |") in (out / "gates.md").read_text()
    # --train-mode: the same batch with the model's dropout (0.1) on moves every statistic;
    # its masks are seeded (--seed, default 1)
    run([sys.executable, os.path.join(ROOT, "scripts", "analysis", "gate_statistics.py"), "--data",
         str(tiny_corpus / "bin"), "--path", str(save_dir / "checkpoint_last.pt"), "--out-dir", str(out / "train"),
         "--max-batches", "1", "--train-mode"])
    train = json.load(open(out / "train" / "gates.json"))
    assert train["mode"] == "train" and "train mode" in (out / "train" / "gates.md").read_text()
    statistics = lambda **kw: model_statistics.gate_statistics(  # noqa: E731
        str(save_dir / "checkpoint_last.pt"), str(tiny_corpus / "bin"), max_batches=1, **kw)
    one_batch = {"eval": statistics(), "train": train, "train again": statistics(train_mode=True, seed=1),
                 "seed 2": statistics(train_mode=True, seed=2)}
    rows = {name: result["gates"]["encoder"] + result["gates"]["decoder"] for name, result in one_batch.items()}
    assert len(rows["eval"]) == len(rows["train"]) == 4 and one_batch["eval"]["mode"] == "eval"
    assert (train["seed"], one_batch["seed 2"]["seed"], one_batch["eval"]["seed"]) == (1, 2, None)
    # the same masks in another process (float noise from thread counts aside)
    assert rows["train again"] == [pytest.approx(row, rel=1e-7) for row in rows["train"]]
    for eval_row, train_row, seed_2 in zip(rows["eval"], rows["train"], rows["seed 2"]):
        assert eval_row["positions"] == train_row["positions"] == seed_2["positions"]
        for name in ("lambda_k", "context_k", "tv_context"):
            assert eval_row[name] != pytest.approx(train_row[name], rel=1e-7)
            assert seed_2[name] != pytest.approx(train_row[name], rel=1e-7)


def test_routing_statistics_of_the_cross_aggregation_model(tiny_corpus, tmp_path):
    config = write_config(tmp_path, "cross_agg", CROSS_AGG)
    save_dir = tmp_path / "ckpt"
    run(["bash", os.path.join(ROOT, "scripts", "train", "train.sh"), config, "cpu", "--data",
         str(tiny_corpus / "bin"), "--save-dir", str(save_dir), "--", *QUICK, "--max-update", "2"])
    out = tmp_path / "routing"
    run([sys.executable, os.path.join(ROOT, "scripts", "analysis", "routing_statistics.py"), "--data",
         str(tiny_corpus / "bin"), "--path", str(save_dir / "checkpoint_last.pt"), "--out-dir", str(out),
         "--max-batches", "2"])
    layers = json.load(open(out / "routing.json"))["layers"]
    assert [(r["side"], r["layer"]) for r in layers] == [("decoder", 1), ("decoder", 2), ("encoder", 1), ("encoder", 2)]
    for row in layers:
        assert row["routed_to_logit_ratio"] > 0 and 0 <= row["vertical_coupling_entropy"] <= 1 + 1e-6
    encoder_lambda = [r["head_lambda"] for r in layers if r["side"] == "encoder"]
    assert all(len(lam) == 2 and abs(sum(lam) - 1) < 1e-4 for lam in encoder_lambda)  # Eq. 13 softmax over heads


def test_statistics_refuse_bad_input_in_one_line_and_write_nothing(distributed_run, tiny_corpus, tmp_path):
    _, save_dir, _ = distributed_run
    checkpoint = str(save_dir / "checkpoint_last.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(open(checkpoint, "rb").read()[:5000])
    other_dictionary = tmp_path / "other-bin"  # the same data with a target dictionary one word longer
    other_dictionary.mkdir()
    for name in os.listdir(tiny_corpus / "bin"):
        (other_dictionary / name).write_bytes((tiny_corpus / "bin" / name).read_bytes())
    with open(other_dictionary / "dict.en.txt", "a") as handle:
        handle.write("unseenword 1\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("kept\n")
    script = os.path.join(ROOT, "scripts", "analysis", "gate_statistics.py")
    data = str(tiny_corpus / "bin")
    cases = {  # options -> (exit status, what the one line says)
        ("--max-batches", "0"): (2, "--max-batches must be >= 1"),
        ("--path", str(save_dir)): (2, "is not a file"),
        ("--out-dir", str(a_file)): (2, "exists and is not a folder"),
        ("--subset", "nosuch"): (1, "--subset nosuch"),
        ("--path", str(truncated)): (1, f"could not load {truncated}"),
        ("--data", str(other_dictionary)): (1, "dictionaries"),
    }
    for options, (status, message) in cases.items():
        out = tmp_path / "out"
        argv = {"--data": data, "--path": checkpoint, "--out-dir": str(out)}
        argv.update(dict([options]))
        proc = subprocess.run([sys.executable, script, *[x for item in argv.items() for x in item]],
                              capture_output=True, text=True, cwd=ROOT, env=cli_env())
        assert proc.returncode == status and message in proc.stderr, (options, proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr, (options, proc.stderr[-2000:])
        assert not out.exists(), options
    assert a_file.read_text() == "kept\n"

