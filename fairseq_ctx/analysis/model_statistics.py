"""Statistics of trained models over a data set, as tables and PNG plots.

* Context-aware SANs (Yang et al. Figures 2-3): the average gating scalars lambda_Q /
  lambda_K per layer and side, through the model's own hook
  (``record_context_gates`` / ``context_gate_means`` in transformer_context_aware.py);
  beside them, what the context term lambda C U of Eq. 5 does to the attention, collected
  with forward hooks (``ContextSizeRecorder``): its size against the rest of Q^ and K^, and
  the total variation distance between the layer's attention and the one without the term
  (the gate's shrinkage kept) and without Eq. 5-6 at all. A gate mean alone does not say
  this: lambda also shrinks Q and K (a change of temperature with no context in it), and a
  key shift shared by a whole sentence changes nothing.
* Cross aggregation (Cao et al.): routing statistics per layer, collected with forward
  hooks on every ``CrossAggregation`` module (the model has no hook of its own): the
  vertical head weights lambda (Eq. 13, mean per head), the normalised entropy of the
  vertical coupling over heads that the last routing iteration used (Alg. 1 line 4 of
  iteration T: softmax of the agreements after T - 1 updates; 1 = uniform, 0 = one head;
  exactly 1 for T = 1), and the size of the
  routed term relative to the logits it is added to (sum |Omega| / sum |E| over the
  unmasked keys, Eq. 9). Every figure is pooled over the real tokens of the data set
  (padding queries left out), so it does not depend on the batching.

The model runs teacher-forced (as in validation) over ``--subset`` of ``--data``, in
eval mode, or with ``--train-mode`` as in training (every dropout on, including
--context-dropout; no gradient; the global RNG seeded with ``--seed``, default 1, refused
in eval mode); in fp32 whatever the precision the model was trained in.

Usage: python scripts/analysis/gate_statistics.py --data BIN --path CKPT --out-dir DIR [--subset valid] [--train-mode]
       python scripts/analysis/routing_statistics.py --data BIN --path CKPT --out-dir DIR
"""
import argparse
import json
import math
import os
import pickle
import sys
from collections import defaultdict

import torch

from ..atomic import atomic_path, atomic_write
from ..evaluation.scoring import markdown_table

USER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(path, data, subset, max_tokens=4000):
    import fairseq  # noqa: F401
    from fairseq import checkpoint_utils, utils

    import fairseq_ctx.models  # noqa: F401  (registers the architectures; see distributed_entry)

    utils.import_user_module(argparse.Namespace(user_dir=USER_DIR))
    try:
        models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data})
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        hint = (" (are --data's dictionaries the ones the model was trained with?)"
                if "size mismatch" in str(error) else "")
        raise SystemExit(f"statistics: could not load {path} with --data {data}: {lines[0]}"
                         f"{' ' + lines[1].strip() if len(lines) > 1 else ''}{hint}")
    model = models[0].float().eval()
    try:
        task.load_dataset(subset)
    except FileNotFoundError as error:
        raise SystemExit(f"statistics: {error} (--subset {subset} of --data {data})")
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


def gate_statistics(path, data, subset="valid", max_batches=None, train_mode=False, seed=1):
    model, iterator = load(path, data, subset)
    if not hasattr(model, "record_context_gates"):
        raise SystemExit(f"{path}: not a transformer_context_aware model (no record_context_gates hook)")
    if train_mode:
        torch.manual_seed(seed)  # the dropout masks (fairseq's and --context-dropout's)
        model.train()
    model.record_context_gates(True)
    sizes = ContextSizeRecorder(model._context_attentions())
    try:
        sentences = run_over(model, iterator, max_batches)
        means = model.context_gate_means()
    finally:
        sizes.remove()
        model.record_context_gates(False)
        model.eval()
    return {"sentences": sentences, "mode": "train" if train_mode else "eval",
            "seed": seed if train_mode else None,  # eval mode draws no masks
            "gates": merge_rows(means, sizes.table())}


def merge_rows(gate_means, size_rows):
    """One row per contextualised layer and side: the size statistics (every such layer,
    with its position count) and the gate means where the layer is gated."""
    merged = {}
    for side in ("encoder", "decoder"):
        gates = {row["layer"]: row for row in gate_means.get(side, [])}
        rows = [{**gates.get(row["layer"], {}), **row} for row in size_rows.get(side, [])]
        sized = {row["layer"] for row in rows}
        rows += [row for layer, row in gates.items() if layer not in sized]
        merged[side] = sorted(rows, key=lambda row: row["layer"])
    return merged


