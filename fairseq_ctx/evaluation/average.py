"""Average the parameters of the last N checkpoints (fairseq's scripts/average_checkpoints.py
is not installed with the fairseq package, so this is the same computation on the state
dicts; fairseq upgrades old checkpoint formats itself when it loads the average).

Usage: fairseq-ctx-average-checkpoints --save-dir CKPTS --last 5 --output avg.pt
       [--by updates|epochs]   (checkpoint_<epoch>_<updates>.pt or checkpoint<epoch>.pt)
       [--overwrite]           (replace an existing --output)

--output may not be named as fairseq names a training's checkpoints (checkpoint_last.pt,
checkpoint_best.pt, checkpoint<E>.pt, checkpoint_<E>_<U>.pt): an average written over one replaces
it, and fairseq-train resumes from an average named checkpoint_last.pt with its update count, lr
schedule and optimizer started over, without a word.
"""
import argparse
import collections
import os
import re
import sys

from .direction import TRAINING_CHECKPOINT  # (the names fairseq-train gives its checkpoints)


def numbered_checkpoints(save_dir, by="auto"):
    """(names, by, [(number, name)]): the directory's file names, and its numbered checkpoints by
    update count (checkpoint_E_U.pt, written with --save-interval-updates) or by epoch
    (checkpoint_E.pt); "auto": by updates where there are any. Neither torch nor a file read."""
    updates = re.compile(r"^checkpoint_\d+_(\d+)\.pt$")
    epochs = re.compile(r"^checkpoint(\d+)\.pt$")
    names = os.listdir(save_dir)
    found = {"updates": [], "epochs": []}
    for name in names:
        for kind, pattern in (("updates", updates), ("epochs", epochs)):
            match = pattern.match(name)
            if match:
                found[kind].append((int(match.group(1)), name))
    if by == "auto":
        by = "updates" if found["updates"] else "epochs"
    return names, by, found[by]


def last_checkpoints(save_dir, n, by="auto"):
    """The ``n`` newest numbered checkpoints (numbered_checkpoints), checkpoint_last.pt among them
    where it stands for an interval checkpoint fairseq did not write (_final_interval_point)."""
    names, by, numbered = numbered_checkpoints(save_dir, by)
    if by == "updates":
        numbered += _final_interval_point(save_dir, numbered)
    chosen = sorted(numbered, reverse=True)[:n]
    spacings = {later - earlier for (later, _), (earlier, _) in zip(chosen, chosen[1:])}
    if by == "updates" and len(spacings) > 1:
        # fairseq writes no checkpoint_E_U.pt at an update that ends an epoch: the window is wider
        print(f"average: warning: the last {n} interval checkpoints of {save_dir} are not evenly spaced "
              f"(updates {', '.join(str(u) for u, _ in sorted(chosen))}): one fell on an epoch's end and was "
              "not written", file=sys.stderr, flush=True)
    if len(chosen) < n:
        # the numbered ones it counted, oldest first; the directory's files where it counted none
        counted = [name for _, name in sorted(numbered)]
        raise FileNotFoundError(f"{save_dir}: wanted the last {n} checkpoints by {by}, found {len(chosen)} "
                                + (f"({', '.join(counted)})" if counted else
                                   f"(the directory holds: {', '.join(sorted(names)) or 'nothing'})"))
    return [os.path.join(save_dir, name) for _, name in sorted(chosen)]


def _final_interval_point(save_dir, numbered):
    """[(updates, "checkpoint_last.pt")] when checkpoint_last.pt is an interval checkpoint that
    fairseq did not write as checkpoint_E_U.pt because its update ended an epoch
    (checkpoint_utils.save_checkpoint writes those only mid-epoch), newer than every numbered
    one: by the checkpoint's own record, saved at an epoch's end (train_iterator
    iterations_in_epoch 0) at a multiple of its --save-interval-updates. Else []."""
    import torch

    from ..checkpoint_repair import LAST

    last = os.path.join(save_dir, LAST)
    if not os.path.exists(last):
        return []
    try:
        try:
            state = torch.load(last, map_location="cpu", mmap=True, weights_only=False)
        except RuntimeError:  # a checkpoint in torch's legacy (non-zip) format cannot be mapped
            state = torch.load(last, map_location="cpu", weights_only=False)
        updates = int(state["optimizer_history"][-1]["num_updates"])
        cfg = state.get("cfg") or {}
        interval = int(cfg["checkpoint"]["save_interval_updates"]) if cfg else \
            int(getattr(state.get("args"), "save_interval_updates", 0) or 0)
        at_epoch_end = state["extra_state"]["train_iterator"]["iterations_in_epoch"] == 0
    except Exception as error:  # noqa: BLE001  (not a fairseq training checkpoint: no stand-in)
        print(f"average: warning: {last} could not be read ({type(error).__name__}): it cannot stand in for an "
              "interval checkpoint", file=sys.stderr, flush=True)
        return []
    newest = max((u for u, _ in numbered), default=0)
    if interval > 0 and updates % interval == 0 and at_epoch_end and updates > newest:
        return [(updates, LAST)]
    return []


