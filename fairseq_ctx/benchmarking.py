"""Speed and memory benchmark of fairseq architectures against their stock baselines.

The command line is ``fairseq-ctx-benchmark`` (``main`` below; ``scripts/benchmark.py`` in a
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
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

import torch

from .paths import PACKAGE_DIR as USER_DIR
from .paths import python_env

# Size overrides, keyed by model family. Each entry is (namespace attribute, option,
# value or None for a store_true flag); an entry is only passed when the architecture's
# parsed arguments have that attribute (i.e. the arch accepts the option). They go
# BEFORE the system's own arguments, so an option given explicitly in a system string
# wins (argparse keeps the last occurrence).
DIM_OVERRIDES: Dict[str, Dict[str, List[tuple]]] = {
    "tiny": {
        "transformer": [
            ("encoder_embed_dim", "--encoder-embed-dim", "64"),
            ("encoder_ffn_embed_dim", "--encoder-ffn-embed-dim", "128"),
            ("encoder_layers", "--encoder-layers", "2"),
            ("encoder_attention_heads", "--encoder-attention-heads", "4"),
            ("decoder_embed_dim", "--decoder-embed-dim", "64"),
            ("decoder_ffn_embed_dim", "--decoder-ffn-embed-dim", "128"),
            ("decoder_layers", "--decoder-layers", "2"),
            ("decoder_attention_heads", "--decoder-attention-heads", "4"),
            ("decoder_output_dim", "--decoder-output-dim", "64"),
            ("decoder_input_dim", "--decoder-input-dim", "64"),
        ],
        "lstm": [
            ("encoder_embed_dim", "--encoder-embed-dim", "64"),
            ("encoder_hidden_size", "--encoder-hidden-size", "64"),
            ("encoder_layers", "--encoder-layers", "1"),
            ("encoder_bidirectional", "--encoder-bidirectional", None),
            ("decoder_embed_dim", "--decoder-embed-dim", "64"),
            ("decoder_hidden_size", "--decoder-hidden-size", "128"),
            ("decoder_layers", "--decoder-layers", "1"),
            ("decoder_out_embed_dim", "--decoder-out-embed-dim", "64"),
        ],
    },
    # base: the Transformer's own defaults (d 512, FFN 2048, 8 heads, 6+6 layers) are
    # the papers' base; for the LSTM family use Iida et al.'s base (1-layer
    # bidirectional encoder 512 per direction, decoder hidden 1024, embeddings 512,
    # out-embed 512), which fairseq's stock `lstm` defaults are not.
    "base": {
        "transformer": [],
        "lstm": [
            ("encoder_embed_dim", "--encoder-embed-dim", "512"),
            ("encoder_hidden_size", "--encoder-hidden-size", "512"),
            ("encoder_layers", "--encoder-layers", "1"),
            ("encoder_bidirectional", "--encoder-bidirectional", None),
            ("decoder_embed_dim", "--decoder-embed-dim", "512"),
            ("decoder_hidden_size", "--decoder-hidden-size", "1024"),
            ("decoder_layers", "--decoder-layers", "1"),
            ("decoder_out_embed_dim", "--decoder-out-embed-dim", "512"),
        ],
    },
}
DEFAULT_VOCAB = {"tiny": 8000, "base": 32000}

# Options used for every system (a system string may override them).
COMMON_ARGS = [
    "--task", "translation",
    "--source-lang", "src", "--target-lang", "tgt",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--optimizer", "adam",
]


@dataclasses.dataclass
class SystemSpec:
    name: str
    args: str
    baseline: Optional[str] = None  # None for a baseline
    is_baseline: bool = False

    @staticmethod
    def parse(text: str, is_baseline: bool) -> "SystemSpec":
        """``name=ARGS`` or, for a system, ``name@baseline=ARGS``."""
        if "=" not in text:
            raise ValueError(f"expected NAME=ARGS, got {text!r}")
        name, args = text.split("=", 1)
        name = name.strip()
        baseline = None
        if "@" in name:
            if is_baseline:
                raise ValueError(f"a baseline cannot name a baseline: {text!r}")
            name, baseline = (s.strip() for s in name.split("@", 1))
        if not name:
            raise ValueError(f"empty system name in {text!r}")
        return SystemSpec(name=name, args=args.strip(), baseline=baseline,
                          is_baseline=is_baseline)


def resolve_systems(baselines: Sequence[str], systems: Sequence[str]) -> List[SystemSpec]:
    """Baselines first, then systems; a system without ``@baseline`` gets the first."""
    if not baselines:
        raise ValueError("at least one --baseline is needed")
    specs = [SystemSpec.parse(b, True) for b in baselines]
    names = [s.name for s in specs]
    for text in systems:
        s = SystemSpec.parse(text, False)
        if s.baseline is None:
            s.baseline = specs[0].name
        if s.baseline not in names[: len(baselines)]:
            raise ValueError(f"system {s.name!r}: unknown baseline {s.baseline!r}")
        specs.append(s)
    seen = set()
    for s in specs:
        if s.name in seen:
            raise ValueError(f"duplicate system name {s.name!r}")
        seen.add(s.name)
    return specs


# --------------------------------------------------------------------------------------
# Building models exactly as fairseq-train does
# --------------------------------------------------------------------------------------

def make_dictionary(vocab: int):
    """A joint synthetic dictionary of ``vocab`` symbols in total (4 specials included)."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(vocab - len(d)):
        d.add_symbol(f"w{i}")
    return d


def ensure_plugin_imported():
    """Register the plugin's architectures, as ``--user-dir`` does in fairseq-train.
    Importing ``fairseq_ctx`` registers every module under ``fairseq_ctx/models``
    (fairseq's own ``--user-dir`` step is skipped for an already-imported package)."""
    import fairseq_ctx.models  # noqa: F401


def _parse(argv: List[str], return_parser: bool = False):
    from fairseq import options

    ensure_plugin_imported()

    import io

    parser = options.get_training_parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = options.parse_args_and_arch(parser, argv)
    except SystemExit as e:  # argparse error: keep its message, not its usage dump
        msg = [l for l in err.getvalue().splitlines() if "error:" in l]
        raise ValueError(f"fairseq could not parse {' '.join(argv[3:])!r}: "
                         f"{msg[-1][:500] if msg else e}") from None
    # parse_args_and_arch adds the arch's / task's / criterion's options to `parser`.
    return (args, parser) if return_parser else args


def model_family(args: argparse.Namespace) -> str:
    if hasattr(args, "encoder_hidden_size") or hasattr(args, "decoder_hidden_size"):
        return "lstm"
    if hasattr(args, "encoder_ffn_embed_dim") or hasattr(args, "decoder_ffn_embed_dim"):
        return "transformer"
    return "other"


def build_argv(system_args: str, dims: str, data_dir: str, share_all: bool = True,
               seed: int = 1) -> List[str]:
    """The fairseq-train argv for one system at the given dims (arch-accepted only)."""
    user = shlex.split(system_args)
    head = [data_dir, "--user-dir", USER_DIR, *COMMON_ARGS, "--seed", str(seed)]
    user = [u for u in user if u != "--no-share-all-embeddings"]
    probe, parser = _parse(head + user, return_parser=True)
    accepted = parser._option_string_actions
    family = model_family(probe)
    overrides: List[str] = []
    for dest, opt, val in DIM_OVERRIDES[dims].get(family, []):
        if opt in accepted:
            overrides += [opt] if val is None else [opt, val]
    if share_all and "--share-all-embeddings" in accepted and "--share-all-embeddings" not in user \
            and "--no-share-all-embeddings" not in shlex.split(system_args):
        overrides.append("--share-all-embeddings")
    return head + overrides + user


class Built:
    """One system, built as fairseq-train builds it: args, cfg, task, model, criterion, Adam."""

    def __init__(self, spec: SystemSpec, argv: List[str], dictionary, device: str):
        from fairseq import utils
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf
        from fairseq.tasks.translation import TranslationTask

        self.spec = spec
        self.argv = argv
        self.args = _parse(argv)
        self.family = model_family(self.args)
        utils.set_torch_seed(self.args.seed)
        self.cfg = convert_namespace_to_omegaconf(self.args)
        self.task = TranslationTask(self.cfg.task, dictionary, dictionary)
        self.model = self.task.build_model(self.cfg.model).to(device)
        self.criterion = self.task.build_criterion(self.cfg.criterion).to(device)
        self.n_params = sum(p.numel() for p in self.model.parameters())
        # torch's Adam (fairseq's FairseqAdam wraps the same update) with the papers'
        # betas; foreach/fused left at torch's defaults for the device.
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=5e-4,
                                          betas=(0.9, 0.98), eps=1e-8)
        self.device = device


# --------------------------------------------------------------------------------------
# Synthetic batches
# --------------------------------------------------------------------------------------

