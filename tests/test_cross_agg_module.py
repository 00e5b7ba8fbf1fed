"""Pure-torch tests of fairseq_ctx.modules.cross_aggregation (no fairseq needed)."""
import pytest
import torch

from fairseq_ctx.modules.cross_aggregation import (
    STATE_HEAD_AGREEMENT,
    STATE_VOTES,
    CrossAggregation,
    positional_horizontal_routing,
    squash,
)

NEG_INF = float("-inf")
VARIANTS = [
    dict(vertical=False, horizontal=True, init="zero"),  # Table 1 row 2
    dict(vertical=False, horizontal=True, init="self"),  # row 3
    dict(vertical=True, horizontal=True, init="zero"),  # row 4 (default)
    dict(vertical=True, horizontal=True, init="self"),  # row 5
    dict(vertical=True, horizontal=False, init="zero"),
]


def causal_logits(bsz, heads, length, generator, scale=2.0):
    logits = torch.randn(bsz, heads, length, length, generator=generator) * scale
    future = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
    return logits.masked_fill(future, NEG_INF)


def test_squash_matches_eq7_and_maps_zero_to_zero_with_finite_gradient():
    s = torch.tensor([[3.0, 4.0], [0.0, 0.0]], requires_grad=True)
    out = squash(s)
    # |s| = 5: 25/26 * s/5
    torch.testing.assert_close(out[0], torch.tensor([3.0, 4.0]) * (25 / 26) / 5)
    assert (out[1] == 0).all()
    out.sum().backward()
    assert torch.isfinite(s.grad).all()
    # and the squashed length is always < 1
    big = squash(torch.randn(5, 7) * 100)
    assert (big.norm(dim=-1) < 1).all()


@pytest.mark.parametrize("self_init", [False, True])
def test_row_without_any_input_capsule_routes_to_zero_without_nan(self_init):
    votes = torch.randn(1, 2, 3, 3, requires_grad=True)
    padding = torch.tensor([[True, True, False]])  # left padding: queries 0, 1 have no input
    init = votes * 1.5 if self_init else None
    out = positional_horizontal_routing(votes, padding, num_queries=3, iters=3, init_agreement=init)
    assert (out[:, :, :2] == 0).all()
    assert out[:, :, 2].abs().sum() > 0
    out.sum().backward()
    assert torch.isfinite(votes.grad).all()


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"v{int(v['vertical'])}h{int(v['horizontal'])}-{v['init']}")
def test_all_masked_rows_and_padded_keys_stay_finite_with_gradients(variant):
    """Keys masked to -inf, an all-padding sentence and fully masked rows: no NaN anywhere."""
    module = CrossAggregation(4, iters=3, **variant)
    logits = torch.randn(3, 4, 5, 5)
    padding = torch.zeros(3, 5, dtype=torch.bool)
    padding[1, :2] = True
    padding[2] = True  # a sentence of padding only
    logits = logits.masked_fill(padding[:, None, None, :], NEG_INF)
    logits.requires_grad_(True)
    routed, _ = module(logits, padding)
    assert torch.isfinite(routed).all()
    assert (routed[2] == 0).all()  # every key masked: nothing to route
    routed.sum().backward()
    assert torch.isfinite(logits.grad).all()
    if variant["vertical"]:
        assert torch.isfinite(module.head_weight.weight.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_logits_are_routed_in_fp32(dtype):
    module = CrossAggregation(4).to(dtype)
    padding = torch.tensor([[True, False, False, False]])
    logits = (torch.randn(1, 4, 4, 4) * 30).masked_fill(padding[:, None, None, :], NEG_INF)
    routed, _ = module(logits.to(dtype), padding)
    assert routed.dtype == torch.float32
    assert torch.isfinite(routed).all()
    module32 = CrossAggregation(4)
    module32.load_state_dict({k: v.float() for k, v in module.state_dict().items()})
    reference, _ = module32(logits.to(dtype).float(), padding)
    torch.testing.assert_close(routed, reference)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"v{int(v['vertical'])}h{int(v['horizontal'])}-{v['init']}")
def test_incremental_state_reproduces_the_full_causal_pass(variant):
    """Decoder side: step-by-step routing with the cached votes / agreement sums == one pass."""
    generator = torch.Generator().manual_seed(3)
    bsz, heads, length = 2, 3, 6
    module = CrossAggregation(heads, iters=3, causal=True, **variant)
    if variant["vertical"]:
        with torch.no_grad():
            module.head_weight.weight.normal_(generator=generator)
    logits = causal_logits(bsz, heads, length, generator)
    full, _ = module(logits)
    state = None
    steps = []
    for t in range(length):
        # step t sees keys 0..t only (the KV cache), like fairseq's incremental attention
        routed, state = module(logits[:, :, t : t + 1, : t + 1], None, state)
        steps.append(torch.nn.functional.pad(routed, (0, length - t - 1)))
    torch.testing.assert_close(torch.cat(steps, dim=2), full)
    if variant["horizontal"]:
        assert state[STATE_VOTES].shape == (bsz, heads, length, length)
    if variant["vertical"]:
        assert state[STATE_HEAD_AGREEMENT].shape == (bsz, heads)


def test_decoder_side_is_causal():
    """Changing the logits of a later query never changes an earlier query's routing."""
    generator = torch.Generator().manual_seed(5)
    module = CrossAggregation(3, causal=True)
    with torch.no_grad():
        module.head_weight.weight.normal_(generator=generator)
    logits = causal_logits(1, 3, 5, generator)
    changed = logits.clone()
    changed[:, :, 3:, :4] += torch.randn(1, 3, 2, 4, generator=generator)
    before, _ = module(logits)
    after, _ = module(changed)
    torch.testing.assert_close(before[:, :, :3], after[:, :, :3])
    assert not torch.allclose(before[:, :, 3:], after[:, :, 3:])


def test_encoder_vertical_head_weights_use_every_query():
    """Encoder side (non-causal): Eq. 13 sums the agreements over ALL queries l."""
    generator = torch.Generator().manual_seed(6)
    module = CrossAggregation(3, horizontal=False)
    with torch.no_grad():  # small weights: the summed agreements are large, lambda saturates
        module.head_weight.weight.normal_(std=0.01, generator=generator)
    logits = torch.randn(1, 3, 4, 4, generator=generator)
    changed = logits.clone()
    changed[:, :, 3] += torch.randn(1, 3, 4, generator=generator)
    before, _ = module(logits)
    after, _ = module(changed)
    assert not torch.allclose(before[:, :, 0], after[:, :, 0])


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(vertical=False, horizontal=False), "at least one"),
        (dict(init="self", horizontal=False), "horizontal"),
        (dict(iters=0), "iters"),
        (dict(init="ones"), "init"),
    ],
)
def test_bad_options_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CrossAggregation(4, **kwargs)


def test_self_init_rejects_keys_that_are_not_the_queries():
    module = CrossAggregation(2, init="self")
    with pytest.raises(ValueError, match="Eq. 15"):
        module(torch.randn(1, 2, 3, 5))  # 5 keys for 3 queries (e.g. encoder-decoder attention)
