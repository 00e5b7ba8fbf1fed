"""The command line: ``fairseq-ctx-benchmark`` (``scripts/benchmark.py`` in a checkout)."""
from __future__ import annotations

import argparse
import shlex
import sys
from typing import List, Optional, Sequence, Tuple

import torch

from ..atomic import atomic_write
from ..families import family_of as arch_family
from ..families import first_of_family as first_baselines
from .report import markdown_report, write_json
from .run import MINIMUM as MINIMUM_OF_FIELD
from .run import BenchConfig, run_benchmark
from .systems import DIM_OVERRIDES, SystemSpec, resolve_systems


CLI_DESCRIPTION = """Speed / memory benchmark of fairseq-ctx architectures against stock fairseq baselines.

Example (ratios of the context-aware Transformer to the stock Transformer, and of the
multi-hop LSTM to the stock LSTM):

    fairseq-ctx-benchmark \\
        --baseline "transformer=--arch transformer" --baseline "lstm=--arch lstm" \\
        --system "ctx=--arch transformer_context_aware --encoder-context deep_global+deep" \\
        --system "multihop@lstm=--arch lstm_multihop" \\
        --dims tiny --src-lens 20 50 100 --device cpu --json out.json --markdown out.md

``NAME=ARGS``: ARGS are fairseq-train model options (parsed by fairseq's own training
parser with ``--user-dir fairseq_ctx``). Which baseline a system is compared with: the one
its name names (``NAME@BASELINE``), else the first baseline of its model family (an
``--arch lstm*`` is of the lstm family, a ``transformer*_big`` arch of the transformer_big
family, any other arch of the transformer family: fairseq_ctx/families.py, as in
fairseq-ctx-quality-compare; of several baselines of a family, one of the arch ours are built
on first), else the first
baseline (with a warning). Without ``--baseline`` the stock archs of the systems' families
are assumed (``transformer=--arch transformer``, ``lstm=--arch lstm``,
``transformer_big=--arch transformer_vaswani_wmt_en_de_big``; only the transformer when
there is no system), and a line on stderr says so. ``--dims tiny`` / ``base`` sets the sizes per
model family (transformer-like / lstm-like), the same for systems and baselines; options
given in ARGS win. See fairseq_ctx/benchmarking/ and docs/notes/benchmark.md for the method.
(In a checkout, ``scripts/benchmark.py`` is the same command.)

Names must be distinct and non-empty, and the numeric options in range (source lengths
>= 2, --steps >= 1, ...): otherwise the command stops before any model is built, with one
error (exit status 2). A system that fails to build, train or decode is reported as FAILED
(with the systems compared with it if it is a baseline) and the others go on; the tables
are written, and the command then exits with status 1, saying on stderr how many failed;
so does a failed memory measurement (the other columns are reported). Exit status 0: every
system measured.
"""

# the stock baseline of each model family, assumed when no --baseline is given (our *_big archs
# are fairseq's transformer_vaswani_wmt_en_de_big plus what they add)
STOCK_BASELINES = {"transformer": "transformer=--arch transformer", "lstm": "lstm=--arch lstm",
                   "transformer_big": "transformer_big=--arch transformer_vaswani_wmt_en_de_big"}


def arch_of(args: str) -> Optional[str]:
    """The --arch of a NAME=ARGS spec's ARGS (None without one)."""
    words = shlex.split(args)
    for i, word in enumerate(words):
        if word in ("--arch", "-a") and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--arch="):
            return word.split("=", 1)[1]
    return None


def family_of(args: str) -> str:
    """The model family of a NAME=ARGS spec's arch, as fairseq-ctx-quality-compare reads it: lstm,
    transformer_big (a *_big arch keeps its 1024 / 4096 / 16-head sizes under --dims base: not to
    be timed against the base Transformer) or transformer."""
    return arch_family(arch_of(args) or "")


