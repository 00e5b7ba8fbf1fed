"""Learning curves from fairseq-train logs and intermediate checkpoints.

* ``parse_valid_log``: the validation lines fairseq-train prints (simple log format,
  ``--no-progress-bar``)::

      2026-11-23 02:09:28 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.997 | nll_loss 8.963 | ppl 499.09 | wps 27197.9 | wpb 163.5 | bsz 10 | num_updates 5

  (and the JSON log format's ``valid | {"epoch": 1, "valid_loss": "8.997", ...}``) ->
  {num_updates: {"loss": ..., "nll_loss": ..., "ppl": ..., "epoch": ...}}. A log that
  holds several runs (a resumed training appends) keeps the last line per update count.
* ``checkpoint_at``: the ``--save-interval-updates`` checkpoint fairseq wrote at an
  update count (``checkpoint_EPOCH_UPDATES.pt``).
* ``plot_learning_curves``: PNG (matplotlib, Agg) of valid loss and BLEU against
  updates, each system beside its baseline, mean over seeds with a min-max band.
"""
import json
import math
import os
import re
from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple

from ..atomic import atomic_path

VALID_SIMPLE = re.compile(r"\| valid on '(?P<subset>[^']+)' subset \|(?P<fields>.*)$")
EPOCH = re.compile(r"\| epoch (\d+)\b")
VALID_JSON = re.compile(r"\| (?P<tag>[\w-]+) \| (?P<json>\{.*\})\s*$")
CHECKPOINT = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")
KEYS = ("loss", "nll_loss", "ppl", "epoch")


def _number(text):
    try:
        x = float(text)
    except (TypeError, ValueError):
        return None
    return int(x) if x.is_integer() and "." not in str(text) else x


def _validation_fields(line: str, subset: str) -> Optional[Dict[str, str]]:
    """The fields of one "valid on 'SUBSET' subset" line (simple or JSON log format), or None."""
    m = VALID_SIMPLE.search(line)
    if m:
        if m.group("subset") != subset:
            return None
        fields = {}
        for field in m.group("fields").split("|"):
            parts = field.strip().split(None, 1)
            if len(parts) == 2:
                fields[parts[0]] = parts[1].strip()
        epoch = EPOCH.search(line[: m.start()])
        if epoch:
            fields.setdefault("epoch", epoch.group(1))
        return fields
    m = VALID_JSON.search(line)
    if not m or m.group("tag") != subset:
        return None
    try:
        record = json.loads(m.group("json"))
    except ValueError:
        return None
    prefix = subset + "_"
    fields = {k[len(prefix):]: v for k, v in record.items() if k.startswith(prefix)}
    if "epoch" in record:
        fields.setdefault("epoch", record["epoch"])
    return fields


def parse_valid_log(text: str, subset: str = "valid") -> Dict[int, Dict[str, float]]:
    """fairseq-train output -> {num_updates: {loss, nll_loss, ppl, epoch}} of ``subset``."""
    out = {}
    for line in text.splitlines():
        fields = _validation_fields(line, subset)
        if fields is None:
            continue
        updates = _number(fields.get("num_updates"))
        if updates is None or _number(fields.get("loss")) is None:
            continue
        out[int(updates)] = {k: _number(fields[k]) for k in KEYS if k in fields and _number(fields[k]) is not None}
    return dict(sorted(out.items()))


def parse_valid_log_file(path: str, subset: str = "valid") -> Dict[int, Dict[str, float]]:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        return parse_valid_log(handle.read(), subset)


def checkpoints_by_update(save_dir: str) -> Dict[int, str]:
    """{updates: path} of the checkpoint_EPOCH_UPDATES.pt files in ``save_dir``."""
    out = {}
    if os.path.isdir(save_dir):
        for name in os.listdir(save_dir):
            m = CHECKPOINT.match(name)
            if m:
                out[int(m.group(2))] = os.path.join(save_dir, name)
    return out


def checkpoint_at(save_dir: str, updates: int) -> Optional[str]:
    return checkpoints_by_update(save_dir).get(int(updates))


def plot_learning_curves(curves: Mapping[str, Mapping[str, Mapping]], pairs: Sequence[Tuple[str, Optional[str]]],
                         path: str, metrics: Iterable[Tuple[str, str]] = (("valid_loss", "valid loss"),
                                                                         ("bleu", "test BLEU")),
                         title: Optional[str] = None) -> str:
    """curves: {config: {metric: curve_summary(...)}}; pairs: [(system, baseline or None)].

    One row per pair, one column per metric; each config's mean over seeds as a line with
    markers and its min-max over seeds as a band. Returns ``path``.
    """
    from .plotting import pyplot

    plt = pyplot()

    metrics = list(metrics)
    pairs = list(pairs) or [(name, None) for name in sorted(curves)]
    fig, axes = plt.subplots(len(pairs), len(metrics), figsize=(5.2 * len(metrics), 3.4 * len(pairs)),
                             squeeze=False)
    for row, (system, baseline) in enumerate(pairs):
        for col, (metric, label) in enumerate(metrics):
            ax = axes[row][col]
            drawn = False
            for name, style in ((baseline, "--"), (system, "-")):
                curve = (curves.get(name) or {}).get(metric) if name else None
                if not curve or not curve.get("updates"):
                    continue
                xs = curve["updates"]
                # a point where a seed diverged (None) is a gap in the line, not a value
                mean, low, high = ([math.nan if x is None else x for x in curve[k]] for k in ("mean", "min", "max"))
                line, = ax.plot(xs, mean, style, marker="o", markersize=3, label=f"{name} (n={curve.get('n')})")
                ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
                drawn = True
            if not drawn:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
            ax.set_xlabel("updates")
            ax.set_ylabel(label)
            ax.set_title(f"{system} vs {baseline}" if baseline else system, fontsize=9)
            ax.grid(True, alpha=0.3)
            if drawn:
                ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
    return path
