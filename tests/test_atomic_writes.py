"""fairseq_ctx.atomic: an output exists only once completely written, and a failed write
leaves the previous output and no stray temporary file."""
import os

import pytest
import torch

from fairseq_ctx.atomic import atomic_path, atomic_torch_save, atomic_write, atomic_write_lines


def _names(directory):
    return sorted(os.listdir(directory))


def test_failed_write_keeps_previous_output_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "result.json"
    out.write_text("old\n")

    def lines():
        yield "new 1"
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        atomic_write_lines(str(out), lines())
    assert out.read_text() == "old\n"
    assert _names(tmp_path) == ["result.json"]


def test_output_is_absent_while_being_written(tmp_path):
    out = tmp_path / "sub" / "hyp.txt"
    with atomic_write(str(out)) as handle:
        handle.write("a\n")
        assert not out.exists()  # a reader never sees half a file under the final name
    assert out.read_text() == "a\n"


def test_atomic_path_suffix_and_torch_save(tmp_path):
    with atomic_path(str(tmp_path / "curve.png"), suffix=".png") as tmp:
        assert tmp.endswith(".png") and os.path.dirname(tmp) == str(tmp_path)
        open(tmp, "wb").close()
    target = tmp_path / "avg.pt"
    atomic_torch_save({"w": torch.ones(2)}, str(target))
    assert torch.equal(torch.load(str(target))["w"], torch.ones(2))
    assert _names(tmp_path) == ["avg.pt", "curve.png"]


def test_outputs_get_the_permissions_open_would_give(tmp_path):
    umask = os.umask(0o022)
    try:
        atomic_write_lines(str(tmp_path / "table.md"), ["x"])
    finally:
        os.umask(umask)
    assert (os.stat(tmp_path / "table.md").st_mode & 0o777) == 0o644