def make_batches(dictionary, src_len: int, bsz: int, n_batches: int, seed: int,
                 device: str) -> List[dict]:
    """Random token ids; source length in [ceil(0.8 L), L] tokens (EOS included),
    target length ~ source length (x U(0.9, 1.1), at least 2); fairseq's own collate
    (source left-padded, prev_output_tokens = EOS + target[:-1])."""
    from fairseq import utils
    from fairseq.data.language_pair_dataset import collate

    g = torch.Generator().manual_seed(seed * 1000003 + src_len)
    lo, hi = dictionary.nspecial, len(dictionary)
    batches = []
    for b in range(n_batches):
        samples = []
        for i in range(bsz):
            sl = int(torch.randint(max(2, math.ceil(0.8 * src_len)), src_len + 1, (1,), generator=g))
            tl = max(2, int(round(sl * float(0.9 + 0.2 * torch.rand(1, generator=g)))))
            src = torch.randint(lo, hi, (sl,), generator=g)
            tgt = torch.randint(lo, hi, (tl,), generator=g)
            src[-1] = dictionary.eos()
            tgt[-1] = dictionary.eos()
            samples.append({"id": b * bsz + i, "source": src, "target": tgt})
        batch = collate(samples, dictionary.pad(), dictionary.eos(),
                        left_pad_source=True, left_pad_target=False)
        batches.append(utils.move_to_cuda(batch) if device == "cuda" else batch)
    return batches


# --------------------------------------------------------------------------------------
# Timed steps
# --------------------------------------------------------------------------------------

