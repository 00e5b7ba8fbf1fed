"""The language direction a fairseq checkpoint was trained in, read without torch or fairseq.

fairseq-generate translates in whatever direction --source-lang / --target-lang name. With a
joined dictionary (Iida's sentencepiece, WMT14 En-De's joint BPE, the demo's) a checkpoint
trained zh->en, asked for en->zh, runs without an error and scores like a bad model. The
evaluation compares the direction it is asked for with the checkpoint's before generating.

Only the checkpoint's pickle (archive/data.pkl, tens of KB) is read: the tensors are never
loaded, and every class other than plain containers is read as an empty stand-in, so that
nothing in the file is executed and neither torch nor fairseq is imported (~5 s saved).
"""
import argparse
import json
import os
import pickle
import re
import zipfile
from typing import NamedTuple, Optional, Tuple

# what the stored cfg is made of (fairseq saves it as plain containers; older ones: args, a Namespace)
_PLAIN = {("collections", "OrderedDict"), ("collections", "defaultdict"), ("collections", "deque"),
          ("collections", "Counter"), ("builtins", "dict"), ("builtins", "list"), ("builtins", "tuple"),
          ("builtins", "set"), ("builtins", "frozenset"), ("argparse", "Namespace")}
# the records our training drivers keep of a training's data and direction ({"data": ...,
# "languages": [src, tgt]}): fairseq-ctx-train's in its --save-dir, one JSON line per start
# (reproduce/train.py), the reproduce runner's in the cell, the directory above its checkpoints
STARTS_RECORD = "train_starts.jsonl"
CELL_RECORD = "train.json"
CELL_RECORD_BYTES = 1 << 20  # (the runner's is a few KB; a data set of that name is not read)
# the record an average of checkpoints keeps in itself (evaluation/average.py): the direction its
# checkpoints were trained in, as read then ({"data", "languages", "whence"}), so that the
# average, kept in an evaluation's --out-dir or copied alone, is read as its checkpoints were
AVERAGE_RECORD = "fairseq_ctx_trained_direction"
NAMED_IN_OPTIONS = "named in its training options"  # (a Direction's whence)
AVERAGED = "recorded in this average of checkpoints: "  # (a Direction's whence begins so)
# the names fairseq-train gives its checkpoints (with --checkpoint-suffix before ".pt")
TRAINING_CHECKPOINT = re.compile(r"checkpoint(_last|_best|\.best_|\d+|_\d+_\d+)[^/]*\.pt")
# torch's format before 1.6 (fairseq's 2018-19 hub models): pickles of this number, the protocol
# and the system's sizes, then the object, then the storages' bytes
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


class _StandIn:
    """Any other object in the pickle (tensors, meters, numpy values, a subclass of a list or a
    dict): whatever the pickle does to it is accepted and nothing is kept."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, item):
        pass

    def extend(self, items):
        pass


class _CfgUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _PLAIN:
            return super().find_class(module, name)
        return _StandIn

    def persistent_load(self, pid):  # a tensor's storage: not read
        return None


def _stored_state(checkpoint) -> Optional[dict]:
    """The top level of a torch checkpoint (zip format, or the format before torch 1.6), tensors
    and other objects as stand-ins; None where the file is none."""
    try:
        if zipfile.is_zipfile(checkpoint):
            with zipfile.ZipFile(checkpoint) as archive:
                name = next((n for n in archive.namelist() if n.endswith("/data.pkl")), None)
                if name is None:
                    return None
                with archive.open(name) as handle:
                    state = _CfgUnpickler(handle).load()
        else:
            with open(checkpoint, "rb") as handle:
                unpickler = _CfgUnpickler(handle)
                if unpickler.load() != _LEGACY_MAGIC:
                    return None
                unpickler.load(), unpickler.load()  # protocol version, system sizes
                state = unpickler.load()
    except Exception:  # noqa: BLE001  (unreadable or another format: nothing to compare)
        return None
    return state if isinstance(state, dict) else None


def stored_task(checkpoint, state=None) -> Optional[dict]:
    """The task options a fairseq checkpoint was trained with ({"source_lang", "target_lang",
    "data", ...}), or None where the file is no torch checkpoint (zip format, or the format before
    torch 1.6) holding them. ``state``: the checkpoint's, where already read (_stored_state)."""
    state = _stored_state(checkpoint) if state is None else state
    if state is None:
        return None
    cfg = state.get("cfg")
    task = cfg.get("task") if isinstance(cfg, dict) else None
    if task is None:  # fairseq before its dataclass configs: the options as a Namespace
        task = state.get("args")
    if isinstance(task, argparse.Namespace):
        task = vars(task)
    return task if isinstance(task, dict) else None


def language_pairs_in(data_dir) -> list:
    """The language pairs a data directory's file names give (<split>.<src>-<tgt>.<lang>), in the
    order fairseq's translation task meets them: data_utils.infer_language_pair takes the first
    file os.listdir gives (with several pairs in one directory: whichever that is)."""
    try:
        names = os.listdir(data_dir)
    except OSError:
        return []
    pairs = (tuple(parts[1].split("-")) for parts in (name.split(".") for name in names)
             if len(parts) >= 3 and len(parts[1].split("-")) == 2)
    return list(dict.fromkeys(pairs))


