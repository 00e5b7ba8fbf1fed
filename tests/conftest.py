"""Shared fixtures: a tiny binarized slice of the real Tatoeba zh-en corpus, and a
round trip through the real fairseq CLI (train -> resume -> generate -> interactive)."""
import os
import re
import socket
import subprocess
import sys

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # a parallel worker (scripts/run-tests.sh): one thread here and in the commands it starts,
    # one process in the data preparations it runs, so that the workers together use the cores
    # once (torch reads OMP_NUM_THREADS when it is imported)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("WORKERS", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(ROOT, "fairseq_ctx")
sys.path.insert(0, ROOT)  # so tests can `from tests.model_checks import ...`

from fairseq_ctx.evaluation.generate import parse_hypotheses  # noqa: E402

TINY_TEST_SENTENCES = 21  # deliberately not a multiple of 8 (fairseq's default batch multiple)
TRAIN_DEFAULTS = [
    "--optimizer", "adam", "--lr", "1e-3", "--criterion", "label_smoothed_cross_entropy",
    "--label-smoothing", "0.1", "--max-tokens", "400", "--required-batch-size-multiple", "1",
    "--no-progress-bar", "--log-interval", "1", "--num-workers", "0", "--seed", "1",
    "--no-epoch-checkpoints", "--dropout", "0.1",
    # no background batch thread: fairseq leaves it (a daemon) collating when --max-update stops
    # an epoch, and Python 3.11 ending a daemon thread inside torch code aborts the finished
    # process ("terminate called without an active exception", rc -6; seen once in a parallel run)
    "--data-buffer-size", "0",
]


def cli_env():
    env = dict(os.environ)
    # tiny models: one thread is faster and keeps parallel test workers from oversubscribing
    env.setdefault("OMP_NUM_THREADS", "1")
    # the plugin itself must make checkpoints loadable (torch.load weights_only default)
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def shadow_checkout(path):
    """A directory holding a fairseq_ctx that must never be imported (as another checkout's would)."""
    (path / "fairseq_ctx").mkdir(parents=True)
    (path / "fairseq_ctx" / "__init__.py").write_text(
        "raise SystemExit('imported the decoy fairseq_ctx of another checkout (working directory or PYTHONPATH)')\n")
    return path


def run(cmd, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=cli_env(), cwd=ROOT, **kwargs)
    if proc.returncode != 0:
        raise AssertionError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
                             f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-6000:]}")
    return proc


def pip_interrupted_while_copying(path):
    """A directory to put first on PYTHONPATH: its `python -m pip download -d DIR NAME==VERSION`
    leaves a truncated NAME-VERSION wheel in DIR and fails, as a download killed while pip copies
    the finished file into DIR does (pip copies it in place, not atomically)."""
    (path / "pip").mkdir(parents=True)
    (path / "pip" / "__init__.py").write_text("")
    (path / "pip" / "__main__.py").write_text(
        "import os, sys\n"
        "args = sys.argv[1:]\n"
        "if args[:1] == ['--version']:\n"
        "    print('pip 0 (interrupted while copying)'); sys.exit(0)\n"
        "name, version = args[-1].split('==')\n"
        "wheel = f\"{name.replace('-', '_')}-{version}-py3-none-any.whl\"\n"
        "with open(os.path.join(args[args.index('-d') + 1], wheel), 'wb') as out:\n"
        "    out.write(b'PK\\x03\\x04 truncated')\n"
        "sys.exit('killed while copying the wheel')\n")
    return path


def free_port():
    """A TCP port no process listens on now (the OS picks it): for a torchrun rendezvous that
    must not meet another test's, or the default 29500 of a training on the same machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fairseq_cli(name, *args):
    return [sys.executable, "-m", f"fairseq_cli.{name}", *args]


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    """Run scripts/prepare-tatoeba.sh on a small slice; returns the output directory."""
    out = tmp_path_factory.mktemp("tatoeba") / "zh-en"
    run(["bash", os.path.join(ROOT, "scripts", "prepare-tatoeba.sh"), "--out", str(out), "--limit", "400",
         "--valid-size", "20", "--test-size", str(TINY_TEST_SENTENCES), "--merges", "300"])
    return out


@pytest.fixture(scope="session")
def tiny_data_bin(tiny_corpus):
    return tiny_corpus / "bin"


@pytest.fixture
def cli_roundtrip(tiny_corpus, tmp_path):
    """Returns run(arch_args, beam=2) -> dict of the CLI outputs; asserts along the way."""
    data = str(tiny_corpus / "bin")

    def roundtrip(arch_args, *, beam=2, updates=3):
        save_dir = str(tmp_path / "checkpoints")
        train = fairseq_cli("train", data, "--user-dir", USER_DIR, *TRAIN_DEFAULTS, *arch_args,
                            "--save-dir", save_dir)
        first = run([*train, "--max-update", str(updates)])
        checkpoint = os.path.join(save_dir, "checkpoint_last.pt")
        assert os.path.exists(checkpoint), first.stderr[-3000:]
        # what fairseq-ctx-train compares before a resumption: nothing for the same command, the
        # one model option changed for another (it refuses to resume then)
        from fairseq_ctx.resumptions import options_changed

        assert not any(options_changed(checkpoint, train[3:]).values())
        changed = options_changed(checkpoint, [*train[3:], "--dropout", "0.37"])
        # (lstm's architecture takes its dropout_in / _out from --dropout)
        assert ("dropout", 0.37) in [(name, now) for name, _, now in changed["model"]] and not changed["training"] + changed["data"] + changed["start"]
        assert all("dropout" in name and now == 0.37 for name, _, now in changed["model"]), changed

        # resume: fairseq reloads checkpoint_last.pt (optimizer state included) and goes on
        resumed = run([*train, "--max-update", str(updates + 1)])
        log = resumed.stdout + resumed.stderr
        assert re.search(r"[Ll]oaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ %d updates\)" % updates, log), log[-3000:]
        assert re.search(r"num_updates\D+%d\b" % (updates + 1), log), log[-3000:]

        generated = run(fairseq_cli(
            "generate", data, "--user-dir", USER_DIR, "--path", checkpoint, "--gen-subset", "test",
            "--beam", str(beam), "--batch-size", "8", "--required-batch-size-multiple", "1", "--max-len-b", "20"))
        hypotheses = parse_hypotheses(generated.stdout, TINY_TEST_SENTENCES)

        with open(tiny_corpus / "bpe" / "test.zh", encoding="utf-8") as handle:
            source_lines = handle.read()
        interactive = run(fairseq_cli(
            "interactive", data, "--user-dir", USER_DIR, "--path", checkpoint, "--source-lang", "zh",
            "--target-lang", "en", "--beam", str(beam), "--buffer-size", "8", "--batch-size", "8",
            "--required-batch-size-multiple", "1", "--max-len-b", "20"), input=source_lines)
        interactive_ids = re.findall(r"^H-(\d+)\t", interactive.stdout, flags=re.M)
        assert sorted(map(int, interactive_ids)) == list(range(TINY_TEST_SENTENCES)), interactive.stdout[-2000:]
        return {"train": first, "resume": resumed, "generate": generated, "hypotheses": hypotheses,
                "interactive": interactive}

    return roundtrip
