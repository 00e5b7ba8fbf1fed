"""Run a paper table: cells (row x column), preflight, training, evaluation, provenance.

A cell's training directory is keyed by what decides the trained model: the
hardware tag (setting, processes x tokens x update-freq, precision), the row's config
name, and a hash (``training_key``) of every fairseq-train argument (config contents,
column options, `--` extras, smoke sizes) and of the prepared data (dictionaries and the
data script's settings). Two tables that train the same model (Iida Tables 2-4, Yang
Tables 1 and 3, Yang's and Wang's Transformer-Base and Big) therefore share one directory
and the second only evaluates (in an eval directory of its own evaluation settings); anything
that changes the training gets a directory of its own, never a finished model trained
otherwise.

    <results>/<hardware tag>/<config>-<key>/<data>[-<bin>]/   (e.g. p40-8x4096x1-fp32: setting, processes x
                                                              tokens x update-freq, precision)
        train.log  train.json (provenance, written when training finished; "resumptions": fairseq_ctx/resumptions.py)  train.lock (flock held while training: fairseq_ctx/run_lock.py)
        checkpoints/ (train_starts.jsonl: a line per start of its fairseq-train, with its data and languages; checkpoint_repairs.json when a cut-off checkpoint_last.pt was replaced)  eval/<subset>-<evaluation key>/{result.json, hyp.detok.<tgt>, generate.out, eval.log}

Significance marks are computed when the table is assembled, from the hypotheses of the
row and of ITS baseline (Row.baseline, else the table's), so the order in which cells
finish does not matter.
"""
import concurrent.futures
import dataclasses
import glob
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional

from ..atomic import atomic_write
from ..checkpoint_repair import FAIRSEQ_DONE, LAST, finished_before_the_exit, repair_before_resuming
from ..evaluation.defaults import checkpoint_choice
from ..paths import CHECKOUT, WORK_DIR, python_env
from ..resumptions import resumptions_in_log
from ..run_lock import RunLock, held_fds
from . import train as train_mod
from .tables import prepare_command
from .train import CONFIGS, EXACT_RESUME_TASK, PAPER_SETTING, ROOT, fairseq_train_argv

SMOKE_UPDATES = 12  # checkpoints at 2, 4, ..., 12 updates, the last 5 kept: averaging of the last 5 runs for real,
# with one to spare (fairseq writes no interval checkpoint at an update that ends an epoch)
SMOKE_TRAIN = ["--max-update", str(SMOKE_UPDATES), "--save-interval-updates", "2", "--keep-interval-updates", "5",
               "--warmup-updates", "4", "--num-workers", "0", "--seed", "1"]
SMOKE_MAX_TOKENS = 1024
SMOKE_DIM_DIVISOR = 32  # 512 -> 16, 1024 -> 32, 2048 -> 64: rows keep their relative sizes
SMOKE_MAX_LAYERS = 2


@dataclasses.dataclass
class Cell:
    table: object
    row: object
    column: object
    train_dir: str
    data_dir: str
    subsets: List[str]  # gen-subsets evaluated (test / valid / lentest*)
    train_cmd: List[str]
    hw: object
    key: str = ""  # training_key: what decides the trained model, hashed
    data_fingerprint: str = ""
    status: str = "pending"
    message: str = ""  # one line
    log_tail: str = ""  # the failed log's last lines, printed after all summaries
    seconds: float = 0.0

    @property
    def name(self):
        return f"{self.table.paper}_{self.table.name} {self.row.key} / {self.column.name}"

    @property
    def bin_dir(self):
        return os.path.join(self.data_dir, self.column.bin)

    def eval_dir(self, subset):
        return os.path.join(self.train_dir, "eval", f"{subset}-{evaluation_key(self.table, self.column)}")

    def result_path(self, subset):
        return os.path.join(self.eval_dir(subset), "result.json")

    @property
    def checkpoint_dir(self):
        """fairseq-train's --save-dir: checkpoints/ of the training directory."""
        return os.path.join(self.train_dir, CHECKPOINTS)

    @property
    def trained(self):
        return os.path.exists(os.path.join(self.train_dir, "train.json"))

    def finished_update(self) -> Optional[int]:
        """The update of checkpoint_last.pt where it reached the command's --max-update (a training
        that finished while its driver was gone, before train.json), else None."""
        return train_mod.finished_update(self.checkpoint_dir, self.train_cmd)

    def evaluated(self, subset):
        return os.path.exists(self.result_path(subset))


def _slug(text):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def column_args(row, column):
    return list(row.column_args.get(column.name, ()))


SAVE_DIR = "{save_dir}"  # stands for the training directory while its key is computed
CHECKPOINTS = "checkpoints"  # fairseq-train's --save-dir, inside the training directory


def data_fingerprint(bin_dir, src, tgt):
    """What identifies prepared data for training: its dictionaries (tokenisation, BPE,
    vocabulary) and the data script's recorded settings (one directory up)."""
    digest = hashlib.sha1()
    for path in (os.path.join(bin_dir, f"dict.{src}.txt"), os.path.join(bin_dir, f"dict.{tgt}.txt"),
                 os.path.join(os.path.dirname(bin_dir.rstrip("/")), "settings")):
        digest.update(os.path.basename(path).encode() + b"\0")
        try:
            with open(path, "rb") as handle:
                content = handle.read()
        except OSError:
            digest.update(b"<missing>")
            continue
        if path.endswith("settings"):
            content = _training_settings(content.decode("utf-8", "replace")).encode()
        digest.update(hashlib.md5(content).hexdigest().encode())
    return digest.hexdigest()[:12]


