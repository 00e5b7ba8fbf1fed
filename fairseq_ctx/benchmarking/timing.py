"""Timed steps: one training step (forward + backward + Adam) and one decoding call, and the
statistics and interleaving order of the timed runs."""
from __future__ import annotations

import contextlib
import statistics
import time

import torch

from .systems import Built


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
    """One forward + backward + Adam step (train mode); returns seconds. As fairseq's
    ``FairseqTask.train_step`` does, the model is told the updates done so far before the
    forward (``set_num_updates(u)``, timed as fairseq pays it); the count then goes up by one."""
    sys_.model.train()
    sys_.criterion.train()
    _sync(sys_.device)
    t0 = time.perf_counter()
    sys_.model.set_num_updates(sys_.num_updates)
    with autocast_ctx(sys_.device, dtype):
        loss, sample_size, _ = sys_.criterion(sys_.model, batch)
    (loss / sample_size).backward()
    sys_.optimizer.step()
    sys_.optimizer.zero_grad(set_to_none=True)
    sys_.num_updates += 1
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
