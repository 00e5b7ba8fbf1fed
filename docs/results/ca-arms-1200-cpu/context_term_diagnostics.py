"""What arm 25 (`22` without the gradient through C: gates frozen at lambda = 1/2, U trained from 0)
does with its trained context term, read from its checkpoints (post hoc, CPU):

- valid loss as fairseq-train computes it (task.valid_step, label-smoothed, base 2), and again with
  U set to 0 in every contextualised layer: with the gates at 1/2 that is arm `19`'s computation
  (Q and K halved, logits x 1/4) with 25's other weights, so the rise says how much the trained
  model relies on its context term;
- per layer and target (Eq. 5, lambda = 1/2): rms(C U_t) / rms(t) over the valid set (t = Q, K;
  padding positions included), and for K the same for C U_K's part that varies over the positions
  of a sentence (only that part moves a query's softmax over keys);
- where C U has a global and a deep projection (`deep_global+deep`): the valid loss with each of the
  two set to 0 in every layer (its query and key rows; layer 1 has the global one only), and the
  spread of each one's query-side product with the key side's own part, lambda_Q C U_Q . (1 - lambda_K) K
  (the whole query-side term for query-only arms such as `26`; with both sides it leaves out
  lambda_K C U_K);
- per encoder layer, for 25 as trained, with U set to 0, and for any other context-aware run (`24`):
  the spread of the attention logits over the keys and the attention entropy over the valid set
  (per head too), and for 25 as trained the spread of each of the four products Eq. 5 splits the
  logits into;
- the gradient U holds at that point, on the first batches of fairseq's epoch-1 shuffle at seed 1
  (batches from across the lengths) in train mode (dropout on, as in training): ||g_U|| / ||g||
  over the trained parameters (with --clip-norm, the other parameters' clipped gradient is scaled
  by 1 / ||g||, not 1 / ||g without U||: a factor sqrt(1 - share^2) where the clip acts).

    python docs/results/ca-arms-1200-cpu/context_term_diagnostics.py RUN_DIR... --data work/demo/data/bin \
        [--updates 800 1200] [--train-batches 20] [--at-start] [--json OUT]

RUN_DIR: a quality-compare run directory (its checkpoints/checkpoint_5_800.pt, checkpoint_last.pt).
"""
import argparse
import glob
import json
import math
import os

import torch
from fairseq import checkpoint_utils, utils

import fairseq_ctx  # noqa: F401  (registers the architectures)
from fairseq_ctx.modules.context_aware_attention import ContextualQueryKey


def _checkpoint(run_dir, updates):
    found = [p for p in glob.glob(os.path.join(run_dir, "checkpoints", f"checkpoint_*_{updates}.pt"))]
    if found:
        return found[0]
    last = os.path.join(run_dir, "checkpoints", "checkpoint_last.pt")
    state = torch.load(last, map_location="cpu", mmap=True, weights_only=False)
    return last if state["optimizer_history"][-1]["num_updates"] == updates else None


def _batches(task, model, subset, max_tokens, shuffle=False):
    """fairseq's batches of ``subset``: in its length order, or (``shuffle``) in the order of its
    epoch-1 shuffle at seed 1 (batches from across the lengths, as training sees them)."""
    task.load_dataset(subset, combine=False, epoch=1)
    return task.get_batch_iterator(
        dataset=task.dataset(subset), max_tokens=max_tokens,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        required_batch_size_multiple=1, seed=1).next_epoch_itr(shuffle=shuffle)


def _valid_loss(task, model, criterion, max_tokens):
    model.eval()
    loss = size = 0.0
    with torch.no_grad():
        for sample in _batches(task, model, "valid", max_tokens):
            batch_loss, batch_size, _ = task.valid_step(sample, model, criterion)
            loss, size = loss + float(batch_loss), size + batch_size
    return loss / size / math.log(2)