def _training_settings(settings):
    """The data script's settings that decide the training data: without the held-out length
    subsets (prepare-aspec.sh --length-eval adds test sets only, so Iida Tables 3-4 reuse
    Table 2's models whichever way ASPEC was prepared) and with file names instead of where
    the extra corpora lie (moving the CWMT files does not change the data)."""
    words = [os.path.basename(w) if "/" in w else w for w in settings.split()
             if not w.startswith(("length_eval=", "length_eval_tokens="))]
    return " ".join(words)


# fairseq-train options that change how a training is run or logged, not what it learns:
# left out of the key, so a resubmitted job with another log directory, worker count or
# launcher resumes its directory instead of starting afresh in a new one
NOT_IN_KEY_WITH_VALUE = {"--log-interval", "--log-format", "--log-file", "--tensorboard-logdir", "--wandb-project",
                         "--azureml-logging", "--aim-repo", "--num-workers", "--distributed-backend",
                         "--distributed-port", "--distributed-world-size", "--distributed-init-method",
                         "--distributed-rank", "--device-id", "--save-dir"}
NOT_IN_KEY_FLAGS = {"--no-progress-bar", "--distributed-no-spawn"}


def fairseq_train_args(cmd, bin_dir):
    """The fairseq-train arguments of a training command that decide what is trained: from the
    data directory on, without the launcher in front of it, without NOT_IN_KEY_* (logging,
    data workers, rendezvous, world size: the hardware tag holds nodes x GPUs) and without
    ``--task translation_exact_resume`` (it trains what fairseq's translation trains)."""
    words, out = list(cmd[cmd.index(bin_dir):]), []
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
        elif word == "--task" and words[i + 1:i + 2] == [EXACT_RESUME_TASK]:
            # what translation trains (cells trained before the task existed keep their key)
            skip = True
        elif word == f"--task={EXACT_RESUME_TASK}":
            pass
        elif word in NOT_IN_KEY_WITH_VALUE:
            skip = True
        elif word not in NOT_IN_KEY_FLAGS and not word.split("=", 1)[0] in NOT_IN_KEY_WITH_VALUE:
            out.append(word)
    return out


def training_key(cmd, bin_dir, fingerprint):
    """8 hex digits that change with anything deciding the trained model: every fairseq-train
    argument (config, setting, hardware, column options, `--` extras, smoke sizes) and the data."""
    words = ["{data}" if w == bin_dir else "{user_dir}" if w == train_mod.USER_DIR else w
             for w in fairseq_train_args(cmd, bin_dir)]
    return hashlib.sha1((shlex.join(words) + "\0" + fingerprint).encode()).hexdigest()[:8]


def train_dir_of(results, table, row, column, hw_tag, key):
    config = os.path.splitext(os.path.basename(row.config))[0]
    data = column.data + ("" if column.bin == "bin" else "-" + column.bin)
    # no paper in the path: Yang's and Wang's Transformer-Base / Big are one training
    return os.path.join(results, hw_tag, _slug(f"{config}-{key}"), _slug(data))


def cell_train_dir(results, table, row, column, setting, hw, key, smoke=False):
    """A cell's directory. Where it does not exist yet, the directory of the same training under
    the tag of before (named by nodes x GPUs per node: p40-2x4x4096x1-fp32 or p40-1x8x4096x1-fp32
    for what is now p40-8x4096x1-fp32) is kept: its training is evaluated, or resumed, instead of
    being done again. Two of them for one cell (a job trained as 2x4, resubmitted as 1x8) are
    refused (BatchError), naming both: which one is further along is the user's to say, and every
    node must pick the same one before node 0's repair changes either."""
    if smoke:
        return train_dir_of(results, table, row, column, "smoke", key)
    train_dir = train_dir_of(results, table, row, column, hw.tag(setting), key)
    if os.path.exists(train_dir) or not os.path.isdir(results):
        return train_dir
    earlier = [path for path in (train_dir_of(results, table, row, column, tag, key)
                                 for tag in hw.earlier_tags(setting, os.listdir(results))) if os.path.isdir(path)]
    if len(earlier) > 1:
        raise train_mod.BatchError(
            f"{' and '.join(earlier)} hold the same training ({row.key} / {column.name}) under the directory names of "
            f"before ({hw.tag(setting)} now names both): keep the one to go on with, move it to {train_dir}, and move "
            "the other out of " + results)
    return earlier[0] if earlier else train_dir


def evaluation_key(table, column):
    """6 hex digits of what decides a cell's scores besides the model: checkpoint choice,
    beam, length penalty, output bound, BPE removal, 2-to-2 stripping. Two tables evaluating
    one training with other settings get their own eval directories; a changed setting is
    evaluated afresh instead of reusing a result.json of the old one. (The checkpoint file and
    compound splitting enter the hashed text only where they differ from checkpoint_best.pt /
    auto, their values before they became settings: existing eval directories keep their names.)"""
    ev = table.evaluation
    settings = (f"average_last={ev.average_last} beam={ev.beam} lenpen={ev.lenpen} max_len_a={ev.max_len_a} "
                f"max_len_b={ev.max_len_b} remove_bpe={column.remove_bpe} strip_concat={column.strip_concat}")
    if not ev.average_last and ev.checkpoint != "checkpoint_best.pt":
        settings += f" checkpoint={ev.checkpoint}"
    if ev.compound_split != "auto":
        settings += f" compound_split={ev.compound_split}"
    return hashlib.sha1(settings.encode()).hexdigest()[:6]


def length_subsets(data_dir, column):
    """gen-subset name -> length bucket label, from prepare-aspec.sh --length-eval's list."""
    path = os.path.join(data_dir, column.bin, "length-subsets.tsv")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        return dict(line.rstrip("\n").split("\t") for line in handle if line.strip())


# -- smoke scale ---------------------------------------------------------------------------------