def pair_systems(baselines: Sequence[str], systems: Sequence[str]) -> Tuple[List[str], List[str], List[str]]:
    """The --baseline and --system texts with every system's baseline named
    (``NAME@BASELINE=ARGS``), and the lines that say what was assumed.

    A system without ``@BASELINE`` is compared with the first baseline of its model family,
    else with the first baseline; without any --baseline the stock archs of the families
    the systems need are assumed (STOCK_BASELINES). Raises ValueError for a spec that is
    not NAME=ARGS, has an empty name, or names a baseline that is not there."""
    base_specs = [SystemSpec.parse(text, True) for text in baselines]
    sys_specs = [SystemSpec.parse(text, False) for text in systems]
    lines = []
    assumed = not base_specs
    if assumed:
        needed = {family_of(s.args) if s.baseline is None else s.baseline for s in sys_specs}
        base_specs = [SystemSpec.parse(text, True) for family, text in STOCK_BASELINES.items()
                      if family in needed or family == "transformer" and not needed & set(STOCK_BASELINES)]
        for s in sys_specs:
            if s.name in STOCK_BASELINES and s.name in [b.name for b in base_specs]:
                raise ValueError(f"system {s.name!r} has the name of the assumed baseline "
                                 f"{STOCK_BASELINES[s.name]!r} (no --baseline was given): rename it, or give --baseline")
    names = [b.name for b in base_specs]
    first_of_family = first_baselines([(b.name, arch_of(b.args) or "") for b in base_specs])
    chosen = []
    for s in sys_specs:
        if s.baseline is None:
            family = family_of(s.args)
            s.baseline = first_of_family.get(family)
            if s.baseline is None:
                s.baseline = names[0]
                lines.append(f"warning: {s.name} ({family} family) is compared with {s.baseline}: no baseline of "
                             f"its family was given (name one with {s.name}@BASELINE=...)")
            else:
                chosen.append((s.name, s.baseline))
        elif s.baseline not in names:
            known = ", ".join(names)
            raise ValueError(f"system {s.name!r}: unknown baseline {s.baseline!r} (the baselines: {known}"
                             + ("; no --baseline was given, so these are the assumed stock ones" if assumed else "")
                             + ")")
    pairs = ", ".join(f"{name} -> {baseline}" for name, baseline in chosen)
    if assumed:
        lines.insert(0, "no --baseline given: assumed " + ", ".join(STOCK_BASELINES[family_of(b.args)]
                                                                for b in base_specs)
                     + (f" (the stock arch of each system's family); {pairs}" if chosen else ""))
    elif any(baseline != names[0] for _, baseline in chosen):
        lines.insert(0, f"baselines by model family (no @BASELINE): {pairs}")
    return ([f"{b.name}={b.args}" for b in base_specs],
            [f"{s.name}@{s.baseline}={s.args}" for s in sys_specs], lines)


def get_parser():
    p = argparse.ArgumentParser(description=CLI_DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", action="append", default=[], metavar="NAME=ARGS",
                   help="a stock baseline (repeatable). Default: the stock arch of each system's family "
                        "(transformer=--arch transformer, lstm=--arch lstm, transformer_big=--arch "
                        "transformer_vaswani_wmt_en_de_big), said on stderr")
    p.add_argument("--system", action="append", default=[], metavar="NAME[@BASELINE]=ARGS",
                   help="a system (repeatable, distinct names), compared with BASELINE, else with the first "
                        "baseline of its family (--arch lstm*: lstm; transformer*_big: transformer_big; others: "
                        "transformer), else the first")
    p.add_argument("--dims", choices=sorted(DIM_OVERRIDES), default="tiny")
    p.add_argument("--src-lens", type=int, nargs="+", default=[20, 50, 100],
                   help="source lengths in tokens, EOS included (each >= 2; default 20 50 100)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="default: cuda if available, else cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default=None,
                   help="autocast dtype; default bf16 on cuda, fp32 on cpu")
    p.add_argument("--steps", type=int, default=None, help="timed training steps (>= 1; default 10)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up training steps (>= 0; default 3)")
    p.add_argument("--batch-sentences", type=int, default=None,
                   help="sentences per training batch (default: max-tokens // src len)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="source tokens per batch when --batch-sentences is not given "
                        "(default 4096 on cuda, 1024 tiny / 512 base on cpu)")
    p.add_argument("--decode-batch-sentences", type=int, default=None,
                   help="sentences decoded per call (default: the training batch size)")
    p.add_argument("--decode-repeats", type=int, default=None, help="timed decoding calls (>= 1; default 3)")
    p.add_argument("--beams", type=int, nargs="+", default=[4, 1], help="beam sizes (each >= 1; default 4 1)")
    p.add_argument("--vocab", type=int, default=None, help="joint dictionary size (default 8000 tiny, 32000 base)")
    p.add_argument("--no-share-all-embeddings", action="store_true",
                   help="do not add --share-all-embeddings (added by default where accepted)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--at-update", type=int, default=0, metavar="U",
                   help="the updates done before the first warm-up step, at every source length: "
                        "before each step's forward the model is told the updates done "
                        "(fairseq's set_num_updates), so the timed steps are updates "
                        "U + warmup .. U + warmup + steps - 1 (the memory steps the first of them). "
                        "Options with a schedule in the updates read it (transformer_cross_agg's "
                        "--routing-ramp-updates N / --routing-stop-gradient-updates N: "
                        "U + warmup >= N times the model past its schedule); default 0, a fresh training")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch default)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--memory-isolation", choices=["system", "all", "job"], default="system",
                   help="peak memory is measured in fresh subprocesses: one per system "
                        "(default), one for all, or one per (system, source length)")
    p.add_argument("--memory-repeats", type=int, default=2,
                   help="measure each (system, length) this many times, report the last")
    p.add_argument("--profile", action="store_true",
                   help="print a torch.profiler table of 3 training steps per system and length")
    p.add_argument("--quick", action="store_true",
                   help="smoke settings: 2 steps after 1 warm-up, 1 decoding call after 1 warm-up")
    p.add_argument("--json", default=None, help="write the results as JSON here")
    p.add_argument("--markdown", default=None, help="write the report as markdown here")
    return p


