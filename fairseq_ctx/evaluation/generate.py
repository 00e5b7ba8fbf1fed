"""Translate a binarized split with fairseq-generate, every sentence accounted for.

Guards against fairseq's silent data loss: generation runs with
``--required-batch-size-multiple 1`` (fairseq otherwise drops a last batch that is not
a multiple of 8), and :func:`parse_hypotheses` fails unless EVERY sentence got exactly one
hypothesis; hypotheses come back in corpus order, BPE-merged (``--remove-bpe``).
"""
import os
import re
import subprocess
import sys

from ..paths import PACKAGE_DIR as USER_DIR

HYPOTHESIS = re.compile(r"^H-(\d+)\t(\S+)\t(.*)$")


def parse_hypotheses(generate_output, expected):
    """Map sentence id -> hypothesis; raise unless ids are exactly 0..expected-1, once each."""
    hyps = {}
    # fairseq-generate ends its lines with \n only; str.splitlines() would also cut a hypothesis
    # at U+2028, U+0085, \x0c, ... (characters a vocabulary can hold), silently shortening it
    for line in generate_output.split("\n"):
        match = HYPOTHESIS.match(line)
        if match:
            idx = int(match.group(1))
            if idx in hyps:
                raise RuntimeError(f"sentence {idx} has more than one hypothesis (is --nbest > 1?)")
            hyps[idx] = match.group(3)
    missing = sorted(set(range(expected)) - set(hyps))
    extra = sorted(set(hyps) - set(range(expected)))
    if missing or extra:
        raise RuntimeError(
            f"fairseq-generate translated {len(hyps)} sentences but the reference has {expected}: "
            f"missing ids {missing[:10]}{'...' if len(missing) > 10 else ''}, unexpected ids {extra[:10]}"
        )
    return [hyps[i] for i in range(expected)]


def generate(data, path, src, tgt, subset="test", beam=5, batch_size=128, extra_args=(), extra_env=None):
    """fairseq-generate's output; ``extra_env``: variables set for it on top of this
    process's (e.g. CUDA_VISIBLE_DEVICES, to pin it to one GPU)."""
    cmd = [
        sys.executable, "-m", "fairseq_cli.generate", data,
        "--user-dir", USER_DIR, "--path", path, "--source-lang", src, "--target-lang", tgt,
        "--gen-subset", subset, "--beam", str(beam), "--batch-size", str(batch_size),
        "--required-batch-size-multiple", "1", "--remove-bpe", "--nbest", "1",
        *extra_args,
    ]
    # fairseq-generate needs the architectures: never pass on the data tools' opt-out
    env = {k: v for k, v in os.environ.items() if k != "FAIRSEQ_CTX_NO_MODELS"}
    env.update(extra_env or {})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"fairseq-generate failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout
