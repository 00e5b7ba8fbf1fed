"""What the benchmark reports: progress lines, ratios to the baselines, the run's metadata,
the markdown report and the JSON file."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import shlex
import sys
import time
from typing import TYPE_CHECKING

import torch

from ..atomic import atomic_write
from .timing import _median, _quartiles

if TYPE_CHECKING:  # annotations only: run imports this module
    from .run import BenchConfig


def log(msg: str):
    print(msg, file=sys.stderr, flush=True)


RATIO_KEYS = ["train_tok_s", "decode_beam4_sent_s", "decode_beam1_sent_s", "peak_mem_bytes"]


def add_ratios(results: dict):
    rows = results["rows"]
    by = {(r["system"], r["src_len"]): r for r in rows}
    for r in rows:
        base_name = r["baseline"] or r["system"]
        base = by.get((base_name, r["src_len"]))
        if base is None:
            continue
        r["ratios"] = {}
        for k in RATIO_KEYS:
            if k in r and k in base and base[k]:
                r["ratios"][k] = r[k] / base[k]
        # Paired: per timed step, system tok/s over baseline tok/s of the same round
        # (same batch, adjacent in time); median and quartiles. Robust to slow drift.
        if "train_step_s" in r and "train_step_s" in base and r.get("train_steps") == base.get("train_steps"):
            pr = [tb / ts for ts, tb in zip(r["train_step_s"], base["train_step_s"])]
            r["ratios"]["train_tok_s_paired"] = _median(pr)
            r["ratios"]["train_tok_s_paired_iqr"] = _quartiles(pr)
        bp = results["systems"][base_name]["params"]
        r["ratios"]["params"] = results["systems"][r["system"]]["params"] / bp


def metadata(cfg: BenchConfig, vocab: int) -> dict:
    import fairseq

    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "fairseq": getattr(fairseq, "__version__", "?"),
        "platform": platform.platform(),
        "processor": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": cfg.device,
        "dtype": cfg.dtype,
        "dims": cfg.dims,
        "vocab": vocab,
        "config": {k: (list(v) if isinstance(v, tuple) else v)
                   for k, v in dataclasses.asdict(cfg).items()},
        "command": " ".join(shlex.quote(a) for a in sys.argv),
    }
    if cfg.device == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(0)
        meta["cuda"] = torch.version.cuda
    return meta


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _fmt(x, nd=1):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{nd}f}"


def markdown_table(results: dict) -> str:
    beams = [k for k in ("decode_beam4_sent_s", "decode_beam1_sent_s")
             if any(k in r for r in results["rows"])]
    head = ["system", "vs", "src len", "params (M)", "train tok/s", "ratio", "paired ratio [IQR]"]
    for k in beams:
        head += [("beam4" if "beam4" in k else "greedy") + " sent/s", "ratio"]
    mem = any("peak_mem_bytes" in r for r in results["rows"])
    if mem:
        head += ["peak train mem (MiB)", "ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(results["rows"], key=lambda r: (r["src_len"], not _is_base(results, r), r["system"])):
        rat = r.get("ratios", {})
        cells = [r["system"], r["baseline"] or "(baseline)", str(r["src_len"]),
                 _fmt(results["systems"][r["system"]]["params"] / 1e6, 2),
                 _fmt(r["train_tok_s"], 0), _fmt(rat.get("train_tok_s"), 3),
                 (f"{_fmt(rat['train_tok_s_paired'], 3)} [{_fmt(rat['train_tok_s_paired_iqr'][0], 2)}-"
                  f"{_fmt(rat['train_tok_s_paired_iqr'][1], 2)}]") if "train_tok_s_paired" in rat else "-"]
        for k in beams:
            cells += [_fmt(r.get(k), 1), _fmt(rat.get(k), 3)]
        if mem:
            pm = r.get("peak_mem_bytes")
            cells += [_fmt(pm / 2**20 if pm is not None else None, 1),
                      _fmt(rat.get("peak_mem_bytes"), 3)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _is_base(results, r):
    return results["systems"][r["system"]]["is_baseline"]


def markdown_report(results: dict) -> str:
    m = results["meta"]
    out = [
        f"# Benchmark ({m['dims']} dims, {m['device']}, {m['dtype']})",
        "",
        *([f"**PARTIAL**: {m['partial']}", ""] if m.get("partial") else []),
        f"- date: {m['date']}",
        f"- machine: {m['processor']} ({m['cpu_count']} cores, torch threads {m['torch_threads']})"
        + (f", GPU {m['gpu']} (CUDA {m['cuda']})" if "gpu" in m else ""),
        f"- versions: Python {m['python']}, torch {m['torch']}, fairseq {m['fairseq']}",
        f"- command: `{m['command']}`",
        f"- steps {m['config']['steps']} (after {m['config']['warmup']} warm-up steps; the model told "
        f"updates {m['config'].get('at_update', 0)}.. from the first warm-up step, at every source length), "
        f"decode repeats {m['config']['decode_repeats']}, vocab {m['vocab']} (joint), "
        f"share-all-embeddings {m['config']['share_all_embeddings']}",
        "",
        "Ratios are system / its baseline at the same source length (throughput: higher is "
        "faster; memory: lower is smaller). Throughputs are medians over interleaved steps "
        "(the order rotates every round); 'paired ratio' is the median over rounds of "
        "system tok/s / baseline tok/s within the same round (same batch), with its quartiles.",
        "",
        markdown_table(results),
        "",
        "Systems:",
        "",
    ]
    for name, s in results["systems"].items():
        out.append(f"- `{name}`: `{s['args']}` (arch `{s['arch']}`, {s['params']:,} parameters"
                   + (f", baseline `{s['baseline']}`" if s["baseline"] else ", baseline") + ")"
                   + (f"; {s['schedule_note']}" if s.get("schedule_note") else ""))
    for name, f in results.get("failed", {}).items():
        last = (f["error"].strip().splitlines() or [""])[-1]
        out.append(f"- `{name}`: FAILED in {f['where']}" + (f": `{last}`" if last else ""))
    if results.get("memory_error"):
        out.append(f"- memory measurement failed: `{results['memory_error'].strip().splitlines()[-1]}`")
    return "\n".join(out) + "\n"


def write_json(results: dict, path: str):
    with atomic_write(path) as f:
        json.dump(results, f, indent=1, sort_keys=False)
