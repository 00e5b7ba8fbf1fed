"""scripts/demo.sh end to end on a small slice: train a row, translate every test
sentence, print the BLEU table; a second run reuses the finished row."""
import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import ROOT, TINY_TEST_SENTENCES, cli_env


def run_demo(demo_dir, env_extra=None, cwd=ROOT):
    env = cli_env()
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(DEMO_DIR=str(demo_dir), DEMO_ROWS="00-*", DEMO_UPDATES="2", DEMO_BEAM="2",
               DEMO_GEN_ARGS="--max-len-b 5",
               DEMO_PREP_ARGS=f"--limit 400 --valid-size 20 --test-size {TINY_TEST_SENTENCES} --merges 300")
    env.update(env_extra or {})
    if demo_dir is None:  # the default: work/demo, $FAIRSEQ_CTX_WORK/demo where set
        del env["DEMO_DIR"]
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", "demo.sh")], capture_output=True, text=True,
                          env=env, cwd=cwd)


def test_demo_trains_a_row_scores_every_sentence_and_prints_the_table(tiny_corpus, tmp_path):
    demo_dir = tmp_path / "demo"
    shutil.copytree(tiny_corpus, demo_dir / "data")  # same settings: the prepare steps are skipped
    # DEMO_DIR relative to where the user is, not to the checkout demo.sh works from
    first = run_demo("demo", cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-4000:]
    assert "00-transformer: training 2 updates" in first.stdout
    table = (demo_dir / "table.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| 00-transformer"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].endswith("M") and cells[2] == "2"  # parameters, updates
    assert cells[4] == str(TINY_TEST_SENTENCES)  # every test sentence translated
    assert 0.0 <= float(cells[5]) <= 100.0
    assert "sacreBLEU signature: nrefs:1|case:mixed|eff:no|tok:13a" in table
    assert table in first.stdout + "\n"

    # without DEMO_DIR: under FAIRSEQ_CTX_WORK, where fairseq-ctx-quality-compare looks for the demo's data
    again = run_demo(None, {"FAIRSEQ_CTX_WORK": str(tmp_path)})
    assert again.returncode == 0, again.stderr[-3000:]
    assert not os.path.exists(os.path.join(ROOT, "demo"))
    assert "00-transformer: done already" in again.stdout and "training" not in again.stdout


def test_on_a_node_with_several_gpus_each_row_sees_one(tiny_corpus, tmp_path):
    """fairseq-train would train every row data-parallel on all GPUs (another batch than the
    table's); demo.sh gives each row one, round-robin in row order (a stand-in nvidia-smi
    lists two; the rows still train on this machine's CPU)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA Test (UUID: GPU-a)'\necho 'GPU 1: NVIDIA Test (UUID: GPU-b)'\n")
    smi.chmod(0o755)
    demo_dir = tmp_path / "demo"
    shutil.copytree(tiny_corpus, demo_dir / "data")
    shutil.copytree(tiny_corpus, tmp_path / "demo-cpu" / "data")
    env = {"PATH": f"{bin_dir}{os.pathsep}{cli_env()['PATH']}", "DEMO_ROWS": "0[01]-*", "DEMO_JOBS": "2"}
    first = run_demo(demo_dir, env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-4000:]
    assert "00-transformer: training 2 updates" in first.stdout and "01-" in first.stdout
    # the two rows run at once, so their lines come in either order: pin the row -> GPU mapping
    given = {
        line.split(": ", 2)[1]: line.rsplit(" ", 1)[-1]
        for line in first.stdout.splitlines()
        if ": training 2 updates" in line
    }
    assert len(given) == 2 and given.pop("00-transformer") == "CUDA_VISIBLE_DEVICES=0", first.stdout
    [(row_01, device_01)] = given.items()
    assert row_01.startswith("01-") and device_01 == "CUDA_VISIBLE_DEVICES=1", first.stdout
    # CUDA_VISIBLE_DEVICES set but empty hides every GPU: no row is given one
    hidden = run_demo(tmp_path / "demo-cpu", {**env, "DEMO_ROWS": "00-*", "CUDA_VISIBLE_DEVICES": ""})
    assert hidden.returncode == 0, hidden.stderr[-3000:]
    assert "00-transformer: training 2 updates" in hidden.stdout and "CUDA_VISIBLE_DEVICES=" not in hidden.stdout


@pytest.mark.parametrize("trains", [True, False])
def test_a_training_that_aborts_after_it_finished_is_scored(tiny_corpus, tmp_path, trains):
    """The real fairseq-train, then a SIGABRT (as Python 3.11's shutdown gives it when fairseq's
    batch thread is still collating): the row is finished, so it is scored and tabled. Aborting
    with fairseq's "done training" line but no training behind it is a failed row."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = shutil.which("fairseq-train", path=cli_env()["PATH"])
    wrapper = bin_dir / "fairseq-train"
    training = (f"'{real}' \"$@\" || exit $?\n" if trains else
                "echo '2026-11-27 20:00:00 | INFO | fairseq_cli.train | done training in 1.0 seconds'\n")
    wrapper.write_text(f"#!/bin/bash\n{training}kill -ABRT $$\n")
    wrapper.chmod(0o755)
    demo_dir = tmp_path / "demo"
    shutil.copytree(tiny_corpus, demo_dir / "data")
    result = run_demo(demo_dir, {"PATH": f"{bin_dir}{os.pathsep}{cli_env()['PATH']}"})
    if trains:
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
        assert "00-transformer: fairseq-train exited 134 after it had finished" in result.stderr
        assert "| 00-transformer" in (demo_dir / "table.md").read_text()
    else:
        assert result.returncode != 0 and "demo: 00-transformer: training failed" in result.stderr
        table = demo_dir / "table.md"
        assert "after it had finished" not in result.stderr
        assert not table.exists() or re.search(r"^\| 00-transformer \|.*\| missing \|$", table.read_text(), re.M)
