"""Speed and memory benchmark of fairseq architectures against their stock baselines.

The command line is ``fairseq-ctx-benchmark`` (``cli.main``; ``scripts/benchmark.py`` in a
checkout). Models are built exactly as ``fairseq-train`` builds them: the arguments
go through fairseq's own training parser (``options.get_training_parser()`` +
``options.parse_args_and_arch``, with ``--user-dir`` pointing at this package so the
plugin architectures register), are converted to the omegaconf config, and a
``TranslationTask`` over a synthetic joint dictionary builds the model and the
criterion (label-smoothed cross-entropy, 0.1, as in the papers' recipes).

Every system sees the same synthetic batches (same seed), and systems are timed
INTERLEAVED step by step (baseline step, system step, baseline step, ...), so that noise
on a shared machine hits all of them alike; throughputs are medians over steps.

Measured, per system and source length:
- training: forward + backward + Adam step in train mode (dropout as configured),
  target tokens / s (median over the timed steps of ntokens / step time);
- decoding: fairseq's ``SequenceGenerator`` with beam 4 and greedy (beam 1),
  sentences / s; ``min_len = max_len_b = source length`` and ``max_len_a = 0`` so that
  every system decodes exactly the same number of steps whether or not the untrained
  model would emit EOS;
- peak memory of training: on CUDA ``torch.cuda.max_memory_allocated``, on CPU the RSS
  high-water mark (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) of a FRESH
  subprocess per (system, source length), minus the RSS that subprocess had after its
  imports (so the interpreter, torch and fairseq are not counted). CUDA uses a fresh
  subprocess too, so nothing of another system is resident.

The package, one concern per module:

    systems.py   NAME=ARGS specs (SystemSpec, resolve_systems) and building a system as
                 fairseq-train does (build_argv, Built)
    batches.py   the synthetic batches every system sees
    timing.py    a timed training step and decoding call; medians, quartiles, interleaving order
    memory.py    peak memory in fresh subprocesses (memory_worker, measure_memory)
    run.py       the benchmark itself (BenchConfig, run_benchmark)
    report.py    ratios, metadata, markdown report, JSON
    cli.py       the command (get_parser, main)
"""
from .cli import get_parser, main
from .report import add_ratios, markdown_report, write_json
from .run import BenchConfig, run_benchmark
from .systems import SystemSpec, resolve_systems

__all__ = ["BenchConfig", "SystemSpec", "add_ratios", "get_parser", "main", "markdown_report", "resolve_systems",
           "run_benchmark", "write_json"]
