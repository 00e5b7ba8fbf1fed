"""Every hand mutation of tests/equation_mutations.py (the four sentential glue bugs of issue 15
and the others of each family: a sublayer moved, an axis or a layer index changed, a residual
dropped) makes its family's end-to-end equation test fail with an assertion, not only crash.
Run on a copy of the checkout, since the runner rewrites model files while a mutation's tests
run; a mutation that no longer applies aborts the runner (see also
test_equation_mutations_apply.py, which names the stale edit)."""
import os
import shutil
import subprocess
import sys

import pytest

from tests.equation_mutations import MUTATIONS, ROOT


def test_every_family_has_hand_mutations():
    assert set(MUTATIONS) == {"sentential", "context_aware", "cross_agg", "multihop"}
    assert all(mutations for _, mutations in MUTATIONS.values())


# one test per family, so that parallel workers share them out
@pytest.mark.parametrize("family", list(MUTATIONS))
def test_every_hand_mutation_of_the_glue_fails_an_equation_test(family, tmp_path):
    copy = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("fairseq_ctx", "tests"):
        shutil.copytree(os.path.join(ROOT, name), copy / name, ignore=ignore)
    env = dict(os.environ, PYTHONPATH=str(copy), OMP_NUM_THREADS="1")
    imported = subprocess.run([sys.executable, "-c", "import fairseq_ctx; print(fairseq_ctx.__file__)"], cwd=copy,
                              env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert imported.startswith(str(copy)), f"the copy's tests would import {imported}, not the mutated copy"

    proc = subprocess.run([sys.executable, str(copy / "tests" / "equation_mutations.py"), family], cwd=copy, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    verdicts = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(verdicts) == len(MUTATIONS[family][1]), proc.stdout
    assert all(f" {family} " in line for line in verdicts), proc.stdout
    not_caught = [line for line in verdicts if not line.startswith("CAUGHT ")]
    assert not not_caught, "\n".join(not_caught)
