"""--routing-stop-gradient (diagnostic, issue 15; not in the paper): the routing reads the
logits detached. E^ = E + Omega(E) keeps its values; the gradient reaches Q / K through
E only, as if Omega^v + Omega^h were a constant computed from E.

The reference: E = q k^T / sqrt(d_head), the routed term from the literal Algorithm 1
(tests/test_cross_agg_reference.py) on a detached copy of E, then softmax(E + Omega) V and
the output projection, differentiated by autograd.
"""
import pytest
import torch

from fairseq_ctx.models.transformer_cross_agg import CrossAggregationMultiheadAttention
from fairseq_ctx.modules.cross_aggregation import CrossAggregation
from tests.model_checks import (
    assert_incremental_matches_full,
    assert_reorder_consistent,
    decoder_logits,
    random_batch,
)
from tests.test_cross_agg_model import build_tiny, routed_attentions
from tests.test_cross_agg_reference import literal_cross_aggregation

LENGTH, BSZ, DIM, HEADS = 5, 2, 8, 2
PADDING = torch.tensor([[True, False, False, False, False], [False] * LENGTH])


def attention(stop_gradient, causal=False):
    torch.manual_seed(0)  # the same weights for both settings
    module = CrossAggregationMultiheadAttention(
        DIM, HEADS, self_attention=True,
        routing=dict(vertical=True, horizontal=True, init="self", iters=3, causal=causal,
                     stop_gradient=stop_gradient),
    ).eval()
    with torch.no_grad():
        module.cross_aggregation.head_weight.weight.normal_(std=0.1, generator=torch.Generator().manual_seed(4))
    return module


def inputs():
    return torch.randn(LENGTH, BSZ, DIM, generator=torch.Generator().manual_seed(1))


def loss_of(out):
    return (out * torch.linspace(-1, 1, DIM)).sum()


def reference_with_constant_routed_term(module, x):
    """out_proj(softmax(E + Omega(E detached)) V): Eq. 9 with the routed term as a constant."""
    split = lambda t: t.view(LENGTH, BSZ, HEADS, DIM // HEADS).permute(1, 2, 0, 3)
    q = split(module.q_proj(x) * module.scaling)
    k, v = split(module.k_proj(x)), split(module.v_proj(x))
    logits = (q @ k.transpose(-1, -2)).masked_fill(PADDING[:, None, None, :], float("-inf"))
    router = module.cross_aggregation
    routed = literal_cross_aggregation(
        logits.detach(), PADDING, router.head_weight.weight.detach(), router.vertical, router.horizontal,
        router.init, router.iters, router.causal,
    ).float()
    probs = (logits + routed).softmax(-1)
    return module.out_proj((probs @ v).permute(2, 0, 1, 3).reshape(LENGTH, BSZ, DIM))


def gradients(module, x):
    module.zero_grad()
    out, _ = module(x, x, x, key_padding_mask=PADDING)
    loss_of(out).backward()
    return out.detach(), {name: p.grad.clone() for name, p in module.named_parameters()}


def test_forward_values_are_unchanged():
    x = inputs()
    default_out, _ = gradients(attention(False), x)
    stopped_out, _ = gradients(attention(True), x)
    assert torch.equal(stopped_out, default_out)


def test_query_key_gradient_is_the_one_through_e_only():
    x = inputs()
    _, default = gradients(attention(False), x)
    module = attention(True)
    _, stopped = gradients(module, x)

    module.zero_grad()
    loss_of(reference_with_constant_routed_term(module, x)).backward()
    for name in ("q_proj.weight", "q_proj.bias", "k_proj.weight"):
        expected = dict(module.named_parameters())[name].grad
        torch.testing.assert_close(stopped[name], expected, atol=1e-5, rtol=1e-4)
        # and that is not the default's gradient, which also flows through the routing
        assert (default[name] - stopped[name]).abs().max() > 1e-3 * default[name].abs().max(), name
    # W^v (Eq. 13) still learns, with the same gradient: its path does not go through E's
    # backward, and the forward values are the same
    torch.testing.assert_close(stopped["cross_aggregation.head_weight.weight"],
                               default["cross_aggregation.head_weight.weight"], atol=1e-6, rtol=1e-5)
    assert stopped["cross_aggregation.head_weight.weight"].abs().max() > 0
    # V / out_proj are downstream of the softmax: unaffected
    torch.testing.assert_close(stopped["v_proj.weight"], default["v_proj.weight"], atol=1e-6, rtol=1e-5)


def test_module_returns_a_term_without_gradient_to_the_logits():
    logits = (torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(3)) * 2).requires_grad_()
    routed, _ = CrossAggregation(4, stop_gradient=True)(logits)
    assert torch.autograd.grad(routed.sum(), logits, allow_unused=True)[0] is None
    routed_default, _ = CrossAggregation(4)(logits)
    assert torch.equal(routed, routed_default)
    assert torch.autograd.grad(routed_default.sum(), logits)[0].abs().max() > 0