def smoke_model_args(model_words, paper):
    """Options that shrink a row's model: every width divided by SMOKE_DIM_DIVISOR, at most
    SMOKE_MAX_LAYERS layers; head counts, the rows' own options and ratios between rows kept."""
    from .params import parse_model_args

    args, accepted = parse_model_args(model_words, with_options=True)
    out = []
    for side in ("encoder", "decoder"):
        for name in ("embed_dim", "ffn_embed_dim", "hidden_size", "out_embed_dim", "input_dim", "output_dim"):
            value, option = getattr(args, f"{side}_{name}", None), f"--{side}-{name.replace('_', '-')}"
            if isinstance(value, int) and value > 0 and option in accepted:
                out += [option, str(max(4, value // SMOKE_DIM_DIVISOR))]
        layers = getattr(args, f"{side}_layers", None)
        if isinstance(layers, int) and layers > SMOKE_MAX_LAYERS:
            out += [f"--{side}-layers", str(SMOKE_MAX_LAYERS)]
    return out


# -- building the cells --------------------------------------------------------------------------


def build_cells(table, rows, options, results, data_root) -> List[Cell]:
    setting = options.setting or PAPER_SETTING[table.paper]
    cells = []
    for row in rows:
        for column in table.columns:
            data_dir = os.path.join(data_root, column.data)
            hw = train_mod.hardware(setting, table.paper, options.gpus, options.nnodes, options.max_tokens_per_gpu,
                                    options.reference, cpu_max_tokens=options.cpu_max_tokens,
                                    allow_batch_change=options.allow_batch_change)
            extra = column_args(row, column)
            if options.smoke:
                extra = smoke_model_args(train_mod.model_args(os.path.join(CONFIGS, row.config)) + extra,
                                         table.paper) + extra + SMOKE_TRAIN
            extra += list(options.train_extra)
            bin_dir = os.path.join(data_dir, column.bin)
            cmd = train_mod.build_command(os.path.join(CONFIGS, row.config), setting, bin_dir,
                                          os.path.join(SAVE_DIR, CHECKPOINTS), extra, launcher=options.launcher,
                                          node_rank=options.node_rank, master_addr=options.master_addr,
                                          master_port=options.master_port, backend=options.backend, hw=hw)
            fingerprint = data_fingerprint(bin_dir, column.src, column.tgt)
            key = training_key(cmd, bin_dir, fingerprint)
            if options.launcher != "spawn":
                # a rendezvous port per training: a node that got out of step with node 0
                # times out instead of joining another cell's training
                cmd = train_mod.build_command(os.path.join(CONFIGS, row.config), setting, bin_dir,
                                              os.path.join(SAVE_DIR, CHECKPOINTS), extra, launcher=options.launcher,
                                              node_rank=options.node_rank, master_addr=options.master_addr,
                                              master_port=options.master_port + int(key, 16) % 1000,
                                              backend=options.backend, hw=hw)
            train_dir = cell_train_dir(results, table, row, column, setting, hw, key, options.smoke)
            cmd = [w.replace(SAVE_DIR, train_dir) for w in cmd]
            subsets = [column.subset]
            if table.kind == "length":
                subsets = list(length_subsets(data_dir, column)) or ["lentest"]
            cells.append(Cell(table, row, column, train_dir, data_dir, subsets, cmd, hw, key, fingerprint))
    return cells


def raw_path(cell, subset, lang):
    """The raw (untokenised) text of a gen-subset: raw/test.<lang>, raw/valid.<lang>, raw/len<N>.<lang>."""
    name = {"test": "test", "valid": "valid"}.get(subset) or length_subsets(cell.data_dir, cell.column).get(subset, subset)
    return os.path.join(cell.data_dir, "raw", f"{name}.{lang}")


def eval_command(cell, subset, python=sys.executable):
    """fairseq-ctx-evaluate --paper P with the table's settings spelled out (the same entries
    of fairseq_ctx/evaluation/defaults.py: the command line says what the cell is scored with)."""
    table, row, column = cell.table, cell.row, cell.column
    ev = table.evaluation
    cmd = [python, "-m", "fairseq_ctx.evaluation", "--paper", table.paper, "--data", cell.bin_dir,
           "--save-dir", cell.checkpoint_dir, "--src", column.src, "--tgt", column.tgt,
           "--subset", subset, "--ref", raw_path(cell, subset, column.tgt), "--source", raw_path(cell, subset, column.src),
           "--average-last", str(ev.average_last), "--beam", str(ev.beam), "--lenpen", str(ev.lenpen),
           "--max-len-a", str(ev.max_len_a), "--max-len-b", str(ev.max_len_b), "--compound-split", ev.compound_split,
           "--length-buckets", "--name", row.label, "--out-dir", cell.eval_dir(subset),
           "--provenance", os.path.join(cell.train_dir, "train.json")]
    if column.remove_bpe:
        cmd += ["--remove-bpe", column.remove_bpe]
    if column.strip_concat:
        cmd += ["--strip-concat"]
    return cmd


# -- preflight -----------------------------------------------------------------------------------


def estimated_checkpoint_bytes(cell, param_count):
    """fp32 weights + optimiser state (Adam: 2 moments, NAG: 1), for every checkpoint kept
    (the averaged window, checkpoint_best / _last) plus the averaged model."""
    words = cell.train_cmd
    per = param_count * 4 * (2 if "nag" in words else 3)
    keep, written = 0, 0
    interval = train_mod.option_int(words, "--save-interval-updates", 0)
    if interval > 0:
        written = train_mod.option_int(words, "--max-update", 0) // interval
        keep = train_mod.option_int(words, "--keep-interval-updates", -1)
        if keep <= 0:  # fairseq keeps every one
            keep = written
        elif written:
            keep = min(keep, written)
    return per * (keep + 2) + param_count * 4


def model_build_problems(cells, log=None) -> List[str]:
    """Cells fairseq-train would stop on before its first update (a row's config with a
    column's options or the user's extras, rejected by fairseq's parser, its config conversion
    or the lr scheduler, model or criterion build), found before any training: each cell still
    to train whose data exists (its dictionaries, its training set) is parsed and built as
    fairseq-train would build it, on
    the meta device (``params.model_build_error``). Cells whose command names another
    ``--user-dir`` than this package are not built (a second plugin cannot be imported
    beside this one); said through ``log``."""
    from .params import model_build_error

    log = log or (lambda message: print(f"reproduce: {message}", file=sys.stderr, flush=True))
    problems, checked, other_user_dir = [], {}, []
    for cell in cells:
        col = cell.column
        needs = [f"dict.{col.src}.txt", f"dict.{col.tgt}.txt", f"train.{col.src}-{col.tgt}.{col.src}.idx"]
        if cell.trained or not all(os.path.exists(os.path.join(cell.bin_dir, name)) for name in needs):
            continue  # missing data is the data check's problem
        try:
            argv = fairseq_train_argv(cell.train_cmd)
        except ValueError as error:
            problems.append(f"{cell.name}: {error}")
            continue
        if train_mod.names_another_user_dir(argv):
            other_user_dir.append(cell.name)
            continue
        # the same model whatever the training directory or rendezvous port
        model = tuple(w for i, w in enumerate(argv)
                      if w not in ("--save-dir", "--distributed-port")
                      and (i == 0 or argv[i - 1] not in ("--save-dir", "--distributed-port")))
        if model not in checked:
            checked[model] = model_build_error(argv)
        if checked[model]:
            problems.append(f"{cell.name}: fairseq-train would stop before its first update: {checked[model]}")
    if other_user_dir:
        log(f"{len(other_user_dir)} cell(s) set another --user-dir; their models are not built before training: "
            + ", ".join(other_user_dir))
    return problems


def missing_data(cell) -> Optional[str]:
    """The first file of its prepared data a cell needs and does not find (None: all there)."""
    bin_dir, col = cell.bin_dir, cell.column
    subsets = list(dict.fromkeys(["train", "valid", *cell.subsets]))
    missing = [os.path.join(bin_dir, name) for name in train_mod.missing_prepared_files(bin_dir, col.src, col.tgt, subsets)]
    # and what each evaluation reads besides (eval_command): the per-length subsets' table, and
    # every evaluated subset's raw reference and raw source (--ref, --source for the length buckets)
    if cell.table.kind == "length":
        missing.append(os.path.join(bin_dir, "length-subsets.tsv"))
    missing += [raw_path(cell, subset, lang) for subset in cell.subsets for lang in (col.tgt, col.src)]
    return next((path for path in missing if not os.path.exists(path)), None)


def mixed_pairs(cell) -> Optional[str]:
    """Where a cell's training leaves its direction to chance (train.several_pairs): its binarised
    directory holds files of several language pairs and the command names no languages (none of
    the tables' does; -s / -t after '--' would), so fairseq trains the pair of the first file it lists."""
    several = train_mod.several_pairs(cell.train_cmd)
    if several is None:
        return None
    return (f"{several[0]}: fairseq-train would train the pair of the first file it lists; the table needs a "
            f"directory of {cell.column.src}-{cell.column.tgt} alone")


def preflight(cells, options, param_counts=None) -> List[str]:
    """Everything that would make a cell fail later, found before any training."""
    problems = model_build_problems(cells)
    seen = set()
    for cell in cells:
        if (cell.bin_dir, tuple(cell.subsets)) in seen:
            continue
        seen.add((cell.bin_dir, tuple(cell.subsets)))
        missing = missing_data(cell)
        if missing:
            problems.append(f"{cell.name}: missing {missing}; prepare it with: "
                            f"{prepare_command(cell.column, cell.data_dir)} (docs/experiments.md)")
        mixed = mixed_pairs(cell)
        if mixed:
            problems.append(f"{cell.name}: {mixed}: {prepare_command(cell.column, cell.data_dir)}")
    setting = options.setting or PAPER_SETTING[cells[0].table.paper] if cells else None
    if cells and setting not in ("cpu",):
        have = train_mod._visible_gpus()
        want = cells[0].hw.gpus
        if have < want:
            problems.append(f"{want} GPU(s) per node needed by the {setting} setting, {have} visible "
                            "(pass --gpus N to keep the paper's batch with accumulation, or --setting cpu)")
    if param_counts:
        need_bytes = sum(estimated_checkpoint_bytes(c, param_counts.get(c.row.key, 0)) for c in cells
                         if not c.trained and isinstance(param_counts.get(c.row.key), int))
        os.makedirs(options.results, exist_ok=True)
        free = shutil.disk_usage(options.results).free
        if need_bytes > free:
            problems.append(f"checkpoints need about {need_bytes / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free "
                            f"under {options.results}")
    return problems


# -- provenance ----------------------------------------------------------------------------------


def git_commit():
    """HEAD of this checkout, with "-dirty" when the package's code (fairseq_ctx/) differs
    from it; edited docs or result files do not count. None for an installed copy."""
    if CHECKOUT is None:  # an installed copy: ROOT is site-packages, maybe inside someone else's repository
        return None
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "--",
                                "fairseq_ctx"], capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(cell, setting, smoke):
    import fairseq
    import torch

    return {"table": f"{cell.table.paper}_{cell.table.name}", "row": cell.row.key, "column": cell.column.name,
            "setting": "smoke (cpu)" if smoke else setting, "nodes": cell.hw.nnodes, "gpus_per_node": cell.hw.gpus,
            "hardware": cell.hw.describe(), "effective_batch_tokens": cell.hw.effective,
            "paper_batch_tokens": cell.hw.paper_effective, "command": shlex.join(cell.train_cmd),
            "git_commit": git_commit(), "torch": torch.__version__, "fairseq": fairseq.__version__,
            "python": sys.version.split()[0], "train_log": os.path.join(cell.train_dir, "train.log"),
            "training_key": cell.key, "data": cell.bin_dir, "data_fingerprint": cell.data_fingerprint,
            "languages": trained_languages(cell)}


def trained_languages(cell):
    """[src, tgt] as the cell's fairseq-train takes them (train.training_direction), kept in train.json: the
    tables name no languages, so the checkpoints hold none, and the evaluation reads them there
    (evaluation/direction.py) wherever the data directory is not."""
    try:
        return train_mod.training_direction(cell.train_cmd)["languages"]
    except ValueError:  # a command with no fairseq-train entry (a test's stand-in): none taken
        return None


def record_training_start(cell):
    """A start line in the cell's checkpoint directory (train.STARTS_RECORD, as fairseq-ctx-train
    writes; no end line: train.json says how the training ended) at each start of its
    fairseq-train: its key, command, data and the direction fairseq infers, beside the checkpoints
    from the first one on (train.json comes when the training finishes; a cell stopped or still
    training has none). The evaluation reads either (evaluation/direction.py). -> the line's
    start_id (train.json keeps the last one's), None where nothing was recorded."""
    try:
        direction = train_mod.training_direction(cell.train_cmd)
    except ValueError:  # a command with no fairseq-train entry (a test's stand-in): nothing to record
        return None
    os.makedirs(cell.checkpoint_dir, exist_ok=True)
    start = train_mod.new_start()
    train_mod.record_start(cell.checkpoint_dir, {"event": "start", **start, "by": "fairseq-ctx-reproduce",
                                                 "training_key": cell.key, "command": cell.train_cmd, **direction})
    return start["start_id"]


# -- running -------------------------------------------------------------------------------------


def _run_logged(cmd, log_path, env):
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\n$ {shlex.join(cmd)}\n")
        log.flush()
        # a training in a locked cell holds its lock too (run_lock.held_fds); evaluations take none
        return subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                               pass_fds=held_fds(log_path))


def _say(cell, log_path, message):
    """A message about a cell, on stderr and in its log."""
    print(f"cell {cell.name}: {message}", file=sys.stderr, flush=True)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(message + "\n")


def _tail(path, lines=12):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


def _check_reused(cell):
    """A finished training is reused only if it was trained by this cell's key."""
    with open(os.path.join(cell.train_dir, "train.json"), encoding="utf-8") as handle:
        recorded = json.load(handle).get("training_key")
    if recorded != cell.key:
        raise RuntimeError(f"{cell.train_dir} holds a training with key {recorded}, not {cell.key}; "
                           "move it away (it was trained with other arguments or data)")


def _repairs_so_far(checkpoint_dir, repaired):
    """Every checkpoint repair of the training in checkpoint_dir, oldest first, kept there
    (checkpoint_repairs.json) across attempts: a repaired attempt that fails leaves a whole
    checkpoint_last.pt, so the attempt that finishes would otherwise not know that its start
    was repaired. A training that starts from the beginning (no checkpoint_last.pt) starts
    a new list: repairs of checkpoints since deleted are not its own."""
    path = os.path.join(checkpoint_dir, "checkpoint_repairs.json")
    repairs = []
    if os.path.exists(os.path.join(checkpoint_dir, LAST)):
        try:
            with open(path, encoding="utf-8") as handle:
                repairs = json.load(handle)
        except (OSError, ValueError):
            pass
    repairs = repairs + [repaired] if repaired else repairs
    if repairs:
        with atomic_write(path) as handle:
            json.dump(repairs, handle, indent=1)
    elif os.path.exists(path):
        os.remove(path)
    return repairs


def run_cell(cell, setting, smoke, env, train_only=False):
    start = time.time()
    lock = RunLock(cell.train_dir, "train.lock")
    try:
        if cell.trained:
            _check_reused(cell)
        else:
            lock.acquire()
            log = os.path.join(cell.train_dir, "train.log")
            record = provenance(cell, setting, smoke)  # the code as it was when training started
            record["started"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            # a job killed while fairseq copied checkpoint_last.pt would fail on every resubmission
            repaired = repair_before_resuming(cell.checkpoint_dir, log=lambda message: _say(cell, log, message))
            repairs = _repairs_so_far(cell.checkpoint_dir, repaired)
            if repairs:  # resumed from an earlier save, or started over (this attempt's or an earlier one's)
                record["checkpoint_repair"] = repairs
            # the other nodes judge the same file (run_follower): none starts a finished training again
            done = cell.finished_update()
            if done is not None:  # its driver was gone when it ended: no train.json yet
                _say(cell, log, f"checkpoint_last.pt is at update {done} (--max-update): the training finished "
                                "in an earlier attempt; not started again")
                record["finished_in_an_earlier_attempt_at_update"] = done
                code = 0
            else:
                started_at = os.path.getsize(log) if os.path.exists(log) else 0
                record["start_id"] = record_training_start(cell)  # (its line in the starts record)
                code = _run_logged(cell.train_cmd, log, env)
                if code:
                    with open(log, encoding="utf-8", errors="replace") as handle:
                        handle.seek(started_at)
                        done = finished_before_the_exit(
                            cell.checkpoint_dir, train_mod.option_int(cell.train_cmd, "--max-update", 0), handle.read())
                    if done is not None:
                        _say(cell, log, f"fairseq-train exited {code} after it had finished (\"{FAIRSEQ_DONE}\", "
                                        f"checkpoint_last.pt whole at update {done}): taken as finished")
                        record["exit_after_finishing"] = code
                        code = 0
            if code:
                cell.status, cell.message = "FAILED", f"training exited {code}; log {log}"
                cell.log_tail = _tail(log)
                return cell
            resumptions = resumptions_in_log(log, cell.train_cmd, cell.bin_dir)
            if resumptions:  # every attempt's, from fairseq's log
                record["resumptions"] = resumptions
            for r in resumptions:
                if r["batches_as_uninterrupted"] is False:
                    _say(cell, log, f"resumed at update {r['update']} in epoch {r['epoch']} under {r['task']} "
                                    f"({r['why']}): from there on a valid run of its seed, not the uninterrupted one "
                                    "(train.json resumptions)")
            with atomic_write(os.path.join(cell.train_dir, "train.json")) as handle:
                json.dump(dict(record, finished=time.strftime("%Y-%m-%dT%H:%M:%S%z")), handle, indent=1)
            lock.release()
        if train_only:
            cell.status = "trained"
            return cell
        for subset in cell.subsets:
            if cell.evaluated(subset):
                continue
            log = os.path.join(cell.eval_dir(subset), "eval.log")
            # the evaluation process builds no model (its fairseq-generate child does): skip
            # importing fairseq there (~5 s of CPU per cell)
            code = _run_logged(eval_command(cell, subset), log, dict(env, FAIRSEQ_CTX_NO_MODELS="1"))
            if code:
                cell.status, cell.message = "FAILED", f"evaluation of {subset} exited {code}; log {log}"
                cell.log_tail = _tail(log)
                return cell
        cell.status = "ok"
    except Exception as error:  # noqa: BLE001  (one cell's crash must not stop the others)
        cell.status, cell.message = "FAILED", f"{type(error).__name__}: {error}"
    finally:
        lock.release()
        cell.seconds = time.time() - start
    return cell


def run_cells(cells, setting, smoke, jobs=1, threads=None):
    env = python_env()  # this copy in the children, whatever directory they run in
    # cells running side by side share the cores: more OpenMP threads than cores makes every
    # process spin (seen: 5x slower smoke cells with 2 jobs x 2 threads on 2 cores)
    threads = threads or max(1, (os.cpu_count() or 1) // max(1, jobs))
    env.setdefault("OMP_NUM_THREADS", str(threads))
    env["PYTHONUNBUFFERED"] = "1"
    # the same directory trained by two cells (two tables, one model) is run by one of them
    by_dir: Dict[str, List[Cell]] = {}
    for cell in cells:
        by_dir.setdefault(cell.train_dir, []).append(cell)

    if cells and cells[0].hw.nnodes > 1:
        # multi-node: every training first, back to back, as the other nodes run them
        # (run_follower); evaluating in between would keep their next rendezvous waiting
        for cell in cells:
            if not cell.trained and not any(c.train_dir == cell.train_dir and c.status != "pending" for c in cells):
                run_cell(cell, setting, smoke, env, train_only=True)
        for cell in cells:
            if cell.status == "FAILED":
                summary(cell)
        cells_left = [c for c in cells if c.status != "FAILED"]
        by_dir = {}
        for cell in cells_left:
            by_dir.setdefault(cell.train_dir, []).append(cell)

    def run_group(group):
        first = run_cell(group[0], setting, smoke, env)
        for other in group[1:]:
            if first.status != "ok" and not first.trained:
                other.status, other.message = "FAILED", f"shares the failed training of {first.name}"
            else:
                run_cell(other, setting, smoke, env)
        return group

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for group in pool.map(run_group, by_dir.values()):
            for cell in group:
                summary(cell)
    for cell in cells:
        if cell.log_tail:
            print(f"--- {cell.name}: last lines of its log ---\n{cell.log_tail}", file=sys.stderr, flush=True)
    return cells


def run_follower(cells, node_rank):
    """Node R > 0 of a multi-node run: the same training commands, one after another, joining
    node 0's rendezvous. fairseq saves checkpoints from rank 0 only, so this node writes no
    train.json, takes no lock and evaluates nothing: node 0 does."""
    failed = []
    for cell in [c for c in cells if not c.trained]:
        log = os.path.join(cell.train_dir, f"train.node{node_rank}.log")
        # as node 0 judges it after its repair: a training that finished in an earlier attempt
        # (its driver gone before train.json) is not started again; node 0 does not start it either
        train_mod.wait_for_node_0(cell.checkpoint_dir, node_rank)
        done = cell.finished_update()
        if done is not None:
            print(f"node {node_rank}: {cell.name}: checkpoint_last.pt is at update {done} (--max-update): finished "
                  "in an earlier attempt; not started again", flush=True)
            continue
        code = _run_logged(cell.train_cmd, log, python_env(dict(os.environ, PYTHONUNBUFFERED="1")))
        print(f"node {node_rank}: {cell.name}: training {'ok' if code == 0 else f'FAILED (exit {code}); log {log}'}",
              flush=True)
        if code:
            failed.append(cell.name)
    if failed:
        sys.exit(1)
    return ""


def summary(cell):
    if cell.status == "ok":
        scores = []
        for subset in cell.subsets[:3]:
            with open(cell.result_path(subset), encoding="utf-8") as handle:
                result = json.load(handle)
            scores.append(f"{subset} BLEU {result['tokenized']['bleu']:.2f} (sacreBLEU {result['sacrebleu']['bleu']:.2f})")
        more = f" + {len(cell.subsets) - 3} subsets" if len(cell.subsets) > 3 else ""
        print(f"cell {cell.name}: ok, {'; '.join(scores)}{more} [{cell.seconds:.0f}s]", flush=True)
    else:
        print(f"cell {cell.name}: {cell.status}: {cell.message}", file=sys.stderr, flush=True)


def load_result(cell, subset=None) -> Optional[dict]:
    path = cell.result_path(subset or cell.column.subset)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


# -- speed columns (Yang Table 1, Wang Table 1) ----------------------------------------------------


def speed_ratios(table, rows, results, smoke, device=None, measure=True):
    """Train / decode speed of every row as a ratio to the first row's, measured by the
    benchmark harness on one batch (fairseq_ctx.benchmarking); cached per table and scale.
    ``measure`` False (--table-only): the cached figures, or None where none were measured."""
    import torch

    from .. import benchmarking as bench

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    path = os.path.join(results, table.paper, f"speed-{table.name}-{'smoke' if smoke else 'base'}-{device}.json")
    if not measure and not os.path.exists(path):  # assembled elsewhere (a CPU login node): another device's
        path = next(iter(sorted(glob.glob(path[:-len(f"{device}.json")] + "*.json"))), path)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    if not measure:
        return None
    specs = []
    for index, row in enumerate(rows):
        args = shlex.join(train_mod.read_args_file(os.path.join(CONFIGS, row.config)))
        text = f"{row.key}={args}" if index == 0 else f"{row.key}@{rows[0].key}={args}"
        specs.append(bench.SystemSpec.parse(text, index == 0))
    cfg = bench.BenchConfig(dims="tiny" if smoke else "base", src_lens=(30,), device=device,
                            dtype="bf16" if device == "cuda" else "fp32", steps=2 if smoke else 20,
                            warmup=1 if smoke else 5, decode_repeats=1 if smoke else 3, beams=(4,), memory=False)
    measured = bench.run_benchmark(specs, cfg)
    out = {}
    for row in measured["rows"]:
        ratios = row.get("ratios", {})
        if "train_tok_s" in ratios:
            out[row["system"]] = {"train": f"{ratios['train_tok_s']:.2f}", "decode": f"{ratios['decode_beam4_sent_s']:.2f}"}
    out["_meta"] = {"device": device, "dims": cfg.dims, "src_len": 30, "dtype": cfg.dtype}
    with atomic_write(path) as handle:
        json.dump(out, handle, indent=1)
    return out


# -- the command ---------------------------------------------------------------------------------


def build_parser(table):
    import argparse

    from .tables import __doc__ as tables_doc

    parser = argparse.ArgumentParser(description=f"Reproduce {table.title}. " + (tables_doc or ""),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true",
                        help="the whole pipeline of every cell at smoke scale: small real corpora prepared by the "
                             "real data scripts, tiny models, a few updates, CPU (minutes)")
    parser.add_argument("--dry-run", action="store_true", help="print every command and effective batch, run nothing")
    parser.add_argument("--setting", default=None, choices=[*train_mod.SETTINGS, "modern", "cpu"],
                        help=f"training setting (default {PAPER_SETTING[table.paper]})")
    train_mod.add_hardware_options(parser)
    parser.add_argument("--backend", default=None, help="--distributed-backend (gloo for CPU processes)")
    parser.add_argument("--cpu-max-tokens", type=int, default=None, help="--max-tokens of the cpu setting")
    parser.add_argument("--data-root", default=None, help="prepared corpora (default work/, smoke: RESULTS/data)")
    parser.add_argument("--results", default=None, help="default work/experiments (smoke: work/smoke)")
    parser.add_argument("--only", action="append", default=[], help="row key(s) to run (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="cells trained at a time (CPU / smoke)")
    parser.add_argument("--table-only", action="store_true", help="only assemble the table from finished results")
    parser.add_argument("--params", action="store_true", default=None,
                        help="count parameters (built on CPU; default for tables with a parameter column)")
    parser.add_argument("--no-speed", action="store_true", help="skip the Train / Decode speed columns")
    parser.add_argument("--skip-preflight", action="store_true", help="run even if the preflight finds problems")
    parser.add_argument("--output", default=None, help="also write the table (markdown) here")
    return parser


def refuse_checkpoint_conflicts(cells, table):
    """Exit before anything runs when a cell's training would leave the table's evaluation (or a
    resumption) without the checkpoints it reads (train.checkpoint_conflict)."""
    for cell in cells:
        conflict = train_mod.checkpoint_conflict(cell.train_cmd, table.evaluation)
        if conflict:
            sys.exit(f"reproduce: {cell.name}: {conflict} (the table's evaluation: "
                     f"{checkpoint_choice(table.evaluation)}); nothing was trained")


def main(table_key, argv=None):
    from .tables import TABLES, format_table

    table = TABLES[table_key]
    argv, train_extra = train_mod.split_extra(argv)
    options = build_parser(table).parse_args(argv)
    # the runner owns where a cell's checkpoints go (repair, averaging and evaluation read them there)
    owned = train_mod.checkpoint_options(train_extra)
    if owned:
        sys.exit(f"reproduce: {owned[0]} after '--' is not allowed: each cell trains into "
                 "<results>/.../checkpoints (set --results to move every cell)")
    options.train_extra = train_extra
    if options.smoke:
        if options.setting not in (None, "cpu"):
            sys.exit("reproduce: --smoke trains on the CPU (--setting cpu)")
        options.setting = "cpu"
        options.cpu_max_tokens = options.cpu_max_tokens or SMOKE_MAX_TOKENS
        options.results = options.results or os.path.join(WORK_DIR, "smoke")
        options.data_root = options.data_root or os.path.join(options.results, "data")
    # absolute: the training and evaluation children run in another directory
    options.results = os.path.abspath(options.results or os.path.join(WORK_DIR, "experiments"))
    options.data_root = os.path.abspath(options.data_root or WORK_DIR)  # where prepare-data writes
    try:
        train_mod.check_launch(options.launcher, options.nnodes, options.node_rank, options.master_addr)
    except train_mod.BatchError as error:
        sys.exit(f"reproduce: {error}")
    if options.jobs > 1 and (options.setting or PAPER_SETTING[table.paper]) != "cpu":
        sys.exit("reproduce: --jobs N trains N cells side by side: for --setting cpu / --smoke only (GPU cells "
                 "would share the same GPUs)")
    unknown = [key for key in options.only if key not in {r.key for r in table.rows}]
    if unknown:
        sys.exit(f"reproduce: unknown row(s) {', '.join(unknown)}; rows: {', '.join(r.key for r in table.rows)}")
    rows = [r for r in table.rows if not options.only or r.key in options.only]
    start = time.time()
    notes = ""
    if options.smoke and table.columns and not (options.dry_run or options.table_only):
        # the commands do not depend on the data's content: refused before the data is made
        try:
            refuse_checkpoint_conflicts(build_cells(table, rows, options, options.results, options.data_root), table)
        except train_mod.BatchError as error:
            sys.exit(f"reproduce: {error}")
        from .smoke_data import SmokeDataError
        from .smoke_data import prepare as prepare_smoke

        sources = {}
        for column in table.columns:
            if column.data not in sources:
                print(f"reproduce: smoke data {column.data} ...", flush=True)
                try:
                    sources[column.data] = prepare_smoke(column.data, options.data_root, workers=max(1, options.jobs))
                except SmokeDataError as error:
                    sys.exit(f"reproduce: smoke data {column.data} failed, nothing was trained: {error}")
        notes = "".join(f"> smoke data {name}: {note}\n" for name, note in sources.items())
    if options.smoke:
        notes = (f"> **SMOKE REHEARSAL**: every cell through the full-scale code path with tiny models "
                 f"(widths / {SMOKE_DIM_DIVISOR}, <= {SMOKE_MAX_LAYERS} layers) trained {SMOKE_UPDATES} updates on "
                 f"the CPU: the numbers test the road, not the models.\n" + notes + "\n")
    try:
        cells = build_cells(table, rows, options, options.results, options.data_root)
    except train_mod.BatchError as error:
        sys.exit(f"reproduce: {error}")
    refuse_checkpoint_conflicts(cells, table)
    if not options.smoke:
        for warning in train_mod.setting_warnings(options.setting or PAPER_SETTING[table.paper], table.paper,
                                                  options.gpus, options.reference):
            print(f"reproduce: warning: {warning}", file=sys.stderr, flush=True)
    for warning in sorted({w for cell in cells for w in train_mod.checkpoint_warnings(cell.train_cmd,
                                                                                       table.evaluation)}):
        print(f"reproduce: warning: {warning}", file=sys.stderr, flush=True)
    if options.dry_run:
        for bin_dir, cell in {c.bin_dir: c for c in cells}.items():
            missing = missing_data(cell)  # what the preflight of a real run checks
            problem = f"missing {missing}" if missing else mixed_pairs(cell)
            print(f"# data: {bin_dir} " + (f"({problem}: {prepare_command(cell.column, cell.data_dir)})"
                                           if problem else "(prepared)"))
        for cell in cells:
            if cell.hw.effective is not None:
                print(f"# {cell.name}: effective batch: {cell.hw.effective} tokens ({cell.hw.describe()})")
            finished = None if cell.trained else cell.finished_update()
            if finished is not None:
                print(f"# finished: checkpoint_last.pt at update {finished} (--max-update), no train.json yet: "
                      "a real run does not train it again", flush=True)
            print(("# done: " if cell.trained or finished is not None else "") + shlex.join(cell.train_cmd), flush=True)
            for subset in cell.subsets if options.node_rank == 0 else ():
                print(("# done: " if cell.evaluated(subset) else "") + shlex.join(eval_command(cell, subset)), flush=True)
        if options.node_rank > 0:
            print(f"# node {options.node_rank} only trains: node 0 evaluates every cell afterwards", flush=True)
    counts = None
    if (options.params if options.params is not None else table.params):
        from .params import count_rows

        counts = count_rows(table, rows)
    if not (options.dry_run or options.table_only) and cells:
        # smoke models are tiny: the disk estimate (from the full-size parameter counts) is for real runs
        disk_counts = None
        if not options.smoke:
            from .params import count_rows

            disk_counts = counts or count_rows(table, rows)
        problems = preflight(cells, options, disk_counts)
        if problems:
            print("reproduce: preflight found problems (nothing was trained):", file=sys.stderr)
            for problem in problems:
                print(f"  - {problem}", file=sys.stderr)
            if not options.skip_preflight:
                sys.exit(2)
        if options.node_rank > 0:
            return run_follower(cells, options.node_rank)
        run_cells(cells, options.setting or PAPER_SETTING[table.paper], options.smoke, options.jobs)
    speed, speed_failed = None, False
    if table.speed and not options.no_speed and not options.dry_run:
        try:
            speed = speed_ratios(table, rows, options.results, options.smoke, measure=not options.table_only)
        except Exception as error:  # noqa: BLE001  (the BLEU table still prints; the failure is counted)
            speed, speed_failed = {}, True
            print(f"reproduce: speed columns failed: {type(error).__name__}: {error}", file=sys.stderr)
        if speed is None:  # --table-only assembles; measuring takes minutes (base-size models)
            speed = {}
            print("reproduce: --table-only: the speed columns were never measured for this table and scale "
                  "(a run without --table-only measures them; --no-speed leaves them out)", file=sys.stderr)
    text = format_table(table, cells, counts, speed, notes)
    print(text)
    if options.output:
        with atomic_write(options.output) as handle:
            handle.write(text)
    failed = [c.name for c in cells if c.status == "FAILED"] + (["speed columns"] if speed_failed else [])
    if not (options.dry_run or options.table_only) and cells:
        print(f"reproduce {table_key}: {len(cells) - len(failed)} of {len(cells)} cells ok "
              f"in {time.time() - start:.0f}s" + (f"; FAILED: {', '.join(failed)}" if failed else ""),
              file=sys.stderr if failed else sys.stdout, flush=True)
    if failed:
        sys.exit(1)
    return text
