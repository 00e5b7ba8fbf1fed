"""fairseq-ctx-routing-statistics' figures (model_statistics.RoutingRecorder) are pooled over
the real tokens of the data: a sentence's padding never enters them, so a batch of padded
sentences gives what the sentences give one by one, and the coupling entropy is Algorithm 1's,
written here from the paper (Cao et al., Alg. 1, Eq. 7-8) rather than from the module."""
import math

import pytest
import torch
from torch import nn

from fairseq_ctx.analysis.model_statistics import RoutingRecorder
from fairseq_ctx.modules.cross_aggregation import CrossAggregation

HEADS, ITERS = 4, 3


def _module(causal, seed=0):
    torch.manual_seed(seed)
    module = CrossAggregation(HEADS, iters=ITERS, causal=causal)
    nn.init.normal_(module.head_weight.weight, std=0.5)  # lambda away from uniform (it starts at 1/H)
    return module


def _logits(length, total, causal, generator, left_pad=False):
    """(1, H, total, total) logits of one sentence of ``length`` real tokens padded to ``total``
    (on the right, or on the left as fairseq pads sources): -inf at padded keys (and future
    keys when causal); a padding query's row keeps finite logits over the real keys, as
    fairseq's self-attention gives it."""
    logits = torch.randn(1, HEADS, total, total, generator=generator) * 2
    padded = slice(0, total - length) if left_pad else slice(length, total)
    logits[..., padded] = float("-inf")
    if causal:
        logits = logits.masked_fill(torch.ones(total, total, dtype=torch.bool).triu(1), float("-inf"))
    return logits


def _table(module, calls):
    holder = nn.ModuleDict({"layers": module})
    recorder = RoutingRecorder(holder)
    for logits, padding in calls:
        module(logits, padding)
    recorder.remove()
    (row,) = recorder.table()
    return row


@pytest.mark.parametrize("causal, left_pad", [(False, True), (False, False), (True, False)],
                         ids=["encoder-left-padded", "encoder-right-padded", "decoder"])
def test_routing_statistics_do_not_depend_on_padding(causal, left_pad):
    generator = torch.Generator().manual_seed(3)
    lengths, total = (7, 3, 5), 7
    sentences = [_logits(n, n, causal, generator) for n in lengths]
    padded = []
    for n, alone in zip(lengths, sentences):
        logits = _logits(n, total, causal, generator, left_pad)  # random rows for the padding queries
        real = slice(total - n, total) if left_pad else slice(0, n)
        logits[..., real, real] = alone
        padded.append(logits)
    padding = torch.tensor([[(t < total - n) if left_pad else (t >= n) for t in range(total)] for n in lengths])

    module = _module(causal)
    batched = _table(module, [(torch.cat(padded), padding)])
    one_by_one = _table(module, [(logits, None) for logits in sentences])

    assert batched["vertical_coupling_entropy"] == pytest.approx(one_by_one["vertical_coupling_entropy"], rel=1e-5)
    assert batched["routed_to_logit_ratio"] == pytest.approx(one_by_one["routed_to_logit_ratio"], rel=1e-5)
    if causal:
        assert "head_lambda" not in batched  # the decoder's lambda differs per prefix: not reported
    else:
        assert batched["head_lambda"] == pytest.approx(one_by_one["head_lambda"], rel=1e-5)
        assert sum(batched["head_lambda"]) == pytest.approx(1.0)
        assert max(batched["head_lambda"]) - min(batched["head_lambda"]) > 1e-3  # not trivially uniform


def test_an_incremental_step_is_not_counted():
    module = _module(True)
    holder = nn.ModuleDict({"layers": module})
    recorder = RoutingRecorder(holder)
    module(_logits(1, 1, True, torch.Generator().manual_seed(1)), None, {})  # the first step's state is {}
    recorder.remove()
    assert recorder.table() == []


def _squash(s):  # Eq. 7
    norm = s.norm(dim=-1, keepdim=True)
    return norm ** 2 / (1 + norm ** 2) * s / norm


@pytest.mark.parametrize("iters", [1, 3])
def test_routing_statistics_pool_over_tokens_as_algorithm_1_defines_them(iters):
    """The entropy of the coupling each real query's routing used last (Alg. 1 line 4 of
    iteration T; uniform for T = 1), and |Omega| / |E| with Omega^v of Eq. 10-13 (vertical
    routing only, so that Omega is written here too), pooled over the tokens of two sentences."""
    generator = torch.Generator().manual_seed(5)
    lengths = (6, 2)
    sentences = [_logits(n, n, False, generator) for n in lengths]
    torch.manual_seed(0)
    module = CrossAggregation(HEADS, iters=iters, horizontal=False)
    nn.init.normal_(module.head_weight.weight, std=0.5)
    row = _table(module, [(logits, None) for logits in sentences])

    entropies, routed_abs, logit_abs, lambdas = [], 0.0, 0.0, []
    w = module.head_weight.weight.detach().double()
    for logits in sentences:
        e = logits[0].double()  # (H, L, M): e_{l,h} over the keys
        b = torch.zeros(HEADS, e.size(1), dtype=torch.float64)  # Alg. 1 line 2
        for _ in range(iters):
            c = b.softmax(0)  # line 4: over the input capsules (heads)
            omega = _squash((c.unsqueeze(-1) * e).sum(0))  # Eq. 8 then Eq. 7: (L, M)
            b = b + (e * omega.unsqueeze(0)).sum(-1)  # line 6
        entropies += (-(c * c.log()).sum(0) / math.log(HEADS)).tolist()  # the last c used, one per query
        lam = (w @ b.sum(1)).softmax(0)  # Eq. 13: softmax(W^v [sum_l B_{h->l}]_h)
        routed = lam[:, None, None] * omega[None]  # Eq. 12: Omega^v_{h,l} = lambda_h Omega~_l
        routed_abs += routed.abs().sum().item()
        logit_abs += e.abs().sum().item()
        lambdas.append(lam)

    assert row["vertical_coupling_entropy"] == pytest.approx(sum(entropies) / len(entropies), rel=1e-5)
    if iters == 1:
        assert row["vertical_coupling_entropy"] == pytest.approx(1.0)  # B = 0: the coupling is uniform
    assert row["routed_to_logit_ratio"] == pytest.approx(routed_abs / logit_abs, rel=1e-5)
    assert row["head_lambda"] == pytest.approx((sum(lambdas) / len(lambdas)).tolist(), rel=1e-5)