# (option, minimum) of the numeric options; None (not given) is always accepted
# the options that set a BenchConfig field of the same name (run.MINIMUM: their lowest values)
MINIMUM = [(option, MINIMUM_OF_FIELD[option[2:].replace("-", "_")]) for option in (
    "--src-lens", "--steps", "--warmup", "--batch-sentences", "--max-tokens", "--decode-batch-sentences",
    "--decode-repeats", "--beams", "--vocab", "--at-update", "--threads", "--memory-repeats")]
WHY = {"--src-lens": " (tokens, EOS included)", "--vocab": " (more than the 4 special symbols)"}


def check_options(a: argparse.Namespace) -> Optional[str]:
    """The first option out of range, as an error message (None: all in range)."""
    for option, low in MINIMUM:
        value = getattr(a, option[2:].replace("-", "_"))
        values = value if isinstance(value, list) else [value]
        bad = [v for v in values if v is not None and v < low]
        if bad:
            return f"{option} must be >= {low}{WHY.get(option, '')}, got {' '.join(map(str, bad))}"
        if isinstance(value, list) and len(set(value)) < len(value):
            return f"{option} {' '.join(map(str, value))}: a value is given twice"
    return None


def exit_status(results: dict) -> int:
    """The command's exit status: 1 when any system failed (it is reported as FAILED) or the
    memory measurement failed (its columns are empty), else 0."""
    return 1 if results.get("failed") or results.get("memory_error") else 0


def main(argv=None):
    """Run the benchmark; returns the results (``exit_status`` makes the command's status of them).
    Bad options and system specs stop it with parser.error (exit status 2) before any model is built."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module=r"hydra(\..*)?")
    warnings.filterwarnings("ignore", message=r"(?s).*(ConfigStore schema|version_base|strict flag)")
    logging.basicConfig(level=logging.WARNING)
    for name in ("fairseq", "hydra", "fairseq_ctx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    parser = get_parser()
    a = parser.parse_args(argv)
    problem = check_options(a)
    if problem:
        parser.error(problem)
    try:
        baselines, systems, lines = pair_systems(a.baseline, a.system)
        specs = resolve_systems(baselines, systems)  # duplicate names
    except ValueError as error:
        parser.error(str(error))
    for line in lines:
        print(f"fairseq-ctx-benchmark: {line}", file=sys.stderr)
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = a.dtype or ("bf16" if device == "cuda" else "fp32")
    steps = a.steps if a.steps is not None else (2 if a.quick else 10)
    warmup = a.warmup if a.warmup is not None else (1 if a.quick else 3)
    repeats = a.decode_repeats if a.decode_repeats is not None else (1 if a.quick else 3)
    cfg = BenchConfig(
        dims=a.dims, src_lens=tuple(a.src_lens), device=device, dtype=dtype, steps=steps,
        warmup=warmup, batch_sentences=a.batch_sentences, max_tokens=a.max_tokens,
        decode_batch_sentences=a.decode_batch_sentences, decode_repeats=repeats,
        beams=tuple(a.beams), vocab=a.vocab, share_all_embeddings=not a.no_share_all_embeddings,
        seed=a.seed, memory=not a.no_memory, memory_isolation=a.memory_isolation,
        memory_repeats=a.memory_repeats, threads=a.threads, profile=a.profile,
        n_batches=2 if a.quick else 4, at_update=a.at_update,
    )

    def write(results):  # after every source length, and at the end
        if a.json:
            write_json(results, a.json)
        if a.markdown:
            with atomic_write(a.markdown) as f:
                f.write(markdown_report(results))

    results = run_benchmark(specs, cfg, on_progress=write)
    print(markdown_report(results))
    failed = results.get("failed", {})
    if failed:
        print(f"fairseq-ctx-benchmark: {len(failed)} of {len(specs)} systems failed ("
              + ", ".join(f"{name}: {f['where']}" for name, f in failed.items()) + ")"
              + ("; the others are in the report" if len(failed) < len(specs) else "") + "; exit status 1",
              file=sys.stderr)
    if results.get("memory_error"):
        print("fairseq-ctx-benchmark: the memory measurement failed (its columns are empty; the reason is in "
              "the report); exit status 1", file=sys.stderr)
    return results
