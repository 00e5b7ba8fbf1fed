"""Build (and run) the fairseq-train command of one table row under one hardware setting.

    python -m fairseq_ctx.reproduce.train CONFIG SETTING --data BIN --save-dir DIR [--dry-run] [-- extra]

CONFIG is a path or a shipped config by name (``<paper>/<row>.args``, from the package's
fairseq_ctx/configs/); configs/<paper>/train.args (the paper's optimiser,
schedule and training length) is read first, then the row, then the SETTING (hardware /
batch), then extra arguments: later options override earlier ones (argparse), so a
setting always decides --max-tokens / --update-freq / precision / world size.

Settings (effective batch = nodes x GPUs per node x max-tokens x update-freq; every
setting but cpu keeps the paper's, and a node / GPU count that cannot keep it is refused
unless --allow-batch-change):
  p40     8 GPUs x 4096 tokens, fp32 (Yang / Wang: "eight P40 GPUs, 4096 tokens each")
  cao     2 GPUs x 2048 tokens x update-freq 12, fp32 (Cao: two 1080 Ti, accumulation 12)
  iida    2 GPUs x 2000 tokens, fp32 (Iida: NAG lr 0.005, 20 epochs in configs/iida2019/train.args)
  modern  bf16 on --gpus G (default: all visible), the SAME effective batch as the paper's
          setting (--reference, default the paper's own), max-tokens per GPU <= --max-tokens-per-gpu
  cpu     --cpu, fp32, 1 process (tests, smoke runs), no accumulation (a row config's own
          --update-freq is overridden with 1, as by every setting); --max-tokens 4096 (the demo's)
          unless the config or the options after -- give a batch (--max-tokens / --batch-size).
          --gpus N: N CPU processes, through --launcher torchrun with the gloo backend (spawn is
          refused: fairseq spawns one process per GPU; slurm too: its srun line asks for GPUs)

Launchers: ``spawn`` (default): fairseq-train --distributed-world-size N on one node (fairseq
spawns one process per GPU). ``torchrun``: torchrun --nproc-per-node N [--nnodes M --node-rank R
--master-addr HOST --master-port P] runs fairseq_ctx.reproduce.distributed_entry, which hands
each process its rank (this also runs on CPU with the gloo backend; see docs/experiments.md).
Multi-node: run the same torchrun command on every node with its --node-rank. ``slurm``:
an ``srun`` line for fairseq's own SLURM support (one task per GPU, --distributed-port).
"""
import argparse
import datetime
import functools
import ipaddress
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Optional

from ..checkpoint_repair import LAST, finished_at, repair_before_resuming, stored_updates, written_to_the_end
from ..evaluation.direction import STARTS_RECORD, language_pairs_in, trained_direction
from ..paths import CONFIGS, config_path, python_env
from ..paths import IMPORT_ROOT as ROOT  # noqa: F401  (runner: child processes run from there)
from ..paths import PACKAGE_DIR as USER_DIR
from ..run_lock import RunInUse, RunLock, held_fds

# name -> (GPUs, max tokens per GPU, update freq, precision)
SETTINGS = {
    "p40": (8, 4096, 1, "fp32"),
    "cao": (2, 2048, 12, "fp32"),
    "iida": (2, 2000, 1, "fp32"),
}
PAPER_SETTING = {"yang2019": "p40", "wang2019": "p40", "cao": "cao", "iida2019": "iida"}


def read_args_file(path):
    """An args file: options separated by whitespace, shell quoting, a word starting with
    '#' starts a comment (to the end of its line)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"config not found: {path}")
    with open(path, encoding="utf-8") as handle:
        return shlex.split(handle.read(), comments=True)


def paper_of(config):
    return os.path.basename(os.path.dirname(os.path.abspath(config)))


def model_args(config):
    """train.args of the config's paper (if any) + the row's own args."""
    common = os.path.join(os.path.dirname(os.path.abspath(config)), "train.args")
    words = read_args_file(common) if os.path.exists(common) and os.path.abspath(common) != os.path.abspath(config) else []
    return words + read_args_file(config)


class BatchError(ValueError):
    """The requested hardware cannot keep the paper's effective batch."""


def paper_batch(setting):
    """Effective batch (tokens per update) of a paper setting."""
    gpus, tokens, freq, _ = SETTINGS[setting]
    return gpus * tokens * freq


def modern_batch(reference, world, max_tokens_per_gpu):
    """Same effective batch as ``reference`` on ``world`` GPUs in total (all nodes) with at
    most ``max_tokens_per_gpu`` tokens each: (max_tokens, update_freq)."""
    effective = paper_batch(reference)
    update_freq = max(1, math.ceil(effective / (world * max_tokens_per_gpu)))
    return effective // (world * update_freq), update_freq


@dataclass
class Hardware:
    """One cell's hardware: processes, tokens per process, accumulation, precision."""
    nnodes: int
    gpus: int  # per node (CPU processes for the cpu setting)
    max_tokens: Optional[int]
    update_freq: int
    precision: str
    paper_effective: Optional[int]  # the paper's tokens per update (None: no paper batch)

    @property
    def world(self):
        return self.nnodes * self.gpus

    @property
    def effective(self):
        return None if self.max_tokens is None else self.world * self.max_tokens * self.update_freq

    def describe(self):
        return (f"{self.nnodes} node(s) x {self.gpus} {'process' if self.precision == 'cpu' else 'GPU'}(s) x "
                f"{self.max_tokens} tokens x update-freq {self.update_freq} ({self.precision})")

    def tag(self, setting):
        """Directory name: cells trained with another batch or precision never share a directory.
        The processes in all (how fairseq shards each batch), not their layout on nodes: 2 nodes x
        4 GPUs train what 1 node x 8 GPUs does, and a job resubmitted with the other layout resumes."""
        return f"{setting}-{self.world}x{self.max_tokens}x{self.update_freq}-{self.precision}"

    def earlier_tags(self, setting, names):
        """Those of the directory ``names`` that the tag of before the world size (nodes x GPUs per
        node, e.g. p40-2x4x4096x1-fp32) gave this hardware's batch and precision."""
        pattern = re.compile(rf"{re.escape(setting)}-(\d+)x(\d+)x{self.max_tokens}x{self.update_freq}"
                             rf"-{re.escape(self.precision)}")
        return sorted(name for name in names
                      if (m := pattern.fullmatch(name)) and int(m.group(1)) * int(m.group(2)) == self.world)