@pytest.mark.parametrize("side", ["encoder", "both"])
def test_model_forward_identical_and_encoder_query_gradient_differs(side):
    default = build_tiny("--routing-side", side)
    stopped = build_tiny("--routing-side", side, "--routing-stop-gradient")
    assert all(a.cross_aggregation.stop_gradient for a in routed_attentions(stopped))
    src_tokens, src_lengths, prev, _ = random_batch(default, (6, 4, 3), (5, 5, 2))
    grads = []
    for model in (default, stopped):
        # eval mode: no dropout, so the two forwards are deterministic; autograd still runs
        out = decoder_logits(model, src_tokens, src_lengths, prev)
        out.log_softmax(-1).mean().backward()
        grads.append((out.detach(), model.encoder.layers[0].self_attn.q_proj.weight.grad))
    assert torch.equal(grads[0][0], grads[1][0])
    assert (grads[0][1] - grads[1][1]).abs().max() > 1e-3 * grads[0][1].abs().max()


def test_decoder_side_incremental_and_reorder_still_hold():
    model = build_tiny("--routing-side", "decoder", "--routing-stop-gradient", "--routing-ramp-updates", "5")
    model.set_num_updates(2)
    assert_incremental_matches_full(model)
    assert_reorder_consistent(model)


def test_gradient_is_stopped_for_the_first_n_updates_only():
    """--routing-stop-gradient-updates N: the update with u updates done before it (fairseq's
    set_num_updates) routes detached logits while u < N, and trains Eq. 9 as written from u = N."""
    x = inputs()
    default_out, default = gradients(attention(False), x)
    _, stopped = gradients(attention(True), x)
    torch.manual_seed(0)
    module = CrossAggregationMultiheadAttention(
        DIM, HEADS, self_attention=True,
        routing=dict(vertical=True, horizontal=True, init="self", iters=3, causal=False, stop_gradient_updates=3),
    ).eval()
    with torch.no_grad():
        module.cross_aggregation.head_weight.weight.normal_(std=0.1, generator=torch.Generator().manual_seed(4))
    for updates, expected in ((None, stopped), (0, stopped), (2, stopped), (3, default), (40, default), (1, stopped)):
        if updates is not None:
            module.cross_aggregation.set_num_updates(updates)  # what BaseFairseqModel.set_num_updates reaches
        out, grads = gradients(module, x)
        assert torch.equal(out, default_out), updates  # forward values never change
        for name in ("q_proj.weight", "k_proj.weight"):
            assert torch.equal(grads[name], expected[name]), (updates, name)


def test_stop_gradient_for_n_updates_and_for_the_whole_run_exclude_each_other():
    with pytest.raises(ValueError, match="--routing-stop-gradient-updates must be >= 0"):
        build_tiny("--routing-stop-gradient-updates", "-1")
    with pytest.raises(ValueError, match="give one of them"):
        build_tiny("--routing-stop-gradient", "--routing-stop-gradient-updates", "5")
    with pytest.raises(ValueError, match="stop_gradient_updates must be >= 0"):
        CrossAggregation(4, stop_gradient_updates=-2)
    model = build_tiny("--routing-side", "both", "--routing-stop-gradient-updates", "5")
    assert {a.cross_aggregation.stop_gradient_updates for a in routed_attentions(model)} == {5}
    # nothing is added to the state dict: a checkpoint loads into the paper's model
    assert sorted(model.state_dict()) == sorted(build_tiny("--routing-side", "both").state_dict())


def test_stop_for_the_whole_budget_is_a_warning_not_an_error(caplog):
    # a curve point trained on its own to u <= N is part of a longer run: built, with a warning
    with caplog.at_level("WARNING"):
        build_tiny("--routing-stop-gradient-updates", "5", "--max-update", "5")
    assert "for every one of this run's --max-update 5 updates" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        build_tiny("--routing-stop-gradient-updates", "5", "--max-update", "6")
    assert "routing-stop-gradient-updates" not in caplog.text
