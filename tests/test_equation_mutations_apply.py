"""The hand mutations of tests/equation_mutations.py still apply to the model code: each
edit's text stands in its file exactly once. A refactor that moves a mutated line would
otherwise leave the mutation runner aborting (or, worse, a mutation that no longer
mutates), and the evidence that the end-to-end equation tests catch glue bugs would go stale."""
import os

import pytest

from tests.equation_mutations import MUTATIONS, ROOT

EDITS = [(family, name, path, old) for family, (_, mutations) in MUTATIONS.items()
         for name, edits, *_test in mutations for path, old, _new in edits]


@pytest.mark.parametrize("family, name, path, old", EDITS, ids=[f"{e[0]}:{e[1][:40]}" for e in EDITS])
def test_mutation_text_stands_once_in_the_model_code(family, name, path, old):
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        assert handle.read().count(old) == 1, f"{family} {name}: update tests/equation_mutations.py"


def test_every_family_has_its_test_file():
    for family, (test, mutations) in MUTATIONS.items():
        assert os.path.exists(os.path.join(ROOT, test)) and mutations, family
        for name, _edits, *instead in mutations:  # a test named instead: file and function exist
            if instead:
                path, function = instead[0].split("::")
                with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
                    assert f"def {function}(" in handle.read(), f"{family} {name}: {instead[0]}"
