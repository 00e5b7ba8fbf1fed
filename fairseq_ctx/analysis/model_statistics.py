"""Statistics of trained models over a data set, as tables and PNG plots.

* Context-aware SANs (Yang et al. Figures 2-3): the average gating scalars lambda_Q /
  lambda_K per layer and side, through the model's own hook
  (``record_context_gates`` / ``context_gate_means`` in transformer_context_aware.py).
* Cross aggregation (Cao et al.): routing statistics per layer, collected with forward
  hooks on every ``CrossAggregation`` module (the model has no hook of its own): the
  vertical head weights lambda (Eq. 13, mean per head), the normalised entropy of the
  final vertical coupling over heads (1 = uniform, 0 = one head), and the size of the
  routed term relative to the logits it is added to (mean |Omega| / mean |E| over
  unmasked keys, Eq. 9).

The model runs teacher-forced (as in validation) over ``--subset`` of ``--data``.

Usage: python scripts/analysis/gate_statistics.py --data BIN --path CKPT --out-dir DIR [--subset valid]
       python scripts/analysis/routing_statistics.py --data BIN --path CKPT --out-dir DIR
"""
import argparse
import json
import math
import os
import sys
from collections import defaultdict

import torch

from ..atomic import atomic_write
from ..evaluation.scoring import markdown_table

USER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(path, data, subset, max_tokens=4000):
    import fairseq  # noqa: F401
    from fairseq import checkpoint_utils, utils

    import fairseq_ctx.models  # noqa: F401  (registers the architectures; see distributed_entry)

    utils.import_user_module(argparse.Namespace(user_dir=USER_DIR))
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data})
    model = models[0].float().eval()
    task.load_dataset(subset)
    iterator = task.get_batch_iterator(dataset=task.dataset(subset), max_tokens=max_tokens,
                                       required_batch_size_multiple=1, num_workers=0).next_epoch_itr(shuffle=False)
    return model, iterator


@torch.no_grad()
def run_over(model, iterator, max_batches=None):
    sentences = 0
    for i, sample in enumerate(iterator):
        if max_batches is not None and i >= max_batches:
            break
        model(**sample["net_input"])
        sentences += sample["nsentences"]
    return sentences


def gate_statistics(path, data, subset="valid", max_batches=None):
    model, iterator = load(path, data, subset)
    if not hasattr(model, "record_context_gates"):
        raise SystemExit(f"{path}: not a transformer_context_aware model (no record_context_gates hook)")
    model.record_context_gates(True)
    sentences = run_over(model, iterator, max_batches)
    means = model.context_gate_means()
    model.record_context_gates(False)
    return {"sentences": sentences, "gates": means}


class RoutingRecorder:
    """Forward hooks on CrossAggregation modules; accumulates per-layer statistics."""

    def __init__(self, model):
        from ..modules.cross_aggregation import CrossAggregation

        self.stats = defaultdict(lambda: defaultdict(float))
        self.handles = []
        index = defaultdict(int)
        for name, module in model.named_modules():
            if isinstance(module, CrossAggregation):
                side = "decoder" if ".decoder." in f".{name}." or name.startswith("decoder") else "encoder"
                index[side] += 1
                key = (side, index[side])
                self.handles.append(module.register_forward_hook(self._hook(key)))

    def _hook(self, key):
        def hook(module, inputs, output):
            from ..modules.cross_aggregation import vertical_routing

            logits, padding = inputs[0], inputs[1] if len(inputs) > 1 else None
            routed = output[0]
            votes = logits.float().masked_fill(torch.isneginf(logits), 0.0)
            keep = ~torch.isneginf(logits)
            stats = self.stats[key]
            stats["calls"] += 1
            stats["routed_abs"] += routed.float().abs()[keep].mean().item()
            stats["logit_abs"] += votes.abs()[keep].mean().item()
            if module.vertical:
                _, agreement = vertical_routing(votes, module.iters)
                if padding is not None and padding.size(1) == logits.size(2):
                    agreement = agreement * (~padding.bool()).unsqueeze(1)
                coupling = agreement.softmax(dim=1)  # over heads, per query (Alg. 1 line 4)
                entropy = -(coupling * coupling.clamp_min(1e-12).log()).sum(1) / math.log(module.num_heads)
                stats["coupling_entropy"] += entropy.mean().item()
                if not module.causal:
                    head_scale = torch.einsum("gh,bh->bg", module.head_weight.weight.float(),
                                              agreement.sum(-1)).softmax(dim=1)  # Eq. 13
                    for h, value in enumerate(head_scale.mean(0).tolist()):
                        stats[f"lambda_{h}"] += value
        return hook

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def table(self):
        rows = []
        for (side, layer), stats in sorted(self.stats.items()):
            calls = stats["calls"]
            row = {"side": side, "layer": layer,
                   "routed_to_logit_ratio": stats["routed_abs"] / max(stats["logit_abs"], 1e-12)}
            if "coupling_entropy" in stats:
                row["vertical_coupling_entropy"] = stats["coupling_entropy"] / calls
            lambdas = [stats[k] / calls for k in sorted((k for k in stats if k.startswith("lambda_")),
                                                         key=lambda k: int(k.split("_")[1]))]
            if lambdas:
                row["head_lambda"] = lambdas
            rows.append(row)
        return rows


