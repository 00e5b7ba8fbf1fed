"""The batched cross aggregation must equal a literal, loop-by-loop Algorithm 1.

The reference below follows the paper line by line (Algorithm 1, Eq. 7-15) with Python
loops over sentences, queries, capsules and iterations, in float64. It lives only here:
the module must never loop over positions.
"""
import math

import pytest
import torch

from fairseq_ctx.modules.cross_aggregation import CrossAggregation

NEG_INF = float("-inf")


def literal_squash(s):
    """Eq. 7 as written: |s|^2 / (1 + |s|^2) * s / |s| (zero vector -> zero)."""
    norm = float(s.norm())
    if norm == 0.0:
        return torch.zeros_like(s)
    return (norm**2 / (1.0 + norm**2)) * s / norm


def literal_simple_routing(votes, iters, init=None):
    """Algorithm 1. votes[i][n] is V_{i->n}; init[i][n] the initial B (default 0).

    Returns the N output capsules Omega_n and the final B[i][n].
    """
    num_in = len(votes)
    num_out = len(votes[0])
    b = [[(init[i][n] if init is not None else 0.0) for n in range(num_out)] for i in range(num_in)]
    omegas = None
    for _ in range(iters):
        omegas = []
        for n in range(num_out):
            # line 4: C_{i->n} = softmax(B_{*->n}) over the input capsules i
            column = [b[i][n] for i in range(num_in)]
            top = max(column)
            exps = [math.exp(x - top) for x in column]
            total = sum(exps)
            coupling = [x / total for x in exps]
            s = sum(coupling[i] * votes[i][n] for i in range(num_in))  # Eq. 8
            omegas.append(literal_squash(s))  # Eq. 7
        for i in range(num_in):
            for n in range(num_out):
                b[i][n] += float(omegas[n] @ votes[i][n])  # line 6
    return omegas, b


def literal_cross_aggregation(logits, query_padding, head_weight, vertical, horizontal, init, iters, causal):
    """Omega^v + Omega^h for logits (bsz, H, L, M) with -inf at masked keys."""
    bsz, heads, length, num_keys = logits.shape
    logits = logits.double()
    out = torch.zeros_like(logits)
    for b in range(bsz):
        # votes: the logits with masked keys zeroed
        e = [[logits[b, h, l].masked_fill(torch.isneginf(logits[b, h, l]), 0.0) for h in range(heads)] for l in range(length)]
        valid = [not bool(query_padding[b, l]) for l in range(length)]
        if vertical:
            # Eq. 10-11: input capsules are heads h, output capsules queries l, V_{h->l} = e_{l,h}
            votes = [[e[l][h] for l in range(length)] for h in range(heads)]
            omega_tilde, agreement = literal_simple_routing(votes, iters)
            for l in range(length):
                if causal:
                    summed = [sum(agreement[h][t] for t in range(l + 1) if valid[t]) for h in range(heads)]
                else:
                    summed = [sum(agreement[h][t] for t in range(length) if valid[t]) for h in range(heads)]
                # Eq. 13
                scores = head_weight.double() @ torch.tensor(summed, dtype=torch.float64)
                lam = torch.softmax(scores, dim=0)
                for h in range(heads):
                    out[b, h, l] += lam[h] * omega_tilde[l]  # Eq. 12
        if horizontal:
            for l in range(length):
                inputs = [t for t in range(l + 1) if valid[t]]  # Eq. 14: t <= l
                if not inputs:
                    continue
                votes = [[e[t][h] for h in range(heads)] for t in inputs]
                init_b = None
                if init == "self":
                    # Eq. 15: B^init_{t->h} = alpha^h_{l,t}
                    init_b = [[float(e[l][h][t]) for h in range(heads)] for t in inputs]
                omegas, _ = literal_simple_routing(votes, iters, init_b)
                for h in range(heads):
                    out[b, h, l] += omegas[h]
    return out


def random_logits(bsz, heads, length, padding, causal, generator, scale=2.0):
    """Random logits with fairseq's masking: -inf at padded keys (and future keys if causal)."""
    logits = torch.randn(bsz, heads, length, length, generator=generator) * scale
    if causal:
        future = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
        logits = logits.masked_fill(future, NEG_INF)
    logits = logits.masked_fill(padding[:, None, None, :], NEG_INF)
    return logits


VARIANTS = [
    # (vertical, horizontal, init): the four rows 2-5 of Table 1, plus vertical only
    (False, True, "zero"),
    (False, True, "self"),
    (True, True, "zero"),
    (True, True, "self"),
    (True, False, "zero"),
]


@pytest.mark.parametrize("vertical,horizontal,init", VARIANTS)
@pytest.mark.parametrize("iters", [1, 3, 5])
@pytest.mark.parametrize("side", ["encoder_left_pad", "decoder_right_pad"])
def test_batched_routing_equals_literal_algorithm_1(vertical, horizontal, init, iters, side):
    generator = torch.Generator().manual_seed(iters * 7 + len(side))
    bsz, heads, length = 3, 4, 6
    causal = side.startswith("decoder")
    lengths = torch.tensor([6, 4, 1])
    positions = torch.arange(length)
    if causal:  # fairseq right-pads targets
        padding = positions[None, :] >= lengths[:, None]
    else:  # and left-pads sources
        padding = positions[None, :] < (length - lengths)[:, None]
    logits = random_logits(bsz, heads, length, padding, causal, generator)
    module = CrossAggregation(heads, vertical=vertical, horizontal=horizontal, init=init, iters=iters, causal=causal)
    if vertical:
        with torch.no_grad():
            module.head_weight.weight.normal_(generator=generator)
    routed, _ = module(logits, padding)
    expected = literal_cross_aggregation(
        logits, padding, module.head_weight.weight.detach() if vertical else None,
        vertical, horizontal, init, iters, causal,
    )
    assert torch.isfinite(routed).all()
    torch.testing.assert_close(routed.double(), expected, atol=2e-5, rtol=1e-4)
    # Nothing is routed onto masked keys: E^ = E + Omega stays -inf there.
    assert (routed[torch.isneginf(logits)] == 0).all()


def test_literal_reference_is_not_trivial():
    """Guard against a reference that returns zeros (which the module would then 'match')."""
    generator = torch.Generator().manual_seed(0)
    logits = random_logits(1, 2, 4, torch.zeros(1, 4, dtype=torch.bool), False, generator)
    out = literal_cross_aggregation(logits, torch.zeros(1, 4, dtype=torch.bool), torch.eye(2), True, True, "zero", 3, False)
    assert out.abs().min() > 0
