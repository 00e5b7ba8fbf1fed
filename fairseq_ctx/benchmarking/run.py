"""The benchmark: every system built, timed INTERLEAVED step by step on the same batches
(training, then decoding) per source length, then the memory subprocesses, then the ratios."""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence

import torch

from .batches import make_batches
from .memory import measure_memory
from .report import add_ratios, log, metadata
from .systems import (DEFAULT_VOCAB, USER_DIR, Built, SystemSpec, build_argv, make_dictionary,
                      schedule_note)
from .timing import _median, _quartiles, _rotated, decode_step, make_generator, train_step


# the lowest value each BenchConfig setting can run with (fairseq-ctx-benchmark checks its options
# against the same table first, so that a bad one is named as the user typed it)
MINIMUM = {"src_lens": 2, "steps": 1, "warmup": 0, "batch_sentences": 1, "max_tokens": 1,
           "decode_batch_sentences": 1, "decode_repeats": 1, "decode_warmup": 0, "beams": 1,
           "n_batches": 1, "vocab": 5, "memory_repeats": 1, "threads": 0, "at_update": 0}


@dataclasses.dataclass
class BenchConfig:
    dims: str = "tiny"
    src_lens: Sequence[int] = (20, 50, 100)
    device: str = "cpu"
    dtype: str = "fp32"
    steps: int = 10
    warmup: int = 3
    batch_sentences: Optional[int] = None
    max_tokens: Optional[int] = None
    decode_batch_sentences: Optional[int] = None
    decode_repeats: int = 3
    decode_warmup: int = 1
    beams: Sequence[int] = (4, 1)
    n_batches: int = 4
    vocab: Optional[int] = None
    share_all_embeddings: bool = True
    seed: int = 1
    memory: bool = True
    memory_isolation: str = "system"
    memory_repeats: int = 2
    threads: int = 0
    profile: bool = False
    at_update: int = 0  # the optimizer updates done before the first (warm-up) step

    def check(self) -> None:
        """ValueError for settings no benchmark can run with (fairseq-ctx-benchmark refuses
        the options first): source lengths < 2 (EOS included), no timed step or decoding
        call, a batch, beam or dictionary that cannot exist."""
        for field, low in MINIMUM.items():
            value = getattr(self, field)
            values = list(value) if isinstance(value, (list, tuple)) else [value]
            bad = [v for v in values if v is not None and v < low]
            if bad or not values:
                raise ValueError(f"BenchConfig.{field} must be >= {low}, got {value!r}")

    def bsz(self, src_len: int) -> int:
        if self.batch_sentences:
            return self.batch_sentences
        mt = self.max_tokens or (4096 if self.device == "cuda" else (1024 if self.dims == "tiny" else 512))
        return max(1, mt // src_len)


def run_benchmark(specs: List[SystemSpec], cfg: BenchConfig, data_dir: str = "/nonexistent-data",
                  on_progress=None) -> dict:
    """Benchmark every spec; a system that fails (to parse, build, train or decode) is
    recorded under results["failed"] with its error and dropped, together with the
    systems compared with it if it is a baseline; the others go on."""
    import traceback

    cfg.check()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda but torch.cuda.is_available() is False")
    vocab = cfg.vocab or DEFAULT_VOCAB[cfg.dims]
    d = make_dictionary(vocab)
    results = {"systems": {}, "rows": [], "failed": {}}
    argvs, built = {}, {}

    def fail(name, where):
        err = traceback.format_exc(limit=6)
        results["failed"][name] = {"where": where, "error": err}
        log(f"[bench] FAILED {name} ({where}):\n{err}")
        built.pop(name, None)
        for s in specs:  # systems measured against a failed baseline go too
            if s.baseline == name and s.name in built:
                results["failed"][s.name] = {"where": f"baseline {name} failed", "error": ""}
                built.pop(s.name, None)

    for s in specs:
        if s.baseline and s.baseline not in built:
            results["failed"][s.name] = {"where": f"baseline {s.baseline} failed", "error": ""}
            continue
        try:
            argvs[s.name] = build_argv(s.args, cfg.dims, data_dir, cfg.share_all_embeddings, cfg.seed)
            built[s.name] = Built(s, argvs[s.name], d, cfg.device, at_update=cfg.at_update)
        except Exception:
            fail(s.name, "build")
            continue
        b = built[s.name]
        log(f"[bench] built {s.name}: arch={b.args.arch} dims family={b.family} params={b.n_params:,}")
        results["systems"][s.name] = {
            "args": s.args, "baseline": s.baseline, "is_baseline": s.is_baseline,
            "arch": b.args.arch, "family": b.family, "params": b.n_params,
            "argv": [a for a in argvs[s.name] if a != USER_DIR],
        }
        note = schedule_note(b.args, cfg.at_update + cfg.warmup, cfg.at_update + cfg.warmup + cfg.steps - 1)
        if note:
            results["systems"][s.name]["schedule_note"] = note
            log(f"[bench] note: {s.name} is {note}")

    def active():
        return [s for s in specs if s.name in built]

    for L in cfg.src_lens:
        bsz = cfg.bsz(L)
        batches = make_batches(d, L, bsz, cfg.n_batches, cfg.seed, cfg.device)
        ntok = [int(b["ntokens"]) for b in batches]
        # --- training, interleaved step by step ---
        # every length from the same update: a schedule in u is in the same regime for all
        for s in active():
            built[s.name].at_update(cfg.at_update)
        times = {s.name: [] for s in specs}
        for step in range(cfg.warmup + cfg.steps):
            bi = step % len(batches)
            for s in _rotated(active(), step):
                try:
                    dt = train_step(built[s.name], batches[bi], cfg.dtype)
                except Exception:
                    fail(s.name, f"train step, src len {L}")
                    continue
                if step >= cfg.warmup:
                    times[s.name].append((dt, ntok[bi], step, built[s.name].num_updates - 1))
        # --- decoding, interleaved repeat by repeat ---
        dbsz = cfg.decode_batch_sentences or bsz
        dec_batch = make_batches(d, L, dbsz, 1, cfg.seed + 7, cfg.device)[0]
        dec_times = {(s.name, beam): [] for s in specs for beam in cfg.beams}
        gens = {(s.name, beam): make_generator(built[s.name], beam, L)
                for s in active() for beam in cfg.beams}
        for rep in range(cfg.decode_warmup + cfg.decode_repeats):
            for beam in cfg.beams:
                for s in _rotated(active(), rep):
                    try:
                        dt = decode_step(built[s.name], gens[(s.name, beam)], dec_batch, cfg.dtype)
                    except Exception:
                        fail(s.name, f"decode beam {beam}, src len {L}")
                        continue
                    if rep >= cfg.decode_warmup:
                        dec_times[(s.name, beam)].append(dt)
        del gens
        if cfg.profile:
            profile_systems(active(), built, batches[0], cfg)
        for s in active():
            tt = times[s.name]
            row = {
                "system": s.name, "baseline": s.baseline, "src_len": L, "batch_sentences": bsz,
                "train_step_ms_median": 1000 * _median([t for t, _, _, _ in tt]),
                "train_tok_s": _median([n / t for t, n, _, _ in tt]),
                "train_tok_s_iqr": _quartiles([n / t for t, n, _, _ in tt]),
                "train_step_s": [t for t, _, _, _ in tt],
                "train_steps": [k for _, _, k, _ in tt],
                "train_updates": [u for _, _, _, u in tt],  # u the model was told at each timed step
                "decode_batch_sentences": dbsz,
            }
            for beam in cfg.beams:
                dt = dec_times[(s.name, beam)]
                row[f"decode_beam{beam}_sent_s"] = dbsz / _median(dt)
                row[f"decode_beam{beam}_s"] = dt
            results["rows"].append(row)
            log(f"[bench] L={L} {s.name}: train {row['train_tok_s']:.0f} tok/s, "
                + ", ".join(f"beam{b} {row[f'decode_beam{b}_sent_s']:.1f} sent/s" for b in cfg.beams))
        if on_progress is not None:  # partial results (no memory yet) after every length
            add_ratios(results)
            results["meta"] = metadata(cfg, vocab)
            results["meta"]["partial"] = f"speed up to src len {L}; memory not measured yet"
            on_progress(results)
    # Rows of systems that failed at a later length are dropped everywhere.
    results["rows"] = [r for r in results["rows"] if r["system"] in built]
    for name in list(results["systems"]):
        if name not in built:
            del results["systems"][name]
    names = [s.name for s in active()]
    # Free the interleaved models before the memory subprocesses run.
    built.clear()
    if cfg.device == "cuda":
        torch.cuda.empty_cache()
    if cfg.memory and results["rows"]:
        jobs = [dict(spec=dataclasses.asdict(next(sp for sp in specs if sp.name == r["system"])),
                     argv=argvs[r["system"]], src_len=r["src_len"], bsz=r["batch_sentences"])
                for r in results["rows"]]
        try:
            mems = measure_memory(jobs, vocab, cfg.seed, cfg.device, cfg.dtype, steps=3,
                                  threads=cfg.threads, isolation=cfg.memory_isolation,
                                  repeats=cfg.memory_repeats,
                                  # its steps at the first timed updates (after the warm-up)
                                  at_update=cfg.at_update + cfg.warmup)
        except Exception:
            results["memory_error"] = traceback.format_exc(limit=4)
            log(f"[bench] memory measurement failed:\n{results['memory_error']}")
            mems = []
        by = {(m["system"], m["src_len"]): m for m in mems}
        for row in results["rows"]:
            m = by.get((row["system"], row["src_len"]))
            if m is None:
                continue
            row["peak_mem_bytes"] = m["peak_bytes"]
            row["mem_detail"] = m
            log(f"[bench] memory L={row['src_len']} {row['system']}: "
                f"{m['peak_bytes'] / 2**20:.1f} MiB ({m['method']})")
    add_ratios(results)
    results["meta"] = metadata(cfg, vocab)
    results["meta"]["measured"] = names
    if on_progress is not None:
        on_progress(results)
    return results


def profile_systems(specs, built, batch, cfg):
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cfg.device == "cuda" else [])
    key = "cuda_time_total" if cfg.device == "cuda" else "cpu_time_total"
    for s in specs:
        u = built[s.name].num_updates
        with profile(activities=acts) as prof:
            for _ in range(3):
                train_step(built[s.name], batch, cfg.dtype)
        built[s.name].at_update(u)  # the profiled steps do not move the model on
        log(f"[profile] {s.name} (3 training steps)\n"
            + prof.key_averages().table(sort_by=key, row_limit=20))