def hardware(setting, paper=None, gpus=None, nnodes=1, max_tokens_per_gpu=16384, reference=None,
             cpu_max_tokens=None, allow_batch_change=False):
    """The hardware of a setting on ``nnodes`` nodes of ``gpus`` GPUs. The paper's effective
    batch (nodes x GPUs x max-tokens x update-freq) is kept; a GPU count that cannot keep it
    is refused (BatchError) unless ``allow_batch_change``."""
    if nnodes < 1 or (gpus is not None and gpus < 1):
        raise BatchError(f"--nnodes and --gpus must be positive (got {nnodes}, {gpus})")
    if setting == "cpu":  # --gpus N = N CPU processes (torchrun launcher, gloo)
        return Hardware(nnodes, gpus or 1, cpu_max_tokens, 1, "cpu", None)
    if setting == "modern":
        reference = reference or PAPER_SETTING.get(paper, "p40")
        gpus = gpus or _visible_gpus() or 1
        max_tokens, update_freq = modern_batch(reference, nnodes * gpus, max_tokens_per_gpu)
        hw = Hardware(nnodes, gpus, max_tokens, update_freq, "bf16", paper_batch(reference))
    elif setting in SETTINGS:
        paper_gpus, tokens, freq, precision = SETTINGS[setting]
        gpus = gpus or max(1, paper_gpus // nnodes)
        world = nnodes * gpus
        # keep the paper's tokens per GPU and accumulate over fewer GPUs (or fewer steps over more)
        freq = max(1, paper_gpus * freq // world)
        hw = Hardware(nnodes, gpus, tokens, freq, precision, paper_batch(setting))
    else:
        raise ValueError(f"unknown setting {setting!r}: one of {', '.join([*SETTINGS, 'modern', 'cpu'])}")
    if hw.effective != hw.paper_effective:
        message = (f"effective batch {hw.effective:,} tokens on {hw.describe()} differs from the paper's "
                   f"{hw.paper_effective:,}; choose a GPU count (nodes x GPUs) that divides the paper's batch "
                   f"(e.g. 1, 2, 4, 8), or pass --allow-batch-change to train with it anyway")
        if not allow_batch_change:
            raise BatchError(message)
        print(f"warning: {message}", file=sys.stderr)
    return hw


def setting_warnings(setting, paper, gpus=None, reference=None):
    """What in a setting is likely not what was meant, a line each (trained anyway): another paper's
    batch than ``paper``'s, and ``modern`` sizing its batch for one GPU where none is visible (a
    login node: the job's GPU count gives another split of the batch and another directory)."""
    out, own = [], PAPER_SETTING.get(paper)
    papers = {name: " / ".join(p for p, s in PAPER_SETTING.items() if s == name) for name in SETTINGS}
    chosen = setting if setting in SETTINGS else reference if setting == "modern" else None
    if own and chosen and chosen != own:
        out.append(f"{'--reference ' if setting == 'modern' else 'the '}{chosen}"
                   f"{'' if setting == 'modern' else ' setting'} is {papers[chosen]}'s batch "
                   f"({paper_batch(chosen):,} tokens per update); {paper} trained with {own}'s "
                   f"({paper_batch(own):,}): these runs will not be in the paper's setting")
    if setting == "modern" and gpus is None and not _visible_gpus():
        out.append("modern without --gpus and no GPU visible here: sized for 1 GPU per node; pass --gpus N as the "
                   "training nodes have (the batch split and the results directory depend on it)")
    return out


def setting_args(setting, paper=None, gpus=None, max_tokens_per_gpu=16384, reference=None, nnodes=1,
                 allow_batch_change=False):
    """(world size, fairseq args) of a setting."""
    hw = hardware(setting, paper, gpus, nnodes, max_tokens_per_gpu, reference, allow_batch_change=allow_batch_change)
    return hw.world, hardware_args(hw)


def hardware_args(hw):
    if hw.precision == "cpu":
        return ["--cpu"] + ([] if hw.max_tokens is None else ["--max-tokens", str(hw.max_tokens)])
    args = ["--max-tokens", str(hw.max_tokens), "--update-freq", str(hw.update_freq)]
    return args + (["--bf16"] if hw.precision == "bf16" else [])


@functools.lru_cache(maxsize=None)  # asked by the setting and by its warnings: torch is imported once
def _visible_gpus():
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


# what a GPU setting decides, refused after '--' (fairseq would take the later value silently)
SETTING_DECIDES = ("--max-tokens", "--batch-size", "--max-sentences", "--update-freq", "--distributed-world-size",
                   "--fp16", "--bf16", "--amp", "--memory-efficient-fp16", "--memory-efficient-bf16", "--cpu")

# the cpu setting's batch where nothing else gives one (the demo's, fairseq_ctx/configs/demo/train.common)
CPU_MAX_TOKENS = 4096
BATCH_OPTIONS = ("--max-tokens", "--batch-size", "--max-sentences")


def cpu_default_batch(hw, words):
    """["--max-tokens", CPU_MAX_TOKENS] for the cpu setting where none of ``words`` (the setting's,
    the config's and the extra options) gives a batch: fairseq-train starts without one only to stop."""
    if hw.precision == "cpu" and not any(option_value(words, name) for name in BATCH_OPTIONS):
        return ["--max-tokens", str(CPU_MAX_TOKENS)]
    return []

def setting_decides(hw, setting, words, extra):
    """What the setting decides, as fairseq-train arguments put after the config's ``words``:
    batch, accumulation, precision. Under a GPU setting, the same options in ``extra`` (after '--')
    are refused (BatchError); the cpu setting takes them, and its default batch where none is given."""
    if hw.precision != "cpu":
        given = sorted({w.split("=")[0] for w in extra if w.split("=")[0] in SETTING_DECIDES})
        if given:
            raise BatchError(f"{' '.join(given)} after '--': the {setting} setting decides the batch and precision "
                             f"({hw.describe()}), as the effective batch printed and the results directory's name "
                             "state them; fairseq would take yours instead. Change the GPU count with --gpus "
                             "(--allow-batch-change for another effective batch), the tokens per GPU with "
                             "--max-tokens-per-gpu (modern), or train with --setting cpu, which takes them")
    batch = hardware_args(hw)
    batch += cpu_default_batch(hw, [*batch, *words, *extra])
    if hw.precision == "cpu" and option_value(words, "--update-freq") is not None:
        # the setting decides the accumulation, as every other setting does:
        # iida2019/lstm_multihop.args' own --update-freq 2 gave that one row twice the tokens per
        # update of the rows it is compared with. Only where a config names one, so that the
        # training key (every argument) of every other cpu cell stays as it was
        batch += ["--update-freq", str(hw.update_freq)]
    return batch


# fairseq's translation task, except that a training resumed in a later epoch keeps the batches
# the uninterrupted one has (fairseq_ctx/tasks/translation_exact_resume.py): every training
# command runs it unless its settings name a task
EXACT_RESUME_TASK = "translation_exact_resume"


def build_command(config, setting, data, save_dir, extra=(), launcher="spawn", gpus=None, nnodes=1,
                  node_rank=0, master_addr="127.0.0.1", master_port=29500, max_tokens_per_gpu=16384,
                  reference=None, backend=None, python=sys.executable, hw=None, allow_batch_change=False):
    """The training command of one row (``hw``: a Hardware; computed from the setting if None)."""
    hw = hw or hardware(setting, paper_of(config), gpus, nnodes, max_tokens_per_gpu, reference,
                        allow_batch_change=allow_batch_change)
    words = model_args(config)
    batch = setting_decides(hw, setting, words, extra)
    # --required-batch-size-multiple 1: fairseq drops the last batch of validation otherwise
    args = [data, "--user-dir", USER_DIR, *words, *batch,
            "--save-dir", save_dir, "--required-batch-size-multiple", "1", *extra]
    if not any(w == "--task" or w.startswith("--task=") for w in [*words, *extra]):
        args += ["--task", EXACT_RESUME_TASK]
    if hw.precision == "cpu" and launcher == "slurm":
        raise BatchError("the cpu setting does not run under --launcher slurm (its srun line asks for GPUs): "
                         "inside the allocation, use --launcher torchrun (gloo) or the default")
    if hw.precision == "cpu" and hw.world > 1:
        if launcher == "spawn":
            raise BatchError(f"the cpu setting with {hw.world} processes needs --launcher torchrun (fairseq's "
                             "spawn launcher starts one process per GPU and cannot start CPU processes)")
        backend = backend or "gloo"  # fairseq's default, nccl, has no CPU tensors
    if backend:
        args += ["--distributed-backend", backend]
    if hw.precision == "cpu" and hw.world > 1:
        # fairseq's pytorch_ddp wrapper passes device_ids=[device_id], which torch's DDP
        # rejects for CPU modules; legacy_ddp (fairseq's own bucketed all-reduce) works
        args += ["--ddp-backend", "legacy_ddp"]
    if launcher == "torchrun":
        return [python, "-m", "torch.distributed.run", "--nproc-per-node", str(hw.gpus), "--nnodes", str(hw.nnodes),
                "--node-rank", str(node_rank), "--master-addr", master_addr, "--master-port", str(master_port),
                "-m", "fairseq_ctx.reproduce.distributed_entry", *args]
    if launcher == "slurm":
        # fairseq's own SLURM support: one task per GPU; fairseq reads the ranks from SLURM's
        # environment and rendezvous on the first node at --distributed-port. fairseq takes
        # device SLURM_LOCALID, so every task must see all of its node's GPUs: --gpu-bind=none
        # (a site default binding one GPU per task would leave tasks 1-3 without device 1-3)
        # Slurm 22.05+ srun no longer inherits the job's --cpus-per-task: pass it on, or each
        # task gets one core for fairseq's data loading
        cpus = os.environ.get("SLURM_CPUS_PER_TASK")
        return ["srun", "--nodes", str(hw.nnodes), "--ntasks-per-node", str(hw.gpus), "--gpus-per-node", str(hw.gpus),
                "--gpu-bind=none", *(["--cpus-per-task", cpus] if cpus else []), python, "-m", "fairseq_cli.train", *args, "--distributed-world-size", str(hw.world),
                "--distributed-port", str(master_port)]
    if launcher != "spawn":
        raise ValueError(f"unknown launcher {launcher!r} (spawn, torchrun or slurm)")
    if hw.nnodes > 1:
        raise BatchError("--nnodes > 1 needs --launcher torchrun (the same command on every node) or slurm")
    # always: without it fairseq takes every visible GPU (8 processes for --gpus 1 on an 8-GPU node)
    args += ["--distributed-world-size", str(hw.world)]
    return [python, "-m", "fairseq_cli.train", *args]


# the module fairseq-train runs as, in each launcher's command above
TRAIN_ENTRIES = ("fairseq_cli.train", "fairseq_ctx.reproduce.distributed_entry")


def fairseq_train_argv(cmd):
    """fairseq-train's own arguments (data directory first) in a cell's training command."""
    starts = [i for i, word in enumerate(cmd) if word in TRAIN_ENTRIES]
    if not starts:
        raise ValueError(f"no fairseq-train entry ({', '.join(TRAIN_ENTRIES)}) in {shlex.join(cmd)}")
    return cmd[starts[0] + 1:]


def language_choice(cmd):
    """How fairseq-train ``cmd`` comes by its direction: (data, named, pairs), its first data
    directory (of a ':'-separated list), the (src, tgt) it names (--source-lang / -s and
    --target-lang / -t; None unless both: fairseq infers both otherwise) and the language pairs
    that directory's file names give, in the order fairseq meets them (its first listed)."""
    argv = fairseq_train_argv(cmd)
    data = argv[0].split(os.pathsep)[0]
    src, tgt = named_languages(argv[1:])
    return data, ((src, tgt) if src and tgt else None), language_pairs_in(data)


def named_languages(words):
    """(--source-lang, --target-lang) as fairseq-train's parser takes them from ``words`` (either
    spelling, the last given, '-sde' as '-s de'), None for one not given (or not parsed: fairseq
    names that error itself)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("-s", "--source-lang")
    parser.add_argument("-t", "--target-lang")
    try:
        named, _ = parser.parse_known_args(words)
    except (argparse.ArgumentError, SystemExit):  # ('-s' with no value)
        return None, None
    return named.source_lang, named.target_lang


def trained_pair(cmd):
    """The (src, tgt) fairseq-train ``cmd`` trains: the named one, else the pair fairseq infers
    from its data directory (data_utils.infer_language_pair); None where it finds none."""
    _, named, pairs = language_choice(cmd)
    return named or (pairs[0] if pairs else None)


def training_direction(cmd):
    """What a record of fairseq-train ``cmd`` keeps of its direction: {"data": its data argument as
    fairseq stores it in every checkpoint, "languages": [src, tgt] or None (trained_pair)}. Unless
    given -s / -t after '--', neither this driver nor the tables name the languages, so the
    checkpoint's cfg holds none; the evaluation reads them here (evaluation/direction.py) where the
    training data is not."""
    pair = trained_pair(cmd)
    return {"data": fairseq_train_argv(cmd)[0], "languages": list(pair) if pair else None}


def data_problem(cmd):
    """The first of the files fairseq-train loads from its data directory (the first of a
    ':'-separated list) before its first update that is not there: both dictionaries, both sides
    of the training set and of each validation subset (fairseq_cli/train.py loads them before
    training), as .idx and .bin (or a raw text file); None where they all are. Languages as
    trained_pair gives them. Not read: the files' contents (a cut-off .bin, a mismatched dictionary)."""
    argv = fairseq_train_argv(cmd)
    data = argv[0].split(os.pathsep)[0]
    if not os.path.isdir(data):
        return f"{data}: no such directory"
    pair = trained_pair(cmd)
    if pair is None:
        return f"{data}: no binarised data (<split>.<src>-<tgt>.<lang>.idx / .bin)"
    subsets = [option_value(argv, "--train-subset") or "train"]
    if "--disable-validation" not in argv:
        subsets += (option_value(argv, "--valid-subset") or "valid").split(",")
    missing = missing_prepared_files(data, *pair, subsets)
    return f"{data}: no {missing[0]}" if missing else None


def several_pairs(cmd):
    """Where fairseq-train ``cmd`` leaves the direction to chance (no languages named, files of
    several pairs in its data directory: both directions binarised into one; fairseq trains the
    pair of the first file it lists): ("DATA holds files of N language pairs (a-b, b-a)", the pair
    fairseq takes here); else None."""
    data, named, pairs = language_choice(cmd)
    if named is not None or len(pairs) < 2:
        return None
    listing = ", ".join(sorted("-".join(pair) for pair in pairs))
    return f"{data} holds files of {len(pairs)} language pairs ({listing})", pairs[0]


def language_pair_warning(cmd):
    """A line where fairseq-train ``cmd`` leaves the direction to chance (several_pairs)."""
    several = several_pairs(cmd)
    if several is None:
        return None
    held, first = several
    return (f"{held}: fairseq trains the pair of the first file it lists ({'-'.join(first)} here; "
            "on another file system perhaps another); pass --source-lang and --target-lang after '--'")


def missing_prepared_files(data, src, tgt, subsets):
    """What fairseq's translation task loads from the prepared directory ``data`` for ``subsets``
    and does not find there, in the order it loads them: both dictionaries, then each subset's two
    sides (.idx and .bin, or a raw text file; the pair's name in either language order)."""
    def there(name):
        path = os.path.join(data, name)
        return os.path.isfile(path) or (os.path.isfile(path + ".idx") and os.path.isfile(path + ".bin"))

    missing = [name for name in (f"dict.{src}.txt", f"dict.{tgt}.txt") if not os.path.isfile(os.path.join(data, name))]
    for subset in subsets:
        pair = next((p for p in (f"{src}-{tgt}", f"{tgt}-{src}") if there(f"{subset}.{p}.{src}")), f"{src}-{tgt}")
        missing += [f"{subset}.{pair}.{lang}.idx / .bin" for lang in (src, tgt) if not there(f"{subset}.{pair}.{lang}")]
    return missing


def names_another_user_dir(argv):
    """Whether fairseq-train's ``argv`` loads another plugin than this package (its models are then
    not built beforehand: a second plugin cannot be imported beside this one)."""
    return any(word == "--user-dir" and os.path.realpath(value) != os.path.realpath(USER_DIR)
               for word, value in zip(argv, argv[1:]))


def add_hardware_options(parser):
    """Options shared by this command and every reproduce script."""
    parser.add_argument("--launcher", choices=["spawn", "torchrun", "slurm"], default="spawn",
                        help="spawn: one node; torchrun: run the same command on every node with its "
                             "--node-rank; slurm: fairseq's own SLURM support (the command is an srun line)")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs per node (default: the setting's)")
    parser.add_argument("--nnodes", type=int, default=1, help="nodes (the effective batch counts all of them)")
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=29500, help="torchrun master port / slurm --distributed-port")
    parser.add_argument("--max-tokens-per-gpu", type=int, default=16384, help="modern setting's cap")
    parser.add_argument("--reference", choices=sorted(SETTINGS), help="modern: whose effective batch to keep")
    parser.add_argument("--allow-batch-change", action="store_true",
                        help="train even if the hardware cannot keep the paper's effective batch")


def _this_machine_only(address):
    """An address no other node reaches: localhost, a loopback (127.0.0.0/8: Debian's hostname
    entry is 127.0.1.1, ::1) or the any-address. Literal addresses only: no name is looked up."""
    if address == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def check_launch(launcher, nnodes, node_rank, master_addr):
    """A multi-node launch that cannot rendezvous is refused before anything starts."""
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise BatchError(f"--node-rank {node_rank} with --nnodes {nnodes}: ranks are 0 .. nnodes - 1")
    if nnodes > 1 and launcher == "torchrun" and _this_machine_only(master_addr):
        raise BatchError(f"--nnodes {nnodes} with torchrun needs --master-addr set to node 0's address, reachable "
                         f"from every node (not {master_addr})")
    if node_rank > 0 and launcher != "torchrun":
        raise BatchError(f"--node-rank {node_rank} is for --launcher torchrun (run on every node); with {launcher} "
                         "run the command once, on one node" + (" (srun starts every node's tasks)"
                                                               if launcher == "slurm" else ""))
    if nnodes > 1 and launcher == "spawn":
        raise BatchError("--nnodes > 1 needs --launcher torchrun (the same command on every node) or slurm")


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="a path, or <paper>/<row>[.args] among the shipped configs (fairseq_ctx/configs)")
    parser.add_argument("setting", choices=[*SETTINGS, "modern", "cpu"])
    parser.add_argument("--data", required=True)
    parser.add_argument("--save-dir", required=True)
    add_hardware_options(parser)
    parser.add_argument("--backend", default=None, help="--distributed-backend (gloo for CPU processes)")
    parser.add_argument("--dry-run", action="store_true", help="print the command only")
    parser.add_argument("--skip-checkpoint-check", action="store_true",
                        help="train even with options after '--' that leave the paper's evaluation or a resumption "
                             "without its checkpoints (a throughput or debugging run no one evaluates or resumes)")
    parser.add_argument("--allow-changed-options", default=None, metavar="OPTION[,OPTION] | all",
                        help="resume even from a checkpoint trained with other model options (or another language "
                             "direction) than this command's: the named ones, without dashes in front (e.g. "
                             "context-stop-gradient,source-lang), or 'all' (a deliberate change, e.g. training the "
                             f"context after it was frozen); refused otherwise, exit status {REFUSED_RESUMPTION}")
    return parser


def split_extra(argv):
    """Everything after a literal '--' goes to fairseq-train unchanged."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, []


def checkpoint_options(extra):
    """The options among fairseq-train's extra arguments that move or rename the checkpoints
    (the checkpoint repair, averaging and evaluation read SAVE_DIR/checkpoint_last.pt)."""
    return [w.split("=")[0] for w in extra if w.split("=")[0] in ("--save-dir", "--checkpoint-suffix")]


def option_value(words, option):
    """The value fairseq-train takes for ``option`` (argparse: the last of '--opt v' / '--opt=v')."""
    value = None
    for i, word in enumerate(words):
        if word == option and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith(option + "="):
            value = word.split("=", 1)[1]
    return value


def option_int(words, option, default):
    try:
        return int(option_value(words, option))
    except (TypeError, ValueError):  # absent (fairseq's default), or a value fairseq rejects itself
        return default


# options that act on every start of the training, so on each automatic resumption too: the
# update count, lr schedule, optimizer state or data position would start over (for a
# fine-tuning start, fairseq's --finetune-from-model acts on the first launch only)
RESUMPTION_BREAKERS = {
    "--no-save-optimizer-state": "checkpoints without optimizer state resume at update 0 (lr warm-up and Adam "
                                 "state start over)",
    "--reset-optimizer": "every resumption would start the optimizer (and update count) over",
    "--reset-lr-scheduler": "every resumption would start the lr schedule over",
    "--reset-dataloader": "every resumption would start the epoch's data over",
    "--reset-meters": "every resumption would forget the best validation loss, so the next validation "
                      "overwrites checkpoint_best.pt whatever its loss",
    "--update-ordered-indices-seed": "a training resumed in a later epoch would group its batches with another "
                                     "seed than the uninterrupted training's (fairseq_ctx/tasks/"
                                     "translation_exact_resume.py)",
    "--restore-file": "every resumption would restart from that file instead of checkpoint_last.pt "
                      "(start from another model with --finetune-from-model, or --continue-once to keep "
                      "its optimizer state: both act on the first launch only)",
}


def interval_checkpoints_written(words):
    """How many checkpoint_E_U.pt fairseq-train writes at most: one at every multiple of
    --save-interval-updates up to --max-update, from --validate-after-updates on (fairseq_cli/
    train.py validate_and_save); None without both an interval and --max-update."""
    interval, max_update = option_int(words, "--save-interval-updates", 0), option_int(words, "--max-update", 0)
    if interval <= 0 or max_update <= 0:
        return None
    first = max(1, -(-option_int(words, "--validate-after-updates", 0) // interval))
    return max(0, max_update // interval - first + 1)


def _epochs_never_saved_and_validated(words):
    """(save interval, validate interval, max epoch) when no epoch up to --max-epoch is both
    saved and validated (so no epoch-end save writes checkpoint_best.pt), else None."""
    max_epoch = option_int(words, "--max-epoch", 0)
    save_every = max(1, option_int(words, "--save-interval", 1))
    validate_every = max(1, option_int(words, "--validate-interval", 1))
    if max_epoch > 0 and option_int(words, "--save-interval-updates", 0) <= 0 \
            and math.lcm(save_every, validate_every) > max_epoch:
        return save_every, validate_every, max_epoch
    return None


def checkpoint_conflict(words, settings=None):
    """What in a fairseq-train command (every word: config, setting, extra) would leave a
    resumption, or the evaluation ``settings`` (evaluation/defaults.py), without the checkpoint
    it reads; None if nothing. Found before training, not when the evaluation looks hours
    later. Follows fairseq_cli/train.py validate_and_save and checkpoint_utils.save_checkpoint."""
    flags = {word.split("=")[0] for word in words}
    if "--no-save" in flags:
        return "--no-save: no checkpoint is written, so there is nothing to evaluate"
    if "--no-last-checkpoints" in flags:
        return ("--no-last-checkpoints: a resumption (and the checkpoint repair before it) reads "
                "checkpoint_last.pt")
    for option, why in RESUMPTION_BREAKERS.items():
        if option in flags and not (option == "--restore-file"
                                    and option_value(words, option) == "checkpoint_last.pt"):  # fairseq's default
            return f"{option}: {why}"
    if settings is None:
        return None
    validate_after = option_int(words, "--validate-after-updates", 0)
    max_update = option_int(words, "--max-update", 0)
    if settings.average_last:
        n = settings.average_last
        # fairseq: --keep-interval-updates / --keep-last-epochs K > 0 delete all but the newest K
        interval = option_int(words, "--save-interval-updates", 0)
        if interval > 0:  # the average then takes checkpoint_E_U.pt (evaluation/average.py)
            keep = option_int(words, "--keep-interval-updates", -1)
            if 0 < keep < n:
                return (f"--keep-interval-updates {keep}: the evaluation averages the last {n} interval "
                        f"checkpoints, so at least {n} must be kept")
            written = interval_checkpoints_written(words)
            if written is not None:
                if written < n:
                    return (f"--max-update {max_update} with --save-interval-updates {interval}"
                            + (f" from --validate-after-updates {validate_after}" if validate_after else "")
                            + f" writes at most {written} interval checkpoints; the evaluation averages the "
                            f"last {n} (lower --save-interval-updates for a short run)")
        elif "--no-epoch-checkpoints" in flags:
            return (f"--save-interval-updates {interval} with --no-epoch-checkpoints: no numbered "
                    f"checkpoint is written; the evaluation averages the last {n}")
        elif 0 < (keep_epochs := option_int(words, "--keep-last-epochs", -1)) < n:
            return f"--keep-last-epochs {keep_epochs}: the evaluation averages the last {n} epoch checkpoints"
    elif settings.checkpoint == "checkpoint_best.pt":
        # checkpoint_best.pt is written where a save meets a validation
        if "--disable-validation" in flags:
            return "--disable-validation: no checkpoint_best.pt is written (it is chosen by validation loss)"
        if 0 < max_update < validate_after:  # fairseq validates from update validate_after on
            return (f"--validate-after-updates {validate_after} with --max-update {max_update}: no validation, "
                    "so no checkpoint_best.pt")
        # (interval saves validate too; a --max-update stop saves and validates only if it comes
        # before --max-epoch: then warned, not refused)
        never = _epochs_never_saved_and_validated(words)
        if never and max_update <= 0:
            return (f"--save-interval {never[0]} / --validate-interval {never[1]} with --max-epoch {never[2]}: "
                    "no epoch is both saved and validated, so no checkpoint_best.pt "
                    "(fairseq does not save when --max-epoch ends the training)")
    return None


# stops that fairseq-train does not see as finished when started again on the checkpoints
# they left (fairseq_cli/train.py: should_stop_early keeps its count in function attributes,
# not in the checkpoint; the time limit is checked only after an update)
_STOPS_THAT_A_RELAUNCH_FORGETS = (
    ("--patience", "fairseq does not save the early-stopping count, so starting this command again on a "
                   "training that stopped early counts its validations afresh and trains on (relaunch only a "
                   "training that did not finish)"),
    ("--stop-time-hours", "starting this command again on a training that stopped at the time limit takes one "
                          "more update and overwrites checkpoint_last.pt (and checkpoint_best.pt if that update "
                          "validates better; relaunch only a training that did not finish)"),
)


def _positive(value):
    try:
        return value is not None and float(value) > 0
    except ValueError:
        return False  # fairseq's parser names it


def checkpoint_warnings(words, settings=None):
    """What in a fairseq-train command keeps the evaluation's checkpoints but may not be what
    was meant; each a line to print before training."""
    out = [f"{option} {option_value(words, option)}: {what}" for option, what in _STOPS_THAT_A_RELAUNCH_FORGETS
           if _positive(option_value(words, option))]
    if settings is None:
        return out
    interval, max_update = option_int(words, "--save-interval-updates", 0), option_int(words, "--max-update", 0)
    if settings.average_last and interval_checkpoints_written(words) == settings.average_last:
        out.append(f"exactly {settings.average_last} interval checkpoints would be written: fairseq writes "
                   "none at an update that ends an epoch (checkpoint_last.pt stands in for the final one "
                   f"only), so one such coincidence leaves the average of the last {settings.average_last} "
                   "without enough (give --max-update a margin)")
    never = _epochs_never_saved_and_validated(words)
    if not settings.average_last and never and max_update > 0:
        out.append(f"--save-interval {never[0]} / --validate-interval {never[1]} with --max-epoch {never[2]}: no "
                   f"epoch is both saved and validated, so a checkpoint_best.pt exists only if --max-update "
                   f"{max_update} comes first")
    max_epoch, save_every = option_int(words, "--max-epoch", 0), max(1, option_int(words, "--save-interval", 1))
    if not settings.average_last and max_epoch > 0 and interval <= 0 and max_epoch % save_every:
        out.append(f"--save-interval {save_every} with --max-epoch {max_epoch}: the last {max_epoch % save_every} "
                   "epoch(s) are trained but never saved, so the evaluated checkpoint ignores them")
    return out


# exit status of a refused resumption (a requeue wrapper can tell it from a failed training)
REFUSED_RESUMPTION = 3
# how long a node other than node 0 waits for node 0 to repair a cut-off checkpoint_last.pt
NODE_WAIT_S = 300
_node_wait_sleep = time.sleep  # (a test replaces this one, not time.sleep for the whole process)
# SAVE_DIR/STARTS_RECORD: every fairseq-train this command started there (a requeued job's history:
# the command, its data and direction, the resumption and what changed at each start, and how each
# ended), one JSON line each; the evaluation reads the direction from it (evaluation/direction.py)


def _utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def new_start():
    """What identifies a start in STARTS_RECORD: its id (the line of its end has the same) and time."""
    return {"start_id": uuid.uuid4().hex, "started": _utc_now()}


def _jsonable(value):
    """``value`` as strict JSON takes it: tuples and lists as lists, inf / nan as strings, any other
    object (an Enum, an omegaconf container's repr) as its str."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def record_start(save_dir, entry):
    """Append ``entry`` as one JSON line to SAVE_DIR/STARTS_RECORD (node 0 only: the directory is
    shared): one O_APPEND write of the whole line, synced. Best effort: a record that cannot be
    written (a full disk, a file system without fsync) is warned of and the training goes on."""
    path = os.path.join(save_dir, STARTS_RECORD)
    try:
        line = (json.dumps(_jsonable(entry), sort_keys=True, allow_nan=False) + "\n").encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            try:
                os.fsync(fd)
            except OSError:  # (some network / FUSE file systems)
                pass
        finally:
            os.close(fd)
    except (OSError, ValueError) as error:
        print(f"train: warning: {path}: this start's record not written ({error})", file=sys.stderr, flush=True)


def _job():
    """The scheduler's names for this start (a requeued job keeps its id and counts its restarts)."""
    return {name: os.environ[name] for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
                                                "SLURM_RESTART_COUNT", "SLURM_JOB_NODELIST") if name in os.environ}


def _file_state(path):
    try:
        state = os.stat(path)
    except OSError:
        return None
    return state.st_ino, state.st_size, state.st_mtime_ns


def _saved_since(save_dir, cmd, before, done=None):
    """The update count of a whole checkpoint_last.pt this start saved (not the file ``before``, its
    _file_state at the start: no clock compared), else None (none saved, cut off, named with
    --checkpoint-suffix, or unreadable: the record never changes how the start ends)."""
    if done is not None:
        return done
    last = os.path.join(save_dir, LAST)
    try:
        if option_value(cmd, "--checkpoint-suffix") or _file_state(last) in (None, before):
            return None
        return stored_updates(last) if written_to_the_end(last) else None
    except Exception:  # noqa: BLE001
        return None


def _train_recorded(args, cmd, world, resumed):
    """fairseq-train ``cmd``, recorded in SAVE_DIR/STARTS_RECORD on node 0: a line before it starts and
    one when it ends, is interrupted (an exception here, e.g. Ctrl-C) or this driver is sent SIGTERM
    (a scheduler's time limit or scancel; only where SIGTERM has its default action in the main
    thread: the line is written, then the signal takes that default course as before).
    -> the exit status (0 for an exit at shutdown after the training finished)."""
    recording = args.node_rank == 0
    last = os.path.join(args.save_dir, LAST)
    before, start = _file_state(last), new_start()
    ended = []

    def end(**what):
        if recording and not ended:
            record_start(args.save_dir, {"event": "end", **start, "ended": _utc_now(), **what})
            ended.append(what)

    def on_signal(signum, frame):
        signal.signal(signum, signal.SIG_IGN)  # a second one while the line is written waits for it
        # within the scheduler's grace period: whether checkpoint_last.pt changed, not its update (a read)
        end(signal=signal.Signals(signum).name, checkpoint_last_changed=_file_state(last) not in (None, before))
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    # someone else's SIGTERM handling (an sbatch `trap '' TERM`, a Python handler) is left alone
    handled = (recording and threading.current_thread() is threading.main_thread()
               and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    if handled:
        signal.signal(signal.SIGTERM, on_signal)
    if recording:
        record_start(args.save_dir, {"event": "start", **start, "host": socket.gethostname(), "pid": os.getpid(),
                                     "job": _job(), "command": cmd, "world_size": world, "nnodes": args.nnodes,
                                     "resumed": resumed, **training_direction(cmd)})
    try:
        # python_env: torchrun's `-m` workers would import a fairseq_ctx in the working directory
        raw = subprocess.call(cmd, pass_fds=held_fds(args.save_dir), env=python_env())
        done = finished_update(args.save_dir, cmd) if raw and args.nnodes == 1 else None
        if done is not None:  # it was not finished before this start: an exit at shutdown, after the last save
            print(f"train: fairseq-train exited {raw} after the training had finished ({args.save_dir}/"
                  f"checkpoint_last.pt whole at update {done}, --max-update): taken as finished; see "
                  "finished_before_the_exit in fairseq_ctx/checkpoint_repair.py", file=sys.stderr, flush=True)
        code = 0 if done is not None else raw
        end(fairseq_exit=raw, exit_code=code, taken_as_finished=done is not None,
            checkpoint_last_update=_saved_since(args.save_dir, cmd, before, done))
        return code
    except BaseException as error:
        end(interrupted=type(error).__name__, checkpoint_last_update=_saved_since(args.save_dir, cmd, before))
        raise
    finally:
        if handled and signal.getsignal(signal.SIGTERM) is on_signal:  # not someone else's, set meanwhile
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def finished_update(save_dir, cmd):
    """The update of SAVE_DIR/checkpoint_last.pt where it is whole and at the --max-update of
    fairseq-train ``cmd`` (a finished training), else None."""
    return finished_at(save_dir, option_int(cmd, "--max-update", 0))


def wait_for_node_0(save_dir, node_rank):
    """A node other than node 0 reads the checkpoint_last.pt node 0 may be repairing: it waits
    (5 s steps, up to NODE_WAIT_S) for a whole one, so that every node judges the same file before
    deciding whether the training has finished or how it resumes (nodes deciding apart would
    leave the others waiting at the rendezvous)."""
    last, waited = os.path.join(save_dir, LAST), 0
    while node_rank > 0 and os.path.isfile(last) and not written_to_the_end(last):
        if waited >= NODE_WAIT_S:
            print(f"train: node {node_rank}: {last} still cut off after {NODE_WAIT_S} s (node 0 repairs it): judged "
                  "as it is; if node 0 decides otherwise, this node waits at the rendezvous", file=sys.stderr,
                  flush=True)
            break
        _node_wait_sleep(5)
        waited += 5


def _allowed_changes(value):
    """--allow-changed-options: None for 'all', else the named options (context-init or
    context_init; --context-init as --allow-changed-options=--context-init)."""
    names = {name.strip().lstrip("-").replace("-", "_") for name in value.split(",") if name.strip()}
    return None if {name.lower() for name in names} == {"all"} else names


def direction_change(checkpoint, cmd, options_change):
    """The language direction's change of a resumption from ``checkpoint`` by fairseq-train ``cmd``,
    as (option, in the checkpoint, now): the direction it was trained in (evaluation.direction.
    trained_direction: its options, our records beside it, its training data) against the one
    ``cmd`` trains (trained_pair). Neither this driver nor the tables name the languages, so the
    stored options compare None with None when the data's direction changed (both directions
    prepared, the other's --data given with the same --save-dir; with a joined dictionary the
    tensors fit); and -s / -t given at one start only is no change where fairseq infers the same.
    Where either direction is not known: ``options_change``, the stored options' comparison, less
    languages named now where the stored ones are empty and fairseq would infer the same here.
    -> (the changes, where the checkpoint's direction was read, for a message; None where not)."""
    _, named, pairs = language_choice(cmd)
    then, now = trained_direction(checkpoint, fairseq_train_argv(cmd)[0]), named or (pairs[0] if pairs else None)
    if then is None or then.guessed or now is None:
        if named and pairs == [named]:  # naming what fairseq infers from this data changes nothing
            options_change = [c for c in options_change if not (c[0] in ("source_lang", "target_lang")
                                                                and c[1] is None)]
        return options_change, None
    return ([(name, was, is_now) for name, was, is_now in zip(("source_lang", "target_lang"), then[:2], now)
             if was != is_now], f"{then.src} -> {then.tgt}, {then.whence}")


def _say_resumption(args, cmd, world, dry_run=False):
    """Before fairseq-train resumes: where from, and whether its batches go on as the uninterrupted
    training's (fairseq_ctx/resumptions.py; the quality-compare and reproduce records read the same
    from the log afterwards). Refused (exit REFUSED_RESUMPTION) when the checkpoint was trained with
    other model options or another language direction than ``cmd``'s and the optimizer would go on,
    unless --allow-changed-options names the change: fairseq would resume another model's training
    from it without a word. ``world``: the processes of the whole run (torchrun gives fairseq its
    world size at run time, not on the command line). Returns what the start's record keeps: None
    where nothing is resumed, else {"from": the resumption (``resumption_ahead``), "options_changed":
    ``options_changed``'s lists or None with "not_compared": why, "allowed": --allow-changed-options}."""
    from ..resumptions import describe_options_changed, describe_resumption_ahead, options_changed, resumption_ahead

    resumption = resumption_ahead(args.save_dir, cmd, args.data)
    if resumption is None:
        return None
    allowed = set() if args.allow_changed_options is None else _allowed_changes(args.allow_changed_options)
    record = {"from": resumption, "options_changed": None, "allowed": "all" if allowed is None else sorted(allowed)}
    say = args.node_rank == 0
    if say:
        for line in describe_resumption_ahead(resumption):
            print(f"train: {line}", file=sys.stderr, flush=True)
    try:
        changed = options_changed(resumption["checkpoint"], fairseq_train_argv(cmd), world_size=world)
    except ValueError as error:
        if say:
            print(f"train: warning: the options were not compared with the checkpoint's: {error}", file=sys.stderr,
                  flush=True)
        return {**record, "not_compared": str(error)}
    changed["data"], trained_in = direction_change(resumption["checkpoint"], cmd, changed["data"])
    decisive = changed["model"] + changed["data"]
    refused = [c for c in decisive if allowed is not None and c[0] not in allowed]
    if say and allowed:
        unknown = sorted(allowed - {c[0] for c in decisive})
        if unknown:
            print(f"train: warning: --allow-changed-options names {', '.join(unknown)}: not changed (or not "
                  "an option compared); nothing allowed for it", file=sys.stderr, flush=True)
    if refused and resumption["optimizer_resumed"]:
        says_direction = trained_in and any(c[0] in ("source_lang", "target_lang") for c in refused)
        print(f"train: {resumption['checkpoint']} was trained with other model options (or language direction) "
              f"than this command's: {describe_options_changed(refused)}"
              + (f" (trained {trained_in})" if says_direction else "") + "; resuming would go on training another "
              f"model from it (another config in this --save-dir?). Use another --save-dir, or --allow-changed-options "
              f"{','.join(c[0] for c in refused)} to resume with the change (on every node)"
              + ("" if dry_run else "; nothing was started"), file=sys.stderr, flush=True)
        sys.exit(REFUSED_RESUMPTION)
    if say:
        for kind, what in (("model", changed["model"]), ("data", changed["data"]), ("start", changed["start"]),
                           ("training", changed["training"])):
            if what:
                print(f"train: warning: resuming with other {kind} options than the checkpoint's: "
                      f"{describe_options_changed(what)}"
                      + (f" (trained {trained_in})" if kind == "data" and trained_in else "")
                      + (" (the loaded weights replace what they initialise)" if kind == "start" else
                         ": from here on another training than the checkpoint's"), file=sys.stderr, flush=True)
    return {**record, "options_changed": changed}


def main(argv=None):
    argv, extra = split_extra(argv)
    args = build_parser().parse_args(argv)
    if args.allow_changed_options and (args.allow_changed_options.endswith(".args")
                                       or os.path.exists(args.allow_changed_options)):
        sys.exit(f"train: --allow-changed-options takes option names or 'all', not {args.allow_changed_options!r} "
                 "(the config?)")
    moved = checkpoint_options(extra)
    if moved:
        sys.exit(f"train: {moved[0]} after '--' is not allowed: pass --save-dir before '--' "
                 "(the checkpoint repair before a resumption reads SAVE_DIR/checkpoint_last.pt)")
    args.config = config_path(args.config)
    if not os.path.isfile(args.config):
        sys.exit(f"train: config not found: {args.config} (a path, or <paper>/<row>.args among {CONFIGS})")
    if os.path.basename(args.config) == "train.args" and \
            os.path.realpath(os.path.dirname(os.path.dirname(args.config))) == os.path.realpath(CONFIGS):
        rows = sorted(name for name in os.listdir(os.path.dirname(args.config))
                      if name.endswith(".args") and name != "train.args")
        sys.exit(f"train: {args.config} is the paper's optimiser and schedule, read before every row's config; "
                 f"name a row's config (its model){': ' + ', '.join(rows) if rows else ''}")
    try:
        check_launch(args.launcher, args.nnodes, args.node_rank, args.master_addr)
        hw = hardware(args.setting, paper_of(args.config), args.gpus, args.nnodes, args.max_tokens_per_gpu,
                      args.reference, allow_batch_change=args.allow_batch_change)
        cmd = build_command(args.config, args.setting, args.data, args.save_dir, extra, args.launcher,
                            node_rank=args.node_rank, master_addr=args.master_addr, master_port=args.master_port,
                            backend=args.backend, hw=hw)
    except (BatchError, FileNotFoundError) as error:
        sys.exit(f"train: {error}")
    from ..evaluation.defaults import PAPER_DEFAULTS

    paper = paper_of(args.config)
    conflict = checkpoint_conflict(cmd, PAPER_DEFAULTS.get(paper))
    if conflict and not args.skip_checkpoint_check:
        sys.exit(f"train: {conflict}" + (f" (as fairseq-ctx-evaluate --paper {paper} reads them)"
                                         if paper in PAPER_DEFAULTS else "")
                 + "; --skip-checkpoint-check trains anyway")
    for warning in checkpoint_warnings(cmd, PAPER_DEFAULTS.get(paper)):
        print(f"train: warning: {warning}", file=sys.stderr, flush=True)
    for warning in [*setting_warnings(args.setting, paper, args.gpus, args.reference), language_pair_warning(cmd)]:
        if warning:
            print(f"train: warning: {warning}", file=sys.stderr, flush=True)
    if hw.effective is not None:
        print(f"effective batch: {hw.effective} tokens ({hw.describe()})", flush=True)
    elif cpu_default_batch(hw, [*hardware_args(hw), *model_args(args.config), *extra]):
        print(f"train: the cpu setting: --max-tokens {CPU_MAX_TOKENS} x {hw.world} process(es) (no batch given "
              "after '--' or in the config)", flush=True)
    print(shlex.join(cmd), flush=True)
    train_argv = fairseq_train_argv(cmd)
    problem = data_problem(cmd)
    if problem:  # (a test's fairseq-train stand-in may need no data: said, not refused)
        print(f"train: warning: --data {problem}: fairseq-train will stop on it before training (prepare the data "
              "with fairseq-ctx-prepare-data, docs/experiments.md)", file=sys.stderr, flush=True)
    elif not names_another_user_dir(train_argv):
        # parsed and built as fairseq-train would (meta device; ~3 s with fairseq's import): one line, not N
        # processes' tracebacks
        from .params import model_build_error

        error = model_build_error(train_argv)
        if error:
            sys.exit(f"train: fairseq-train would stop before its first update: {error}"
                     + ("" if args.dry_run else "; nothing was started"))
    if args.dry_run:
        # what the real start would do first: leave a finished training alone, repair a cut-off last
        done = finished_update(args.save_dir, cmd)
        last = os.path.join(args.save_dir, LAST)
        if done is not None:
            print(f"train: {last} is at update {done} (--max-update): a real start would not train again",
                  file=sys.stderr, flush=True)
        elif os.path.isfile(last) and not written_to_the_end(last):
            print(f"train: {last} is cut off: a real start first replaces it by the newest whole checkpoint "
                  "and resumes from that", file=sys.stderr, flush=True)
        else:
            _say_resumption(args, cmd, hw.world, dry_run=True)
        return
    os.makedirs(args.save_dir, exist_ok=True)
    lock = RunLock(args.save_dir, "train.lock")
    if args.node_rank == 0:  # one node locks and repairs the shared directory; the others would race it
        try:  # a resubmitted job while the first still trains (the training holds it too: pass_fds)
            lock.acquire()
        except RunInUse as error:
            sys.exit(f"train: {error}: a training is running there; nothing was started")
        repair_before_resuming(args.save_dir, log=lambda message: print(f"train: {message}", file=sys.stderr,
                                                                         flush=True))
    # every node, on the same whole file: with several nodes too, a relaunched finished training
    # (a requeued job) would take one more update and overwrite checkpoint_last / _best
    wait_for_node_0(args.save_dir, args.node_rank)
    done = finished_update(args.save_dir, cmd)
    if done is not None:  # fairseq-train would take one more update and overwrite the checkpoints
        print(f"train: {args.save_dir}/checkpoint_last.pt is at update {done} (--max-update): the training has "
              "finished; not started again", file=sys.stderr, flush=True)
        lock.release()
        sys.exit(0)
    try:  # every node: each would refuse the same checkpoint and command
        resumed = _say_resumption(args, cmd, hw.world)
    except SystemExit:
        lock.release()  # (a refusal leaves the directory to the next start at once, in-process too)
        raise
    try:
        code = _train_recorded(args, cmd, hw.world, resumed)
    finally:
        lock.release()  # (at the process's exit anyway; a caller in-process may start the next one)
    sys.exit(code)


if __name__ == "__main__":
    main()