def language_pair_of(data_dir) -> Optional[Tuple[str, str]]:
    """The pair fairseq infers from a data directory, where it holds one pair only."""
    pairs = language_pairs_in(data_dir)
    return pairs[0] if len(pairs) == 1 else None


class Direction(NamedTuple):
    src: str
    tgt: str
    whence: str  # where it was read, for a message
    guessed: bool  # read from the evaluation's data directory, not from the training's


def _records(checkpoint):
    """(file name, record) of every record our drivers kept beside ``checkpoint`` (STARTS_RECORD in its
    directory, CELL_RECORD in the one above: the runner's, holding a training_key; a file of that
    name over CELL_RECORD_BYTES is someone else's), beside the file a link points to too.
    Unreadable lines and files are skipped."""
    folders = dict.fromkeys(os.path.dirname(way(checkpoint)) for way in (os.path.abspath, os.path.realpath))
    for folder in folders:
        for line in _lines(os.path.join(folder, STARTS_RECORD)):
            yield STARTS_RECORD, line
        cell = os.path.join(os.path.dirname(folder), CELL_RECORD)
        try:
            small = os.path.getsize(cell) <= CELL_RECORD_BYTES
        except OSError:
            continue
        for record in (_lines(cell, whole=True) if small else ()):
            if "training_key" in record:
                yield CELL_RECORD, record


def _lines(path, whole=False):
    """The JSON objects of a file, one per line (or the file as one with ``whole``); the lines that
    are none (not JSON, too deep, not an object, not UTF-8) are skipped."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for text in [handle.read()] if whole else handle:
                try:
                    record = json.loads(text)
                except (ValueError, RecursionError):
                    continue
                if isinstance(record, dict):
                    yield record
    except OSError:
        return


def _recorded_languages(record, trained_on):
    """(src, tgt) of ``record`` where it is of a training on ``trained_on`` and names both; else None."""
    if not isinstance(record, dict):
        return None
    languages = record.get("languages")
    if (record.get("data") == trained_on and isinstance(languages, list) and len(languages) == 2
            and all(isinstance(lang, str) and lang for lang in languages)):
        return tuple(languages)
    return None


def recorded_direction(checkpoint, trained_on) -> Optional[Direction]:
    """The direction our training drivers recorded for the training that wrote ``checkpoint``:
    their records beside it (_records) of a training on ``trained_on`` (the data argument stored
    in the checkpoint, compared as written), where those that name languages agree; else None."""
    if not isinstance(trained_on, str) or not trained_on:
        return None
    found = {}
    for name, record in _records(checkpoint):
        languages = _recorded_languages(record, trained_on)
        if languages:
            found.setdefault(languages, name)
    if len(found) != 1:
        return None
    (src, tgt), name = next(iter(found.items()))
    return Direction(src, tgt, f"recorded in {name} when it was trained on {trained_on}", False)


def trained_direction(checkpoint, data=None) -> Optional[Direction]:
    """The direction ``checkpoint`` was trained in: the languages its cfg names; else, for an
    average of checkpoints, the direction it recorded in itself (AVERAGE_RECORD); else those our
    training drivers recorded beside it (recorded_direction: fairseq-ctx-train and the tables name
    none, fairseq infers them); else the pair fairseq inferred from its training data directory,
    where that is known to be the one stored (an absolute path present here, or the evaluation's
    ``data`` itself: fairseq stores a relative path as typed, relative to a working directory not
    recorded); else the pair of ``data`` (a guess); None where none is known."""
    state = _stored_state(checkpoint)
    task = stored_task(checkpoint, state) if state is not None else None
    if task is None:
        return None
    src, tgt, trained_on = (task.get(key) for key in ("source_lang", "target_lang", "data"))
    if isinstance(src, str) and isinstance(tgt, str) and src and tgt:
        return Direction(src, tgt, NAMED_IN_OPTIONS, False)
    averaged = state.get(AVERAGE_RECORD)
    languages = _recorded_languages(averaged, trained_on) if isinstance(trained_on, str) and trained_on else None
    if languages:
        return Direction(*languages, f"{AVERAGED}{averaged.get('whence')}", False)
    recorded = recorded_direction(checkpoint, trained_on)
    if recorded:
        return recorded
    trained_on = trained_on.split(os.pathsep)[0] if isinstance(trained_on, str) else ""
    data = (data or "").split(os.pathsep)[0]
    known = (os.path.isabs(trained_on) and os.path.isdir(trained_on)) or _same_directory(trained_on, data)
    pair = language_pair_of(trained_on) if known else None
    if pair:
        return Direction(*pair, f"inferred by fairseq from its training data {trained_on}", False)
    pair = language_pair_of(data) if data else None
    if pair is None:
        return None
    why = ("is not stored" if not trained_on else "does not name one pair" if known
           else "is not here (or is a relative path, stored as typed)")
    return Direction(*pair, f"as fairseq infers them from {data}; its training data {trained_on or '?'} {why}", True)


def _same_directory(a, b):
    try:
        return bool(a and b) and os.path.samefile(a, b)
    except OSError:
        return False
