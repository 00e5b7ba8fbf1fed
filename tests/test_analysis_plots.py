"""The analyses' PNGs (fairseq_ctx/analysis/plotting.py and the writers that use it): written
with their tables or not at all, and without matplotlib's DEBUG lines in the command's output
(fairseq's logging set-up lets them through)."""
import os
import subprocess
import sys

import pytest

from fairseq_ctx.analysis import model_statistics
from tests.conftest import ROOT, cli_env


def test_plotting_prints_no_matplotlib_debug_lines():
    # a fresh interpreter: matplotlib logs at DEBUG while it is first imported
    code = ("import logging; logging.basicConfig(level=logging.DEBUG)\n"
            "from fairseq_ctx.analysis.plotting import pyplot\n"
            "plt = pyplot(); fig, ax = plt.subplots(); ax.plot([1, 2]); fig.savefig(__import__('io').BytesIO())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=cli_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "DEBUG:matplotlib" not in proc.stderr, proc.stderr[-2000:]


def test_a_failing_plot_leaves_the_earlier_statistics_as_they_were(tmp_path, monkeypatch):
    result = {"sentences": 3, "layers": [{"side": "encoder", "layer": 1, "routed_to_logit_ratio": 0.25,
                                          "vertical_coupling_entropy": 0.5, "head_lambda": [0.5, 0.5]}]}
    model_statistics.write_routing(result, str(tmp_path))
    before = {name: (tmp_path / name).read_bytes() for name in ("routing.json", "routing.md", "routing.png")}
    assert before["routing.png"].startswith(b"\x89PNG")

    def broken_plot(*args):
        raise RuntimeError("the plot failed")

    monkeypatch.setattr(model_statistics, "_plot", broken_plot)
    with pytest.raises(RuntimeError, match="the plot failed"):
        model_statistics.write_routing({**result, "sentences": 4}, str(tmp_path))
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert sorted(os.listdir(tmp_path)) == sorted(before)  # no temporary left


def test_an_interrupted_length_plot_leaves_no_png(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from fairseq_ctx.evaluation import scoring

    def savefig_cut_off(self, path, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"\x89PNG half")
        raise OSError("No space left on device")

    monkeypatch.setattr(Figure, "savefig", savefig_cut_off)
    rows = [{"bucket": "0-9", "bleu": 10.0, "sentences": 3}]
    with pytest.raises(OSError, match="No space left"):
        scoring.plot_length_buckets({"system": rows}, str(tmp_path / "length.png"))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("gated", [True, False])
def test_the_gate_plot_shows_the_gates_or_for_an_ungated_model_the_context_size(tmp_path, monkeypatch, gated):
    row = {"layer": 1, "context_q": 0.3, "context_k": 0.2, "tv_context": 0.1, "tv_stock": 0.2, "positions": 9}
    if gated:
        row.update(lambda_q=0.4, lambda_k=0.6)
    plotted = {}
    monkeypatch.setattr(model_statistics, "_plot",
                        lambda path, series, ylabel, title: plotted.update(series=series, title=title) or
                        open(path, "wb").close())
    model_statistics.write_gates({"sentences": 2, "gates": {"encoder": [row], "decoder": []}}, str(tmp_path))
    names = ("lambda_q", "lambda_k") if gated else ("context_q", "context_k")
    assert plotted["series"] == {f"encoder {name}": ([1], [row[name]]) for name in names}
    assert plotted["title"].startswith("Context gates per layer") == gated