def _attention_statistics(task, model, max_tokens, with_term_sizes=True):
    """Per contextualised encoder layer, over the valid set: the attention logits' spread over the
    keys (rms over heads and non-padding queries of the standard deviation over non-padding keys of
    Q^ K^T / sqrt(d_h), Eq. 5 outputs) and the attention entropy (nats, mean over heads and queries;
    ``head_entropy``: per head; ``uniform_entropy``: the same for uniform attention, the mean over
    queries of the log of their sentence's length); with ``with_term_sizes``, ``part_spread``: the
    same spread for each of the four products Eq. 5 splits the logits into,
    (1 - lambda_Q) Q . (1 - lambda_K) K, (1 - lambda_Q) Q . lambda_K C U_K, lambda_Q C U_Q . (1 - lambda_K) K
    and lambda_Q C U_Q . lambda_K C U_K;
    with ``with_term_sizes``: rms(C U_t) / rms(t) for t = Q, K (padding included) and for K the same
    for C U_K's part that varies over the positions of a sentence (only that part moves a query's
    softmax over keys)."""
    sums, hooks, state = {}, [], {}

    def add(acc, key, values):
        acc[key] = [a + b for a, b in zip(acc.get(key, [0.0] * len(values)), values)]

    def hook(name, attention):
        def record(module, inputs, outputs):
            query, key, global_context, deep_context = (list(inputs) + [None] * 4)[:4]
            acc = sums.setdefault(name, {})
            if with_term_sizes:
                parts = module.project_context(global_context, deep_context).split(module.embed_dim, dim=-1)
                for target, part in zip(module.targets, parts):
                    plain = {"query": query, "key": key}[target]
                    part = part.expand_as(plain)
                    add(acc, target[0], [float(part.pow(2).sum()), float(plain.pow(2).sum())])
                    if target == "key":  # T x B x d: deviation from each sentence's mean over positions
                        add(acc, "k_varying", [float((part - part.mean(dim=0, keepdim=True)).pow(2).sum()),
                                               float((plain - plain.mean(dim=0, keepdim=True)).pow(2).sum())])
            q_hat, k_hat, gates = outputs
            length, batch, _ = q_hat.shape
            heads = attention.num_heads

            def split(t):  # T x B x d -> B x H x T x d_h
                return t.reshape(length, batch, heads, -1).permute(1, 2, 0, 3).double()

            real = ~state["padding"]  # B x T
            queries = real[:, None, :].expand(batch, heads, length)

            def spread(scores):  # per (b, h, query): variance over the non-padding keys
                keys = real[:, None, None, :].expand_as(scores)
                count = keys.sum(-1)
                mean = scores.masked_fill(~keys, 0).sum(-1) / count
                return (scores - mean[..., None]).pow(2).masked_fill(~keys, 0).sum(-1) / count, keys, count

            scores = torch.matmul(split(q_hat) * attention.scaling, split(k_hat).transpose(-1, -2))
            variance, keys, count = spread(scores)
            probs = torch.softmax(scores.masked_fill(~keys, float("-inf")), dim=-1)
            entropy = -(probs * probs.clamp_min(1e-300).log()).masked_fill(~keys, 0).sum(-1)
            add(acc, "logits", [float(variance[queries].sum()), float(entropy[queries].sum()),
                                float(count.log()[queries].sum()), float(queries.sum())])
            add(acc, "head_entropy", [float(entropy[:, h][queries[:, h]].sum()) for h in range(heads)]
                + [float(count.log()[:, 0][queries[:, 0]].sum()), float(queries[:, 0].sum())])
            if with_term_sizes and gates is not None:
                # Eq. 5 as the sum of its parts, Q^ = (1 - lambda_Q) Q + lambda_Q C U_Q (the same for K):
                # the spread over the keys of each of the four products in the trained model's logits
                parts = module.project_context(global_context, deep_context).split(module.embed_dim, dim=-1)
                context = dict(zip(module.targets, parts))
                lam = {t: gates[..., i : i + 1] for i, t in enumerate(module.targets)}
                pieces = {}
                for t, plain in (("query", query), ("key", key)):
                    weight = lam.get(t)
                    own = plain if weight is None else (1 - weight) * plain
                    ctx = None if weight is None else weight * context[t].expand_as(plain)
                    pieces[t] = (own, ctx)
                if module.global_proj is not None and module.deep_proj is not None and "query" in context:
                    # C U_Q as its two projections (Eq. 10's sentence-wide part, Eq. 9's per-position
                    # part; summed in the layer): each one's product with the key side's own part
                    right = pieces["key"][0]
                    index = module.targets.index("query")
                    for pname, proj, source in (("global", module.global_proj, global_context),
                                                ("deep", module.deep_proj, deep_context)):
                        term = proj(source).split(module.embed_dim, dim=-1)[index].expand_as(query)
                        part = torch.matmul(split(lam["query"] * term) * attention.scaling, split(right).transpose(-1, -2))
                        add(acc, f"spread CU_Q[{pname}].K", [float(spread(part)[0][queries].sum()),
                                                             float(queries.sum())])
                for qi, qname in enumerate(("Q", "CU_Q")):
                    for ki, kname in enumerate(("K", "CU_K")):
                        left, right = pieces["query"][qi], pieces["key"][ki]
                        if left is None or right is None:
                            continue
                        part = torch.matmul(split(left) * attention.scaling, split(right).transpose(-1, -2))
                        add(acc, f"spread {qname}.{kname}", [float(spread(part)[0][queries].sum()),
                                                             float(queries.sum())])
        return record

    for name, module in model.named_modules():
        if isinstance(module, ContextualQueryKey) and name.startswith("encoder."):
            hooks.append(module.register_forward_hook(hook(name, model.get_submodule(name.rsplit(".", 1)[0]))))
    model.eval()
    with torch.no_grad():
        for sample in _batches(task, model, "valid", max_tokens):
            state["padding"] = sample["net_input"]["src_tokens"].eq(task.source_dictionary.pad())
            model(**sample["net_input"])
    for handle in hooks:
        handle.remove()
    out = {}
    for name, acc in sums.items():
        variance, entropy, uniform, queries = acc.pop("logits")
        *per_head, head_uniform, head_queries = acc.pop("head_entropy")
        parts = {key.split(" ", 1)[1]: math.sqrt(a / b) for key, (a, b) in list(acc.items()) if key.startswith("spread ")}
        for key in [k for k in acc if k.startswith("spread ")]:
            del acc[key]
        out[name] = {"logit_spread": math.sqrt(variance / queries), "entropy": entropy / queries,
                     "uniform_entropy": uniform / queries,
                     "head_entropy": [h / head_queries for h in per_head], **({"part_spread": parts} if parts else {}),
                     **{t: math.sqrt(a / b) for t, (a, b) in acc.items()}}
    return out