class ContextSizeRecorder:
    """What the context term of Eq. 5 does to the attention, per (side, layer), over the
    non-padding positions of teacher-forced (full-sequence) forwards. Eq. 5 writes
    Q^ = (1 - lambda_Q) Q + lambda_Q C U_Q: the gate both shrinks Q (which changes the
    attention's temperature, with or without context) and mixes in C U. Taking the gate as it
    is, the layer without the context term has Q~ = (1 - lambda_Q) Q, K~ = (1 - lambda_K) K
    (Q~ = Q ungated, as in footnote 1). Reported:

    * ``context_q`` = rms(lambda_Q C U_Q) / rms(Q~): the context term against the rest;
    * ``context_k``: the same for K, both terms less their sentence's mean over the
      non-padding keys (a shift shared by every key moves a query's logits by a constant,
      which the softmax cancels; in the decoder, where query i sees keys j <= i only, this
      centring is approximate: trust the TVs there);
    * ``tv_context``: the total variation distance 1/2 sum_j |p_j - p~_j| between the
      layer's attention p (from Q^, K^) and p~ (from Q~, K~): what the context term changes;
    * ``tv_stock``: the same against the attention from Q, K (the layer's own projections
      with Eq. 5-6 left out): the gate's shrinkage and the context term together. Not a
      transformer's attention: these weights were trained through Eq. 5-6.

    TVs are per head, before attention dropout, averaged over heads and query positions (not
    the TV of the head-averaged attention). Ratios are pooled over tokens (sums over every
    position, then the ratio). In train mode Q^ and K^ are what training computes (the
    dropped C U under --context-dropout). Hooks: the attention module's key_padding_mask
    (B x T, True = padding) and attn_mask (the decoder's causal mask) are stashed by a
    pre-hook and read by a hook on its contextualizer, whose inputs are (Q, K, ...) and
    outputs (Q^, K^, gates); an incremental (one-step) call is skipped."""

    def __init__(self, attentions):
        self.sums = {}
        self.handles = []
        for side, attention in attentions:
            key = (side, attention.layer_index)
            stash = {}
            self.handles.append(attention.register_forward_pre_hook(self._stash(stash), with_kwargs=True))
            self.handles.append(attention.contextualizer.register_forward_hook(self._hook(key, stash, attention)))

    @staticmethod
    def _stash(stash):
        def pre_hook(module, args, kwargs):
            # MultiheadAttention.forward(query, key, value, key_padding_mask, incremental_state,
            # need_weights, static_kv, attn_mask, ...): fairseq's layers pass them by keyword
            def argument(name, position):
                return kwargs[name] if name in kwargs else (args[position] if len(args) > position else None)
            stash["padding"] = argument("key_padding_mask", 3)
            stash["incremental"] = argument("incremental_state", 4) is not None
            stash["attn_mask"] = argument("attn_mask", 7)
        return pre_hook

    def _hook(self, key, stash, attention):
        @torch.no_grad()
        def hook(module, inputs, outputs):
            if stash.get("incremental"):
                return
            plain = {"query": inputs[0].double(), "key": inputs[1].double()}
            hat = {"query": outputs[0].double(), "key": outputs[1].double()}
            gates = outputs[2]
            without = dict(plain)  # Eq. 5 without its context term
            for index, target in enumerate(module.targets):
                if gates is not None:
                    without[target] = (1 - gates[..., index:index + 1].double()) * plain[target]
            T, B, _ = plain["query"].shape
            padding = stash.get("padding")
            if padding is None:
                keep = torch.ones(T, B, dtype=torch.bool, device=plain["query"].device)
            else:
                keep = ~padding.t().to(torch.bool)  # T x B
            weight = keep.unsqueeze(-1).double()

            def centred(x):  # less the sentence's mean over its non-padding positions
                return x - (x * weight).sum(0, keepdim=True) / weight.sum(0, keepdim=True).clamp_min(1)

            sums = self.sums.setdefault(key, defaultdict(float))
            sums["positions"] += int(keep.sum())
            for name, term, rest in (("q", hat["query"] - without["query"], without["query"]),
                                     ("k", centred(hat["key"] - without["key"]), centred(without["key"]))):
                sums[f"term_{name}"] += term[keep].pow(2).sum().item()
                sums[f"rest_{name}"] += rest[keep].pow(2).sum().item()
            attention_mask = stash.get("attn_mask")
            p = self._attention(hat["query"], hat["key"], attention, padding, attention_mask)
            for name, (q, k) in (("tv_context", (without["query"], without["key"])),
                                 ("tv_stock", (plain["query"], plain["key"]))):
                other = self._attention(q, k, attention, padding, attention_mask)
                tv = 0.5 * (p - other).abs().sum(-1).mean(1)  # B x T (query positions)
                sums[name] += tv.t()[keep].sum().item()
        return hook

    @staticmethod
    def _attention(q, k, attention, padding, attn_mask):
        """softmax(Q K^T / sqrt(d_h) + masks) per head, as the model computes it: B x H x T x T."""
        T, B, _ = q.shape
        heads = lambda t: t.view(T, B, attention.num_heads, attention.head_dim).permute(1, 2, 0, 3)  # noqa: E731
        scores = heads(q) @ heads(k).transpose(-1, -2) * attention.head_dim ** -0.5
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                raise ValueError("a boolean attn_mask: fairseq passes additive float masks, which the model adds")
            scores = scores + attn_mask.double()
        if padding is not None:
            scores = scores.masked_fill(padding.to(torch.bool).view(B, 1, 1, T), float("-inf"))
        return scores.softmax(-1)

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def table(self):
        """{side: [{"layer": l, "context_q": .., "context_k": .., "tv_context": .., "tv_stock": ..,
        "positions": n}]}"""
        result = defaultdict(list)
        for (side, layer), sums in sorted(self.sums.items()):
            positions = int(sums["positions"])
            result[side].append({
                "layer": layer,
                "context_q": math.sqrt(sums["term_q"] / max(sums["rest_q"], 1e-300)),
                "context_k": math.sqrt(sums["term_k"] / max(sums["rest_k"], 1e-300)),
                "tv_context": sums["tv_context"] / max(positions, 1),
                "tv_stock": sums["tv_stock"] / max(positions, 1),
                "positions": positions,
            })
        return dict(result)


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
        @torch.no_grad()
        def hook(module, inputs, output):
            from ..modules.cross_aggregation import vertical_routing

            logits = inputs[0]
            padding = inputs[1] if len(inputs) > 1 else None
            if len(inputs) > 2 and inputs[2] is not None:
                return  # an incremental call (a state, {} at the first step): the statistics are of full passes
            bsz, _, num_queries, _ = logits.shape
            # the real queries: padding rows hold finite logits (over real keys) but are no
            # token of the data; every sum below runs over real queries only
            if padding is None:
                query_valid = logits.new_ones(bsz, num_queries, dtype=torch.bool)
            else:
                query_valid = ~padding.bool()[:, -num_queries:]
            routed = output[0]
            votes = logits.float().masked_fill(torch.isneginf(logits), 0.0)
            keep = ~torch.isneginf(logits) & query_valid[:, None, :, None]  # unmasked keys of real queries
            stats = self.stats[key]
            stats["routed_abs"] += routed.float().abs()[keep].double().sum().item()
            stats["logit_abs"] += votes.abs()[keep].double().sum().item()
            if module.vertical:
                _, agreement = vertical_routing(votes, module.iters)  # B after the last iteration (Eq. 13's)
                agreement = agreement * query_valid.unsqueeze(1)  # as the module does (Eq. 13)
                # the coupling the last iteration used (Alg. 1 line 4 of iteration T): softmax of B
                # after T - 1 updates (B = 0, uniform, for T = 1), not of the final B, which no
                # iteration turns into a coupling
                if module.iters > 1:
                    _, used = vertical_routing(votes, module.iters - 1)
                else:
                    used = torch.zeros_like(agreement)
                coupling = used.softmax(dim=1)  # over heads, per query
                entropy = -(coupling * coupling.clamp_min(1e-12).log()).sum(1) / math.log(module.num_heads)
                stats["coupling_entropy"] += entropy[query_valid].double().sum().item()
                stats["queries"] += int(query_valid.sum())
                if not module.causal:
                    head_scale = torch.einsum("gh,bh->bg", module.head_weight.weight.float(),
                                              agreement.sum(-1)).softmax(dim=1)  # Eq. 13, per sentence
                    stats["sentences"] += bsz
                    for h, value in enumerate(head_scale.double().sum(0).tolist()):
                        stats[f"lambda_{h}"] += value
        return hook

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def table(self):
        """Pooled over the data: |Omega| / |E| as the ratio of sums over the unmasked keys of
        real (non-padding) queries, the entropy as the mean over real queries, lambda as the
        mean over sentences (encoder side; the decoder's lambda differs per prefix)."""
        rows = []
        for (side, layer), stats in sorted(self.stats.items()):
            row = {"side": side, "layer": layer,
                   "routed_to_logit_ratio": stats["routed_abs"] / max(stats["logit_abs"], 1e-12)}
            if stats.get("queries"):
                row["vertical_coupling_entropy"] = stats["coupling_entropy"] / stats["queries"]
            lambdas = [stats[k] / stats["sentences"] for k in sorted((k for k in stats if k.startswith("lambda_")),
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
    try:
        sentences = run_over(model, iterator, max_batches)
    finally:
        recorder.remove()
    return {"sentences": sentences, "layers": recorder.table()}


def _plot(path, series, ylabel, title):
    from matplotlib.ticker import MaxNLocator

    from .plotting import pyplot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers are whole numbers
    ax.set_xlabel("layer")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def write_gates(result, out_dir):
    rows, series, sizes = [], {}, {}
    for side, layers in result["gates"].items():
        for row in layers:
            rows.append((side, row["layer"], _fmt(row.get("lambda_q")), _fmt(row.get("lambda_k")),
                         *(_fmt(row.get(name)) for name in ("context_q", "context_k", "tv_context", "tv_stock")),
                         row.get("positions", "")))
        for plotted, names in ((series, ("lambda_q", "lambda_k")), (sizes, ("context_q", "context_k"))):
            for name in names:
                points = [(r["layer"], r[name]) for r in layers if name in r]
                if points:
                    plotted[f"{side} {name}"] = ([p[0] for p in points], [p[1] for p in points])
    table = markdown_table(["side", "layer", "lambda_Q", "lambda_K", "rms(lQ CU_Q)/rms((1-lQ) Q)",
                            "rms(lK CU_K)/rms((1-lK) K), centred", "TV vs no context term", "TV vs Q, K",
                            "positions"], rows)
    seed = f" (dropout masks seeded {result['seed']})" if result.get("seed") is not None else ""
    table = (f"{result.get('mode', 'eval')} mode{seed}, {result['sentences']} sentences, non-padding positions; "
             "TVs per head, averaged over heads and queries (see model_statistics.ContextSizeRecorder)\n\n" + table)
    mode = ", train mode" if result.get("mode") == "train" else ""
    if series:
        title, ylabel = "Context gates per layer (Yang et al. Fig. 2-3)" + mode, "average gate"
    else:  # an ungated model (--no-context-gate): the size of its context term instead of an empty plot
        series, ylabel = sizes, "rms(C U) / rms(Q or K), keys centred"
        title = "Context term size per layer (no gates)" + mode
    _write(out_dir, "gates", result, table, lambda path: _plot(path, series, ylabel, title))
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
    _write(out_dir, "routing", result, table,
           lambda path: _plot(path, dict(series), "value", "Cross-aggregation routing per layer"))
    return table


def _fmt(value):
    return "" if value is None else f"{value:.4f}"


def _write(out_dir, name, result, table, plot):
    """NAME.json, NAME.md and NAME.png: the plot is drawn into a temporary first and the files
    are renamed in only when it is done, so a failing plot leaves the earlier outputs as they were."""
    def tables():
        with atomic_write(os.path.join(out_dir, f"{name}.json")) as handle:
            json.dump(result, handle, indent=1)
        with atomic_write(os.path.join(out_dir, f"{name}.md")) as handle:
            handle.write(table)

    png = os.path.join(out_dir, f"{name}.png")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"statistics: matplotlib not installed; {png} not written (the tables were)", file=sys.stderr)
        tables()
        return
    with atomic_path(png, suffix=".png") as partial:
        plot(partial)
        tables()


def main(kind, argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--path", required=True, help="checkpoint")
    parser.add_argument("--subset", default="valid")
    parser.add_argument("--max-batches", type=int, default=None, help="stop after N batches (N >= 1; default: all)")
    parser.add_argument("--out-dir", required=True)
    if kind == "gates":
        parser.add_argument("--train-mode", action="store_true",
                            help="run as in training: every dropout on (incl. --context-dropout), no gradient")
        parser.add_argument("--seed", type=int, default=None,
                            help="seeds the dropout masks of --train-mode (default 1; refused without it)")
    args = parser.parse_args(argv)
    if kind == "gates" and args.seed is not None and not args.train_mode:
        # eval mode draws no masks: a seed there would look like a choice that changed nothing
        parser.error("--seed seeds the dropout masks of --train-mode; without --train-mode there are none")
    for path in (args.data, args.path):
        if not os.path.exists(path):
            parser.error(f"not found: {path}")
    if not os.path.isfile(args.path):
        parser.error(f"--path {args.path} is not a file (a checkpoint, e.g. SAVE_DIR/checkpoint_best.pt)")
    if args.max_batches is not None and args.max_batches < 1:
        parser.error(f"--max-batches must be >= 1 (leave it out for the whole --subset), not {args.max_batches}")
    if os.path.exists(args.out_dir) and not os.path.isdir(args.out_dir):
        parser.error(f"--out-dir {args.out_dir} exists and is not a folder")
    if kind == "gates":
        table = write_gates(gate_statistics(args.path, args.data, args.subset, args.max_batches,
                                            args.train_mode, 1 if args.seed is None else args.seed), args.out_dir)
    else:
        table = write_routing(routing_statistics(args.path, args.data, args.subset, args.max_batches), args.out_dir)
    print(table)
