"""The command line: ``fairseq-ctx-benchmark`` (``scripts/benchmark.py`` in a checkout)."""
from __future__ import annotations

import argparse

import torch

from ..atomic import atomic_write
from .report import markdown_report, write_json
from .run import BenchConfig, run_benchmark
from .systems import DIM_OVERRIDES, resolve_systems


CLI_DESCRIPTION = """Speed / memory benchmark of fairseq-ctx architectures against stock fairseq baselines.

Example (ratios of the context-aware Transformer to the stock Transformer, and of the
multi-hop LSTM to the stock LSTM):

    fairseq-ctx-benchmark \\
        --baseline "transformer=--arch transformer" --baseline "lstm=--arch lstm" \\
        --system "ctx=--arch transformer_context_aware --encoder-context deep_global+deep" \\
        --system "multihop@lstm=--arch lstm_multihop" \\
        --dims tiny --src-lens 20 50 100 --device cpu --json out.json --markdown out.md

``NAME=ARGS``: ARGS are fairseq-train model options (parsed by fairseq's own training
parser with ``--user-dir fairseq_ctx``). A system is compared with the first baseline
unless its name carries ``@BASELINE``. ``--dims tiny`` / ``base`` sets the sizes per model
family (transformer-like / lstm-like), the same for systems and baselines; options given
in ARGS win. See fairseq_ctx/benchmarking/ and docs/notes/benchmark.md for the method.
(In a checkout, ``scripts/benchmark.py`` is the same command.)
"""


def get_parser():
    p = argparse.ArgumentParser(description=CLI_DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", action="append", default=[], metavar="NAME=ARGS",
                   help="a stock baseline (repeatable); the first is the default baseline")
    p.add_argument("--system", action="append", default=[], metavar="NAME[@BASELINE]=ARGS",
                   help="a system to compare with a baseline (repeatable)")
    p.add_argument("--dims", choices=sorted(DIM_OVERRIDES), default="tiny")
    p.add_argument("--src-lens", type=int, nargs="+", default=[20, 50, 100])
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="default: cuda if available, else cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default=None,
                   help="autocast dtype; default bf16 on cuda, fp32 on cpu")
    p.add_argument("--steps", type=int, default=None, help="timed training steps (default 10)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up training steps (default 3)")
    p.add_argument("--batch-sentences", type=int, default=None,
                   help="sentences per training batch (default: max-tokens // src len)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="source tokens per batch when --batch-sentences is not given "
                        "(default 4096 on cuda, 1024 tiny / 512 base on cpu)")
    p.add_argument("--decode-batch-sentences", type=int, default=None,
                   help="sentences decoded per call (default: the training batch size)")
    p.add_argument("--decode-repeats", type=int, default=None, help="timed decoding calls (default 3)")
    p.add_argument("--beams", type=int, nargs="+", default=[4, 1])
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


def main(argv=None):
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module=r"hydra(\..*)?")
    warnings.filterwarnings("ignore", message=r"(?s).*(ConfigStore schema|version_base|strict flag)")
    logging.basicConfig(level=logging.WARNING)
    for name in ("fairseq", "hydra", "fairseq_ctx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    parser = get_parser()
    a = parser.parse_args(argv)
    if a.at_update < 0:
        parser.error(f"--at-update must be >= 0, got {a.at_update}")
    if not a.baseline:
        a.baseline = ["transformer=--arch transformer"]
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
    specs = resolve_systems(a.baseline, a.system)

    def write(results):  # after every source length, and at the end
        if a.json:
            write_json(results, a.json)
        if a.markdown:
            with atomic_write(a.markdown) as f:
                f.write(markdown_report(results))

    results = run_benchmark(specs, cfg, on_progress=write)
    print(markdown_report(results))
    return results