def average_checkpoints(paths):
    """Mean of every floating-point parameter; everything else (cfg, args, optimizer
    history) is taken from the last checkpoint, as fairseq's script does."""
    import torch

    totals = collections.OrderedDict()
    new_state = None
    for path in paths:
        # fairseq checkpoints hold an argparse Namespace / omegaconf config: not weights-only
        state = torch.load(path, map_location="cpu", weights_only=False)
        new_state = state
        model = state["model"]
        if totals and set(totals) != set(model):
            raise ValueError(f"{path} has different parameters from {paths[0]}")
        for key, value in model.items():
            value = value.double() if value.is_floating_point() else value
            if key not in totals or not value.is_floating_point():
                totals[key] = value.clone()  # integer buffers: the last checkpoint's
            else:
                totals[key] += value
    averaged = collections.OrderedDict()
    for key, value in totals.items():
        dtype = new_state["model"][key].dtype
        averaged[key] = (value / len(paths)).to(dtype) if value.is_floating_point() else value
    new_state["model"] = averaged
    new_state.pop("last_optimizer_state", None)  # not resumable, and large
    _keep_direction(new_state, paths)
    return new_state


def _keep_direction(state, paths):
    """Record in the average ``state`` (its last checkpoint's) the direction its checkpoints ``paths``
    were trained in, where that is read from beside them (our drivers' records, the training data
    here) and the cfg names none (fairseq-ctx-train and the tables name none): the average is kept
    apart from those records (in an evaluation's --out-dir, or copied alone), where the reverse
    direction would be evaluated with no more than a warning (evaluation/direction.py). Checkpoints
    of different directions (two trainings in one directory): warned of, nothing recorded."""
    from .direction import AVERAGE_RECORD, AVERAGED, NAMED_IN_OPTIONS, stored_task, trained_direction

    state.pop(AVERAGE_RECORD, None)
    read = [trained_direction(path) for path in paths]  # (given no evaluation data: never a guess)
    known = {(d.src, d.tgt): path for d, path in zip(read, paths) if d is not None}
    if len(known) > 1:
        print(f"average: warning: the checkpoints averaged were trained in different directions ("
              + ", ".join(f"{os.path.basename(path)} {src} -> {tgt}" for (src, tgt), path in known.items())
              + "): an average of different trainings; no direction recorded in it", file=sys.stderr, flush=True)
        return
    trained = read[-1]
    if trained is None or trained.whence == NAMED_IN_OPTIONS:
        return
    state[AVERAGE_RECORD] = {"data": (stored_task(paths[-1], state) or {}).get("data"),
                             "languages": [trained.src, trained.tgt], "whence": trained.whence.removeprefix(AVERAGED)}


def average_last(save_dir, n, output, by="auto"):
    from ..atomic import atomic_torch_save

    paths = last_checkpoints(save_dir, n, by)
    atomic_torch_save(average_checkpoints(paths), output)
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--save-dir", required=True)
    parser.add_argument("--last", type=int, default=5)
    parser.add_argument("--by", choices=["auto", "updates", "epochs"], default="auto")
    parser.add_argument("--output", required=True)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.exit(2, f"average-checkpoints: --last {args.last}: average at least one checkpoint\n")
    if not os.path.isdir(args.save_dir):
        parser.exit(2, f"average-checkpoints: --save-dir {args.save_dir}: no such directory\n")
    if TRAINING_CHECKPOINT.fullmatch(os.path.basename(args.output)):
        parser.exit(2, f"average-checkpoints: --output {args.output} is named as fairseq names a training's "
                       "checkpoints: an average there would replace one, or be resumed from as if it were one "
                       "(name it e.g. average_last5.pt)\n")
    if os.path.exists(args.output) and not args.overwrite:
        parser.exit(2, f"average-checkpoints: --output {args.output} exists: --overwrite replaces it\n")
    try:
        paths = average_last(args.save_dir, args.last, args.output, args.by)
    except FileNotFoundError as error:
        parser.exit(2, f"average-checkpoints: {error}\n")
    print(f"averaged {len(paths)} checkpoints: {' '.join(os.path.basename(p) for p in paths)} -> {args.output}")


if __name__ == "__main__":
    main()
