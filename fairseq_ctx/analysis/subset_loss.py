"""A checkpoint's loss on whole subsets of its data (the training subset, valid), in eval mode.

``python -m fairseq_ctx.analysis.subset_loss --path CKPT --data DATA_BIN --subsets train,valid
--json OUT`` (what ``fairseq-ctx-quality-compare --train-loss`` runs for each run's final
checkpoint): fairseq's own computation, ``task.valid_step`` with the training's criterion (the
label-smoothed loss of the demo settings), model and criterion in eval mode (no dropout), fp32,
one device (the first visible GPU, else the CPU); per subset the exact sums over every sentence,
reported as fairseq reports them (loss per target token, or per sentence under --sentence-avg;
NLL per target token; base 2) with the counts.

Why not ``fairseq-validate``: its log prints counts with "{:g}" (4,508,785 sentences print as
4.50878e+06), so nothing can check that every sentence is in the loss; it stops at a pair longer
than the model's positions, which fairseq-train skipped; and with several visible GPUs it
shards the subset over them. Here the training subset's pairs that fairseq-train leaves out
(longer than the task's or the model's positions, or than --max-tokens) are left out the same
way, and counted ("skipped"); valid's pairs longer than the positions too (fairseq-train
refuses those unless --skip-invalid-size-inputs-valid-test); every other sentence is in the
sums, which is checked. The subsets are the training's own (--train-subset, the first of
--valid-subset), the training subset with its numbered parts (train1, ...) as fairseq-train
loads it.

Output: {"checkpoint", "checkpoint_updates", "device", "dtype": "float32", "loss_per":
"token" or "sentence", "subsets": {"train" / "valid": {"name", "loss", "nll_loss", "sentences",
"tokens", "skipped", "dataset_sentences"}}}.
"""
import argparse
import json
import math
import sys


def subset_losses(checkpoint, data_bin, subsets=("train", "valid"), max_tokens=8192, langs=None):
    """({"train" / "valid": {"name", "loss", "nll_loss", "sentences", "tokens", "skipped",
    "dataset_sentences"}}, the device used, "token" or "sentence": what the loss is per) (see
    the module's help)."""
    import torch
    from fairseq import checkpoint_utils, utils

    # (--eval-bleu would make valid_step translate the whole training subset)
    overrides = {"data": data_bin, "eval_bleu": False}
    if langs:
        overrides.update(source_lang=langs[0], target_lang=langs[1])
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides=overrides)
    model = models[0].float().eval()
    cuda = torch.cuda.is_available()
    if cuda:
        model = model.cuda()
    criterion = task.build_criterion(cfg.criterion)
    criterion.eval()
    names = {"train": cfg.dataset.train_subset, "valid": cfg.dataset.valid_subset.split(",")[0]}
    out = {}
    for subset in subsets:
        name = names[subset]
        # as fairseq-train: train with its numbered parts and a --max-tokens limit, valid without
        task.load_dataset(name, combine=subset == "train", epoch=1)
        dataset = task.dataset(name)
        limits = [task.max_positions(), model.max_positions()]
        if subset == "train":
            limits.append(cfg.dataset.max_tokens)
        max_positions = utils.resolve_max_positions(*limits)
        indices, ignored = dataset.filter_indices_by_size(dataset.ordered_indices(), max_positions)
        # the longest pair left sets the batch floor (fairseq's batching refuses a pair above max_tokens)
        longest = int(max(dataset.num_tokens(int(i)) for i in indices)) if len(indices) else 0
        batches = dataset.batch_by_size(indices, max_tokens=max(max_tokens, longest), max_sentences=None,
                                        required_batch_size_multiple=1)
        loss_sum, nll_sum, tokens, sentences, sample_size = 0.0, 0.0, 0, 0, 0
        with torch.no_grad():
            for batch in batches:
                sample = dataset.collater([dataset[int(i)] for i in batch])
                if cuda:
                    sample = utils.move_to_cuda(sample)
                _, size, log = task.valid_step(sample, model, criterion)
                loss_sum += float(log["loss"])
                # a criterion without label smoothing logs no nll_loss: its loss is the NLL
                nll_sum += float(log.get("nll_loss", log["loss"]))
                tokens += int(log["ntokens"])
                sentences += int(log["nsentences"])
                sample_size += int(size)
        if sentences + len(ignored) != len(dataset):
            raise RuntimeError(f"{name}: {sentences} sentences in the loss and {len(ignored)} skipped, "
                               f"but the subset has {len(dataset)}")
        out[subset] = {"name": name, "loss": loss_sum / max(sample_size, 1) / math.log(2),
                       "nll_loss": nll_sum / max(tokens, 1) / math.log(2),
                       "sentences": sentences, "tokens": tokens, "skipped": len(ignored),
                       "dataset_sentences": len(dataset)}
    per = "sentence" if getattr(cfg.criterion, "sentence_avg", False) else "token"
    return out, ("cuda:0 " + torch.cuda.get_device_name(0)) if cuda else "cpu", per


def main(argv=None):
    from fairseq_ctx.atomic import atomic_write
    from fairseq_ctx.checkpoint_repair import stored_updates

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True, help="the checkpoint")
    p.add_argument("--data", required=True, help="the binarised data directory")
    p.add_argument("--subsets", default="train,valid",
                   help="train and / or valid: the training's own subsets of those roles (default train,valid)")
    p.add_argument("--max-tokens", type=int, default=8192)
    p.add_argument("--source-lang", default=None)
    p.add_argument("--target-lang", default=None)
    p.add_argument("--json", required=True, help="where the result goes (written whole or not at all)")
    a = p.parse_args(argv)
    if (a.source_lang is None) != (a.target_lang is None):
        p.error("--source-lang and --target-lang go together")
    langs = (a.source_lang, a.target_lang) if a.source_lang else None
    subsets = [s for s in a.subsets.split(",") if s]
    if not subsets or set(subsets) - {"train", "valid"}:
        p.error(f"--subsets: train and / or valid, not {a.subsets!r}")
    result, device, per = subset_losses(a.path, a.data, subsets, a.max_tokens, langs)
    with atomic_write(a.json) as f:
        json.dump({"checkpoint": a.path, "checkpoint_updates": stored_updates(a.path), "device": device,
                   "dtype": "float32", "loss_per": per, "subsets": result}, f, indent=1)
    for role, r in result.items():
        print(f"{role} ({r['name']}): loss {r['loss']:.4f} nll_loss {r['nll_loss']:.4f} over {r['sentences']} "
              f"sentences ({r['skipped']} over the length limits skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