def routing_statistics(path, data, subset="valid", max_batches=None):
    model, iterator = load(path, data, subset)
    recorder = RoutingRecorder(model)
    if not recorder.handles:
        raise SystemExit(f"{path}: no CrossAggregation modules (not a transformer_cross_agg model)")
    sentences = run_over(model, iterator, max_batches)
    recorder.remove()
    return {"sentences": sentences, "layers": recorder.table()}


def _plot(path, series, ylabel, title):
    from .plotting import pyplot

    try:
        plt = pyplot()
    except ImportError:
        print(f"statistics: matplotlib not installed; {path} not written (the tables were)", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_xlabel("layer")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_gates(result, out_dir):
    rows, series = [], {}
    for side, layers in result["gates"].items():
        for row in layers:
            rows.append((side, row["layer"], _fmt(row.get("lambda_q")), _fmt(row.get("lambda_k")), row["positions"]))
        for name in ("lambda_q", "lambda_k"):
            points = [(r["layer"], r[name]) for r in layers if name in r]
            if points:
                series[f"{side} {name}"] = ([p[0] for p in points], [p[1] for p in points])
    table = markdown_table(["side", "layer", "lambda_Q", "lambda_K", "positions"], rows)
    _write(out_dir, "gates", result, table)
    _plot(os.path.join(out_dir, "gates.png"), series, "average gate", "Context gates per layer (Yang et al. Fig. 2-3)")
    return table


def write_routing(result, out_dir):
    rows, series = [], defaultdict(lambda: ([], []))
    for row in result["layers"]:
        rows.append((row["side"], row["layer"], _fmt(row["routed_to_logit_ratio"]),
                     _fmt(row.get("vertical_coupling_entropy")),
                     " ".join(_fmt(v) for v in row.get("head_lambda", [])) or ""))
        for name in ("routed_to_logit_ratio", "vertical_coupling_entropy"):
            if name in row:
                series[f"{row['side']} {name}"][0].append(row["layer"])
                series[f"{row['side']} {name}"][1].append(row[name])
    table = markdown_table(["side", "layer", "|Omega| / |E|", "vertical coupling entropy", "head lambda (Eq. 13)"], rows)
    _write(out_dir, "routing", result, table)
    _plot(os.path.join(out_dir, "routing.png"), dict(series), "value", "Cross-aggregation routing per layer")
    return table


def _fmt(value):
    return "" if value is None else f"{value:.4f}"


def _write(out_dir, name, result, table):
    with atomic_write(os.path.join(out_dir, f"{name}.json")) as handle:
        json.dump(result, handle, indent=1)
    with atomic_write(os.path.join(out_dir, f"{name}.md")) as handle:
        handle.write(table)


def main(kind, argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--path", required=True, help="checkpoint")
    parser.add_argument("--subset", default="valid")
    parser.add_argument("--max-batches", type=int, default=None)
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args(argv)
    for path in (args.data, args.path):
        if not os.path.exists(path):
            parser.error(f"not found: {path}")
    if kind == "gates":
        table = write_gates(gate_statistics(args.path, args.data, args.subset, args.max_batches), args.out_dir)
    else:
        table = write_routing(routing_statistics(args.path, args.data, args.subset, args.max_batches), args.out_dir)
    print(table)
