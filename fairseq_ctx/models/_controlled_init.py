"""Controlled starts: what an architecture adds to a stock fairseq model draws its
initial values from its own random stream, so that at the same ``--seed`` every
parameter it shares with the stock model is bit-identical to the stock model's.

fairseq builds a model's layers in sequence from the global torch RNG; a module added
in between (or any extra draw) would shift every parameter built after it, and a
per-seed paired comparison with the baseline would compare different starts.
``added_parameters(name)`` builds the additions under a fork of the global CPU RNG
(state saved and restored: the global stream is left exactly where it was) reseeded
from ``derived_seed(name)``. Inside, the modules initialise as they always do (same
calls, same distributions); only the stream they draw from changes.
"""
import hashlib
from contextlib import contextmanager
from typing import Iterator, Optional

import torch


def derived_seed(name: str, seed: Optional[int] = None) -> int:
    """A 63-bit seed for the addition called ``name`` (a stable module path such as
    ``encoder.layers.0.self_attn.contextualizer``) under the run's seed.

    The run's seed is read with ``torch.initial_seed()``: the seed the global CPU
    generator was last seeded with, which is the run's ``--seed`` (fairseq_cli/train.py
    calls ``utils.set_torch_seed(cfg.common.seed)`` = ``torch.manual_seed`` before
    ``task.build_model``; so do fairseq's other entry points and the tests). Unlike the
    generator's current state it does not depend on how many numbers the stock layers
    drew before the addition, so an addition's values depend on (seed, name) only, and
    it needs no seed threaded through ``build_model`` (whose args do not always carry
    one, e.g. models built outside fairseq-train). Without any seeding, torch's initial
    seed is random per process, as the rest of the model is.
    """
    if seed is None:
        seed = torch.initial_seed()
    digest = hashlib.sha256(f"fairseq_ctx/{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def next_layer_name(stack: torch.nn.Module, side: str) -> str:
    """``{side}.layers.{i}`` on the i-th call for ``stack`` (from 0): the state-dict
    path of the layer a fairseq encoder / decoder is building. They build their layers
    in order, one ``build_*_layer`` call each, before ``self.layers`` holds any."""
    index = getattr(stack, "_layers_named", 0)
    stack._layers_named = index + 1
    return f"{side}.layers.{index}"


@contextmanager
def added_parameters(name: str) -> Iterator[None]:
    """Build / initialise the modules an architecture adds, drawing from the stream of
    ``derived_seed(name)``; the global CPU RNG is restored on exit.

    Only the CPU generator is forked and reseeded (fairseq builds models on the CPU);
    CUDA generators are neither drawn from nor touched.
    """
    seed = derived_seed(name)
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield
