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


def _logits(length, total, causal, generator):
    """(1, H, total, total) logits of one sentence of ``length`` real tokens right-padded to
    ``total``: -inf at padded keys (and future keys when causal); a padding query's row keeps
    finite logits over the real keys, as fairseq's self-attention gives it."""
    logits = torch.randn(1, HEADS, total, total, generator=generator) * 2
    logits[..., length:] = float("-inf")
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


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_routing_statistics_do_not_depend_on_padding(causal):
    generator = torch.Generator().manual_seed(3)
    lengths, total = (7, 3, 5), 7
    sentences = [_logits(n, n, causal, generator) for n in lengths]
    padded = []
    for n, alone in zip(lengths, sentences):
        logits = _logits(n, total, causal, generator)  # random rows for the padding queries
        logits[..., :n, :n] = alone
        padded.append(logits)
    padding = torch.tensor([[t >= n for t in range(total)] for n in lengths])

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


def _squash(s):  # Eq. 7
    norm = s.norm(dim=-1, keepdim=True)
    return norm ** 2 / (1 + norm ** 2) * s / norm


def test_routing_statistics_pool_over_tokens_as_algorithm_1_defines_them():
    generator = torch.Generator().manual_seed(5)
    lengths = (6, 2)
    sentences = [_logits(n, n, False, generator) for n in lengths]
    module = _module(False)
    row = _table(module, [(logits, None) for logits in sentences])

    entropies, routed_abs, logit_abs = [], 0.0, 0.0
    for logits in sentences:
        e = logits[0].double()  # (H, L, M): e_{l,h} over the keys
        b = torch.zeros(HEADS, e.size(1), dtype=torch.float64)  # Alg. 1 line 2
        for _ in range(ITERS):
            c = b.softmax(0)  # line 4: over the input capsules (heads)
            omega = _squash((c.unsqueeze(-1) * e).sum(0))  # Eq. 8 then Eq. 7: (L, M)
            b = b + (e * omega.unsqueeze(0)).sum(-1)  # line 6
        c = b.softmax(0)
        entropies += (-(c * c.log()).sum(0) / math.log(HEADS)).tolist()  # one per query
        routed, _ = module(logits)
        routed_abs += routed.double().abs().sum().item()
        logit_abs += e.abs().sum().item()

    assert row["vertical_coupling_entropy"] == pytest.approx(sum(entropies) / len(entropies), rel=1e-5)
    assert row["routed_to_logit_ratio"] == pytest.approx(routed_abs / logit_abs, rel=1e-5)
