"""Build (and run) the fairseq-train command of one table row under one hardware setting.

    python -m fairseq_ctx.reproduce.train CONFIG SETTING --data BIN --save-dir DIR [--dry-run] [-- extra]

CONFIG is configs/<paper>/<row>.args; configs/<paper>/train.args (the paper's optimiser,
schedule and training length) is read first, then the row, then the SETTING (hardware /
batch), then extra arguments: later options override earlier ones (argparse), so a
setting always decides --max-tokens / --update-freq / precision / world size.

Settings (effective batch = GPUs x max-tokens x update-freq):
  p40     8 GPUs x 4096 tokens, fp32 (Yang / Wang: "eight P40 GPUs, 4096 tokens each")
  cao     2 GPUs x 2048 tokens x update-freq 12, fp32 (Cao: two 1080 Ti, accumulation 12)
  iida    2 GPUs x 2000 tokens, fp32 (Iida: NAG lr 0.005, 20 epochs in configs/iida2019/train.args)
  modern  bf16 on --gpus G (default: all visible), the SAME effective batch as the paper's
          setting (--reference, default the paper's own), max-tokens per GPU <= --max-tokens-per-gpu
  cpu     --cpu, fp32, 1 process (tests, smoke runs)

Launchers: ``spawn`` (default): fairseq-train --distributed-world-size N on one node (fairseq
spawns one process per GPU). ``torchrun``: torchrun --nproc-per-node N [--nnodes M --node-rank R
--master-addr HOST --master-port P] runs fairseq_ctx.reproduce.distributed_entry, which hands
each process its rank (this also runs on CPU with the gloo backend; see docs/notes/experiments.md).
Multi-node: run the same torchrun command on every node with its --node-rank.
"""
import argparse
import math
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(ROOT, "configs")
USER_DIR = os.path.join(ROOT, "fairseq_ctx")

# name -> (GPUs, max tokens per GPU, update freq, precision)
SETTINGS = {
    "p40": (8, 4096, 1, "fp32"),
    "cao": (2, 2048, 12, "fp32"),
    "iida": (2, 2000, 1, "fp32"),
}
PAPER_SETTING = {"yang2019": "p40", "wang2019": "p40", "cao": "cao", "iida2019": "iida"}


def read_args_file(path):
    """An args file: options separated by whitespace, '#' starts a comment."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"config not found: {path}")
    words = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            words += shlex.split(line.split("#", 1)[0])
    return words


def paper_of(config):
    return os.path.basename(os.path.dirname(os.path.abspath(config)))


def model_args(config):
    """train.args of the config's paper (if any) + the row's own args."""
    common = os.path.join(os.path.dirname(os.path.abspath(config)), "train.args")
    words = read_args_file(common) if os.path.exists(common) and os.path.abspath(common) != os.path.abspath(config) else []
    return words + read_args_file(config)


def modern_batch(reference, gpus, max_tokens_per_gpu):
    """Same effective batch as ``reference`` on ``gpus`` GPUs with at most
    ``max_tokens_per_gpu`` tokens each: (max_tokens, update_freq)."""
    ref_gpus, ref_tokens, ref_freq, _ = SETTINGS[reference]
    effective = ref_gpus * ref_tokens * ref_freq
    update_freq = max(1, math.ceil(effective / (gpus * max_tokens_per_gpu)))
    return effective // (gpus * update_freq), update_freq


def setting_args(setting, paper=None, gpus=None, max_tokens_per_gpu=16384, reference=None):
    """(world size, fairseq args) of a setting."""
    if setting == "cpu":  # --gpus N = N CPU processes (torchrun launcher, gloo)
        return gpus or 1, ["--cpu"]
    if setting == "modern":
        reference = reference or PAPER_SETTING.get(paper, "p40")
        gpus = gpus or _visible_gpus() or 1
        max_tokens, update_freq = modern_batch(reference, gpus, max_tokens_per_gpu)
        return gpus, ["--max-tokens", str(max_tokens), "--update-freq", str(update_freq), "--bf16"]
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}: one of {', '.join([*SETTINGS, 'modern', 'cpu'])}")
    world, tokens, freq, _ = SETTINGS[setting]
    world = gpus or world
    if gpus and gpus != SETTINGS[setting][0]:
        # keep the paper's effective batch on a different GPU count
        freq = max(1, SETTINGS[setting][0] * freq // gpus)
    return world, ["--max-tokens", str(tokens), "--update-freq", str(freq)]


def _visible_gpus():
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


def build_command(config, setting, data, save_dir, extra=(), launcher="spawn", gpus=None, nnodes=1,
                  node_rank=0, master_addr="127.0.0.1", master_port=29500, max_tokens_per_gpu=16384,
                  reference=None, backend=None, python=sys.executable):
    world, hardware = setting_args(setting, paper_of(config), gpus, max_tokens_per_gpu, reference)
    args = [data, "--user-dir", USER_DIR, *model_args(config), *hardware,
            "--save-dir", save_dir, "--required-batch-size-multiple", "8", *extra]
    if backend:
        args += ["--distributed-backend", backend]
    if setting == "cpu" and world > 1:
        # fairseq's pytorch_ddp wrapper passes device_ids=[device_id], which torch's DDP
        # rejects for CPU modules; legacy_ddp (fairseq's own bucketed all-reduce) works
        args += ["--ddp-backend", "legacy_ddp"]
    if launcher == "torchrun":
        return [python, "-m", "torch.distributed.run", "--nproc-per-node", str(world), "--nnodes", str(nnodes),
                "--node-rank", str(node_rank), "--master-addr", master_addr, "--master-port", str(master_port),
                "-m", "fairseq_ctx.reproduce.distributed_entry", *args]
    if launcher != "spawn":
        raise ValueError(f"unknown launcher {launcher!r} (spawn or torchrun)")
    if world > 1:
        args += ["--distributed-world-size", str(world)]
    return [python, "-m", "fairseq_cli.train", *args]


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", help="configs/<paper>/<row>.args")
    parser.add_argument("setting", choices=[*SETTINGS, "modern", "cpu"])
    parser.add_argument("--data", required=True)
    parser.add_argument("--save-dir", required=True)
    parser.add_argument("--launcher", choices=["spawn", "torchrun"], default="spawn")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs per node (default: the setting's)")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=29500)
    parser.add_argument("--max-tokens-per-gpu", type=int, default=16384, help="modern setting's cap")
    parser.add_argument("--reference", choices=sorted(SETTINGS), help="modern: whose effective batch to keep")
    parser.add_argument("--backend", default=None, help="--distributed-backend (gloo for CPU processes)")
    parser.add_argument("--dry-run", action="store_true", help="print the command only")
    return parser


def split_extra(argv):
    """Everything after a literal '--' goes to fairseq-train unchanged."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1:]
    return argv, []


def main(argv=None):
    argv, extra = split_extra(argv)
    args = build_parser().parse_args(argv)
    cmd = build_command(args.config, args.setting, args.data, args.save_dir, extra, args.launcher, args.gpus,
                        args.nnodes, args.node_rank, args.master_addr, args.master_port, args.max_tokens_per_gpu,
                        args.reference, args.backend)
    print(shlex.join(cmd), flush=True)
    if args.dry_run:
        return
    os.makedirs(args.save_dir, exist_ok=True)
    sys.exit(subprocess.call(cmd))


if __name__ == "__main__":
    main()