def _sync(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


def autocast_ctx(device: str, dtype: str):
    if dtype == "bf16":
        return torch.autocast(device_type=device, dtype=torch.bfloat16)
    if dtype == "fp16":
        return torch.autocast(device_type=device, dtype=torch.float16)
    return contextlib.nullcontext()


def train_step(sys_: Built, batch: dict, dtype: str) -> float:
    """One forward + backward + Adam step (train mode); returns seconds."""
    sys_.model.train()
    sys_.criterion.train()
    _sync(sys_.device)
    t0 = time.perf_counter()
    with autocast_ctx(sys_.device, dtype):
        loss, sample_size, _ = sys_.criterion(sys_.model, batch)
    (loss / sample_size).backward()
    sys_.optimizer.step()
    sys_.optimizer.zero_grad(set_to_none=True)
    _sync(sys_.device)
    return time.perf_counter() - t0


def make_generator(sys_: Built, beam: int, length: int):
    from fairseq.sequence_generator import SequenceGenerator

    # max_len_a = 0, max_len_b = min_len = length: EOS is banned before `length` and
    # forced at `length`, so every system decodes exactly length + 1 steps.
    return SequenceGenerator([sys_.model], sys_.task.target_dictionary, beam_size=beam,
                             max_len_a=0, max_len_b=length, min_len=length)


def decode_step(sys_: Built, generator, batch: dict, dtype: str) -> float:
    sys_.model.eval()
    _sync(sys_.device)
    t0 = time.perf_counter()
    with autocast_ctx(sys_.device, dtype), torch.no_grad():
        hyps = generator.generate([sys_.model], batch)
    _sync(sys_.device)
    dt = time.perf_counter() - t0
    assert len(hyps) == batch["nsentences"]
    return dt


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def _quartiles(xs):
    if len(xs) < 2:
        return [float("nan"), float("nan")]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return [q[0], q[2]]


def _rotated(items: list, k: int) -> list:
    """The interleaving order of round k: rotated by k, so no system is always first."""
    if not items:
        return items
    k %= len(items)
    return items[k:] + items[:k]


# --------------------------------------------------------------------------------------
# Memory (fresh subprocesses; nothing of the interleaved run is resident there)
# --------------------------------------------------------------------------------------

def _proc_status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_rss_peak() -> bool:
    """Reset the kernel's RSS high-water mark (VmHWM) of this process (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _trim_heap():
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _library_warmup(argv: List[str], device: str):
    """Pay the one-off costs that every system shares BEFORE the baseline RSS is read:
    fairseq / plugin imports, the argument parser, hydra's first compose, and torch's
    first autograd + Adam step (lazy library and kernel loading)."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    import fairseq.tasks.translation  # noqa: F401
    import fairseq.criterions.label_smoothed_cross_entropy  # noqa: F401

    convert_namespace_to_omegaconf(_parse(argv))
    lin = torch.nn.Linear(8, 8).to(device)
    rnn = torch.nn.LSTM(8, 8, batch_first=True).to(device)
    opt = torch.optim.Adam(list(lin.parameters()) + list(rnn.parameters()))
    x = torch.randn(2, 3, 8, device=device)
    y = rnn(lin(x))[0]
    torch.nn.functional.log_softmax(y, -1).sum().backward()
    opt.step()
    del lin, rnn, opt, x, y


def memory_worker(payload: dict) -> List[dict]:
    """Runs in a fresh subprocess. For each job (system, source length, batch size):
    build the system from scratch, run `steps` training steps (Adam state exists from the
    first on), and report the peak of training, model and optimizer state included.

    CUDA: torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus what was
    allocated before the build (0 in practice).
    CPU, method "hwm": the kernel's RSS high-water mark (/proc/self/status VmHWM) after
    resetting it through /proc/self/clear_refs, minus the RSS just before the build
    (after gc + malloc_trim, so freed memory of a previous job is not counted).
    CPU, method "maxrss" (one job per process; used where clear_refs is not writable):
    getrusage(RUSAGE_SELF).ru_maxrss minus the RSS after the shared warm-up.
    """
    device, method = payload["device"], payload["method"]
    if payload.get("threads"):
        torch.set_num_threads(payload["threads"])
    jobs = payload["jobs"]
    _library_warmup(jobs[0]["argv"], device)
    d = make_dictionary(payload["vocab"])
    out = []
    for job in jobs:
        # Twice: the first build of a shape pays one-off allocator / kernel costs that
        # depend on the order of jobs; the second is the one reported (both kept).
        tries = [_memory_once(job, d, payload, method) for _ in range(payload.get("repeats", 2))]
        r = dict(tries[-1])
        r["peak_bytes_tries"] = [t["peak_bytes"] for t in tries]
        out.append(r)
    return out


def _memory_once(job: dict, d, payload: dict, method: str) -> dict:
    import resource

    device, dtype = payload["device"], payload["dtype"]
    _trim_heap()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        if method == "hwm" and not _reset_rss_peak():
            raise RuntimeError("cannot reset VmHWM (/proc/self/clear_refs)")
        base = _proc_status_kib("VmRSS") * 1024
    s = Built(SystemSpec(**job["spec"]), job["argv"], d, device)
    batch = make_batches(d, job["src_len"], job["bsz"], 1, payload["seed"], device)[0]
    for _ in range(payload["steps"]):
        train_step(s, batch, dtype)
    r = {"system": job["spec"]["name"], "src_len": job["src_len"], "method": method,
         "base_bytes": int(base)}
    if device == "cuda":
        r["method"] = "cuda_max_allocated"
        r["peak_bytes"] = int(torch.cuda.max_memory_allocated() - base)
    elif method == "hwm":
        r["hwm_bytes"] = _proc_status_kib("VmHWM") * 1024
        r["peak_bytes"] = int(r["hwm_bytes"] - base)
    else:
        r["maxrss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        r["peak_bytes"] = int(r["maxrss_bytes"] - base)
    del s, batch
    return r


def _run_memory_worker(payload: dict) -> List[dict]:
    code = ("import json, sys; from fairseq_ctx.benchmarking import memory_worker; "
            "print('@@MEM@@' + json.dumps(memory_worker(json.loads(sys.stdin.read()))))")
    env = python_env()  # the subprocess imports this very copy of the package
    p = subprocess.run([sys.executable, "-c", code], input=json.dumps(payload),
                       capture_output=True, text=True, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("@@MEM@@"):
            return json.loads(line[len("@@MEM@@"):])
    raise RuntimeError(f"memory subprocess failed (rc {p.returncode}):\n{p.stderr[-3000:]}")


def hwm_supported() -> bool:
    return sys.platform.startswith("linux") and _reset_rss_peak()


def measure_memory(jobs: List[dict], vocab: int, seed: int, device: str, dtype: str,
                   steps: int = 3, threads: int = 0, isolation: str = "system",
                   repeats: int = 2) -> List[dict]:
    """jobs: [{spec, argv, src_len, bsz}]. isolation: "system" = one fresh subprocess per
    system (all its source lengths), "all" = one subprocess for every job, "job" = one per
    job. On CPU without a resettable VmHWM, falls back to one process per job + maxrss."""
    method = "hwm"
    if device == "cpu" and not hwm_supported():
        method, isolation = "maxrss", "job"
    if isolation == "all":
        groups = [jobs]
    elif isolation == "job":
        groups = [[j] for j in jobs]
    else:
        names = list(dict.fromkeys(j["spec"]["name"] for j in jobs))
        groups = [[j for j in jobs if j["spec"]["name"] == n] for n in names]
    out = []
    for g in groups:
        try:
            out += _run_memory_worker(dict(jobs=g, vocab=vocab, seed=seed, device=device,
                                           dtype=dtype, steps=steps, threads=threads,
                                           method=method, repeats=1 if method == "maxrss" else repeats))
        except RuntimeError as e:  # e.g. out of memory: that system gets no memory figure
            log(f"[bench] memory of {[j['spec']['name'] for j in g]} failed: {str(e)[-1500:]}")
    return out

# --------------------------------------------------------------------------------------
# The benchmark
# --------------------------------------------------------------------------------------

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

    def bsz(self, src_len: int) -> int:
        if self.batch_sentences:
            return self.batch_sentences
        mt = self.max_tokens or (4096 if self.device == "cuda" else (1024 if self.dims == "tiny" else 512))
        return max(1, mt // src_len)


def log(msg: str):
    print(msg, file=sys.stderr, flush=True)


def run_benchmark(specs: List[SystemSpec], cfg: BenchConfig, data_dir: str = "/nonexistent-data",
                  on_progress=None) -> dict:
    """Benchmark every spec; a system that fails (to parse, build, train or decode) is
    recorded under results["failed"] with its error and dropped, together with the
    systems compared with it if it is a baseline; the others go on."""
    import traceback

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
            built[s.name] = Built(s, argvs[s.name], d, cfg.device)
        except Exception:
            fail(s.name, "build")
            continue
        b = built[s.name]
        log(f"[bench] built {s.name}: arch={b.args.arch} family={b.family} params={b.n_params:,}")
        results["systems"][s.name] = {
            "args": s.args, "baseline": s.baseline, "is_baseline": s.is_baseline,
            "arch": b.args.arch, "family": b.family, "params": b.n_params,
            "argv": [a for a in argvs[s.name] if a != USER_DIR],
        }

    def active():
        return [s for s in specs if s.name in built]

    for L in cfg.src_lens:
        bsz = cfg.bsz(L)
        batches = make_batches(d, L, bsz, cfg.n_batches, cfg.seed, cfg.device)
        ntok = [int(b["ntokens"]) for b in batches]
        # --- training, interleaved step by step ---
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
                    times[s.name].append((dt, ntok[bi], step))
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
                "train_step_ms_median": 1000 * _median([t for t, _, _ in tt]),
                "train_tok_s": _median([n / t for t, n, _ in tt]),
                "train_tok_s_iqr": _quartiles([n / t for t, n, _ in tt]),
                "train_step_s": [t for t, _, _ in tt],
                "train_steps": [k for _, _, k in tt],
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
                                  repeats=cfg.memory_repeats)
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
        with profile(activities=acts) as prof:
            for _ in range(3):
                train_step(built[s.name], batch, cfg.dtype)
        log(f"[profile] {s.name} (3 training steps)\n"
            + prof.key_averages().table(sort_by=key, row_limit=20))


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


# --------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------

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
        f"- steps {m['config']['steps']} (after {m['config']['warmup']} warm-up), "
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
                   + (f", baseline `{s['baseline']}`" if s["baseline"] else ", baseline") + ")")
    for name, f in results.get("failed", {}).items():
        last = (f["error"].strip().splitlines() or [""])[-1]
        out.append(f"- `{name}`: FAILED in {f['where']}" + (f": `{last}`" if last else ""))
    if results.get("memory_error"):
        out.append(f"- memory measurement failed: `{results['memory_error'].strip().splitlines()[-1]}`")
    return "\n".join(out) + "\n"


def write_json(results: dict, path: str):
    with open(path, "w") as f:
        json.dump(results, f, indent=1, sort_keys=False)


# ---------------------------------------------------------------------------------------
# Command line (fairseq-ctx-benchmark)
# ---------------------------------------------------------------------------------------

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
in ARGS win. See fairseq_ctx/benchmarking.py and docs/notes/benchmark.md for the method.
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
    a = get_parser().parse_args(argv)
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
        n_batches=2 if a.quick else 4,
    )
    specs = resolve_systems(a.baseline, a.system)

    def write(results):  # after every source length, and at the end
        if a.json:
            write_json(results, a.json)
        if a.markdown:
            with open(a.markdown, "w") as f:
                f.write(markdown_report(results))

    results = run_benchmark(specs, cfg, on_progress=write)
    print(markdown_report(results))
    return results
