"""Peak training memory, measured in FRESH subprocesses (nothing of the interleaved run is
resident there); the subprocess imports :func:`memory_worker` from this module by its path,
``fairseq_ctx.benchmarking.memory``."""
from __future__ import annotations

import json
import subprocess
import sys
from typing import List

import torch

from ..paths import python_env
from .batches import make_batches
from .report import log
from .systems import Built, SystemSpec, make_dictionary, parse_training_args
from .timing import train_step


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

    convert_namespace_to_omegaconf(parse_training_args(argv))
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
    s = Built(SystemSpec(**job["spec"]), job["argv"], d, device, at_update=payload.get("at_update", 0))
    batch = make_batches(d, job["src_len"], job["bsz"], 1, payload["seed"], device)[0]
    for _ in range(payload["steps"]):  # updates at_update.. (the timing's first timed updates)
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
    code = ("import json, sys; from fairseq_ctx.benchmarking.memory import memory_worker; "
            "print('@@MEM@@' + json.dumps(memory_worker(json.loads(sys.stdin.read()))))")
    env = python_env()  # this very copy of the package, not a fairseq_ctx in the working directory
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
                   repeats: int = 2, at_update: int = 0) -> List[dict]:
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
                                           method=method, repeats=1 if method == "maxrss" else repeats,
                                           at_update=at_update))
        except RuntimeError as e:  # e.g. out of memory: that system gets no memory figure
            log(f"[bench] memory of {[j['spec']['name'] for j in g]} failed: {str(e)[-1500:]}")
    return out