def _gradient_share(task, model, criterion, max_tokens, n_batches, seed):
    u_params = [p for m in model.modules() if isinstance(m, ContextualQueryKey) for p in m.projection_parameters()
                if p.requires_grad]
    if not u_params:  # U frozen (or absent): it holds no gradient
        return None, None, 0.0
    u_ids = {id(p) for p in u_params}
    trained = [p for p in model.parameters() if p.requires_grad]
    shares = []
    model.train()
    for index, sample in enumerate(_batches(task, model, "train", max_tokens, shuffle=True)):
        if index >= n_batches:
            break
        torch.manual_seed(seed + index)
        model.zero_grad()
        loss, _, _ = criterion(model, sample)
        loss.backward()
        g_u = sum(float(p.grad.pow(2).sum()) for p in trained if id(p) in u_ids and p.grad is not None)
        g_all = sum(float(p.grad.pow(2).sum()) for p in trained if p.grad is not None)
        shares.append(math.sqrt(g_u / g_all))
    return sum(shares) / len(shares), max(shares), sum(p.numel() for p in u_params) / sum(p.numel() for p in trained)


def diagnose(checkpoint, data, max_tokens, train_batches, at_start=False):
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides={"data": data})
    model = models[0].float()
    criterion = task.build_criterion(cfg.criterion)
    if at_start:  # the weights the training started from: built as fairseq-train builds them, at its seed
        utils.set_torch_seed(cfg.common.seed)
        model = task.build_model(cfg.model).float()
        share, share_max, param_share = _gradient_share(task, model, criterion, max_tokens, train_batches,
                                                        seed=int(cfg.common.seed))
        return {"checkpoint": None, "gradient_share_mean": share, "gradient_share_max": share_max,
                "parameter_share": param_share}
    out = {"checkpoint": checkpoint, "valid_loss": _valid_loss(task, model, criterion, max_tokens)}
    contextualizers = [m for m in model.modules() if isinstance(m, ContextualQueryKey)]
    u_trained = any(p.abs().sum() > 0 for m in contextualizers for p in m.projection_parameters())
    out["attention"] = _attention_statistics(task, model, max_tokens, with_term_sizes=u_trained)
    if not u_trained:
        return out
    share, share_max, param_share = _gradient_share(task, model, criterion, max_tokens, train_batches,
                                                    seed=int(cfg.common.seed))
    out.update(gradient_share_mean=share, gradient_share_max=share_max, parameter_share=param_share)
    if any(m.global_proj is not None and m.deep_proj is not None for m in contextualizers):
        # the trained model with one of the two projections of C U set to 0 in every layer
        for kind in ("global", "deep"):
            projections = [getattr(m, f"{kind}_proj") for m in contextualizers if getattr(m, f"{kind}_proj") is not None]
            kept = [proj.weight.detach().clone() for proj in projections]
            with torch.no_grad():
                for proj in projections:
                    proj.weight.zero_()
            out[f"valid_loss_u_{kind}_zeroed"] = _valid_loss(task, model, criterion, max_tokens)
            with torch.no_grad():
                for proj, weight in zip(projections, kept):
                    proj.weight.copy_(weight)
    with torch.no_grad():
        for m in contextualizers:
            for p in m.projection_parameters():
                p.zero_()
    out["valid_loss_u_zeroed"] = _valid_loss(task, model, criterion, max_tokens)
    out["attention_u_zeroed"] = _attention_statistics(task, model, max_tokens, with_term_sizes=False)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+")
    parser.add_argument("--data", required=True)
    parser.add_argument("--updates", type=int, nargs="+", default=[800, 1200])
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--train-batches", type=int, default=20)
    parser.add_argument("--at-start", action="store_true",
                        help="also the gradient share at update 0 (the model built at the run's seed)")
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    for run_dir in args.run_dirs:
        if args.at_start:
            checkpoint = _checkpoint(run_dir, args.updates[-1])
            result = {"run": run_dir, "updates": 0, **diagnose(checkpoint, args.data, args.max_tokens,
                                                               args.train_batches, at_start=True)}
            results.append(result)
            print(json.dumps(result), flush=True)
        for updates in args.updates:
            checkpoint = _checkpoint(run_dir, updates)
            if checkpoint is None:
                raise SystemExit(f"{run_dir}: no checkpoint at {updates} updates")
            result = {"run": run_dir, "updates": updates, **diagnose(checkpoint, args.data, args.max_tokens,
                                                                    args.train_batches)}
            results.append(result)
            print(json.dumps(result), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
