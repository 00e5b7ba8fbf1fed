"""GLOBAL_ATT's shortcut (AttentivePooling: key projection folded into the query, value
projection applied after pooling) against the plain multi-head attention it stands for,
in train mode WITH attention dropout.

With a single query the value projection can be moved behind the pooling:
sum_s a_s (W_v h_s + b_v) = W_v (sum_s a_s h_s) + b_v (sum_s a_s). Adding b_v alone is
exact only while the weights a_s sum to 1, which attention dropout breaks (it zeroes
weights and rescales the others by 1/(1-p)). The plain computation below projects every
state, drops out the attention weights and pools the projected values; with the same
RNG state (the dropout mask has the same shape on both sides) the two must agree.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from fairseq_ctx.modules.sentential_context import AttentivePooling
from tests.equation_reference import float64_throughout

C, HEADS, POOLS, S, B = 8, 2, 3, 6, 4
DROPOUT = 0.4


def plain_attention(module, query, states, padding_mask):
    """Standard multi-head attention (q/k/v/out projections, scaled dot product) with the
    single query g0 per sentence and pool: every state projected to keys and values,
    attention dropout on the weights, the dropped weights pool the projected values."""
    Dh = C // HEADS
    q = torch.einsum("bc,pdc->pbd", query, module.q_weight) + module.q_bias.unsqueeze(1)
    k = torch.einsum("psbc,pdc->psbd", states, module.k_weight)  # no key bias
    v = torch.einsum("psbc,pdc->psbd", states, module.v_weight) + module.v_bias[:, None, None, :]
    q = q.view(POOLS, B, HEADS, Dh)
    k = k.view(POOLS, S, B, HEADS, Dh)
    v = v.view(POOLS, S, B, HEADS, Dh)
    scores = torch.einsum("pbhd,psbhd->pbhs", q, k) / math.sqrt(Dh)
    scores = scores.masked_fill(padding_mask.view(1, B, 1, S), float("-inf"))
    weights = F.dropout(F.softmax(scores, dim=-1), p=module.dropout, training=module.training)
    heads = torch.einsum("pbhs,psbhd->pbhd", weights, v).reshape(POOLS, B, C)
    return torch.einsum("pbc,pdc->pbd", heads, module.out_weight) + module.out_bias.unsqueeze(1)


@pytest.fixture
def pooling_inputs():
    g = torch.Generator().manual_seed(3)
    module = AttentivePooling(C, HEADS, num_pools=POOLS, dropout=DROPOUT).double()
    with torch.no_grad():
        for param in module.parameters():  # non-zero biases (b_v above all)
            param.copy_(torch.randn(param.shape, generator=g, dtype=torch.float64) * 0.5)
    states = torch.randn(POOLS, S, B, C, generator=g, dtype=torch.float64)
    query = torch.randn(B, C, generator=g, dtype=torch.float64)
    lengths = torch.tensor([6, 4, 3, 1])
    padding_mask = torch.arange(S).flip(0).unsqueeze(0) >= lengths.unsqueeze(1)  # left padding
    assert padding_mask.any()
    return module, query, states, padding_mask


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shortcut_equals_plain_attention_under_attention_dropout(pooling_inputs, seed):
    module, query, states, padding_mask = pooling_inputs
    module.train()
    with float64_throughout():  # the code's fp32 softmax would otherwise round to ~1e-7
        torch.manual_seed(seed)
        shortcut = module(query, states, padding_mask)
        torch.manual_seed(seed)
        plain = plain_attention(module, query, states, padding_mask)
    # the same dropout mask on both sides, and it did drop something
    torch.manual_seed(seed)
    mask = F.dropout(torch.ones(POOLS, B, HEADS, S, dtype=torch.float64), p=DROPOUT)
    assert (mask == 0).any()
    torch.testing.assert_close(shortcut, plain, atol=1e-12, rtol=0)


def test_shortcut_equals_plain_attention_in_eval_mode(pooling_inputs):
    module, query, states, padding_mask = pooling_inputs
    module.eval()
    with float64_throughout():
        torch.testing.assert_close(
            module(query, states, padding_mask), plain_attention(module, query, states, padding_mask),
            atol=1e-12, rtol=0,
        )
