"""--routing-ramp-updates N (initialisation study, issue 15; not in the paper): Eq. 9 becomes
E^ = E + r(u) (Omega^v + Omega^h) with r(u) = min(1, u/N) after u updates.

The references are written from the equations: E = q k^T / sqrt(d_head) with fairseq's masks,
Omega^v + Omega^h from the literal, loop-by-loop Algorithm 1 of tests/test_cross_agg_reference.py,
then softmax(E + r Omega) V and the output projection. The model-level checks compare with the
stock transformer (r = 0: the routed term is zero, and controlled starts make every other
parameter the stock one) and with the model without a ramp (r = 1: Eq. 9 exactly).
"""
import pytest
import torch

from fairseq import checkpoint_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from fairseq_ctx.models.transformer_cross_agg import CrossAggregationMultiheadAttention
from fairseq_ctx.modules.cross_aggregation import CrossAggregation
from tests.model_checks import (
    assert_incremental_matches_full,
    assert_padding_invariant,
    assert_reorder_consistent,
    build_model,
    decoder_logits,
    make_dictionary,
    parse_train_args,
    random_batch,
)
from tests.test_cross_agg_model import TINY, build_tiny, routed_attentions
from tests.test_cross_agg_reference import literal_cross_aggregation

N = 4


def routers(model):
    return [attention.cross_aggregation for attention in routed_attentions(model)]


def attention_reference(attention, x, padding, ramp):
    """out_proj(softmax(E + r (Omega^v + Omega^h)) V) for one self-attention call (Eq. 9)."""
    length, bsz, dim = x.shape
    heads = attention.num_heads
    split = lambda t: t.view(length, bsz, heads, dim // heads).permute(1, 2, 0, 3)  # (bsz, H, L, d)
    q = split(attention.q_proj(x) * attention.scaling)
    k, v = split(attention.k_proj(x)), split(attention.v_proj(x))
    logits = (q @ k.transpose(-1, -2)).masked_fill(padding[:, None, None, :], float("-inf"))
    router = attention.cross_aggregation
    routed = literal_cross_aggregation(
        logits.detach(), padding, router.head_weight.weight.detach(), router.vertical, router.horizontal,
        router.init, router.iters, router.causal,
    ).float()
    probs = (logits + ramp * routed).softmax(-1)
    return attention.out_proj((probs @ v).permute(2, 0, 1, 3).reshape(length, bsz, dim))


def ramped_attention():
    torch.manual_seed(0)
    attention = CrossAggregationMultiheadAttention(
        8, 2, self_attention=True,
        routing=dict(vertical=True, horizontal=True, init="zero", iters=3, causal=False, ramp_updates=N),
    ).eval()
    with torch.no_grad():
        attention.cross_aggregation.head_weight.weight.normal_(std=0.1)
    return attention


@pytest.mark.parametrize("updates,ramp", [(0, 0.0), (1, 0.25), (2, 0.5), (N, 1.0), (3 * N, 1.0)])
def test_attention_adds_the_routed_term_scaled_by_min_1_u_over_n(updates, ramp):
    attention = ramped_attention()
    attention.cross_aggregation.set_num_updates(updates)
    assert attention.cross_aggregation.ramp_factor == ramp
    x = torch.randn(5, 2, 8, generator=torch.Generator().manual_seed(1))
    padding = torch.tensor([[True, True, False, False, False], [False] * 5])
    out, _ = attention(x, x, x, key_padding_mask=padding)
    expected = attention_reference(attention, x, padding, ramp)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    if ramp < 1.0:  # the reference tells the ramp apart: the full routed term gives another output
        assert not torch.allclose(out, attention_reference(attention, x, padding, 1.0), atol=1e-4)


def test_ramp_starts_at_zero_and_counts_updates_from_fairseqs_hook():
    model = build_tiny("--routing-side", "both", "--routing-ramp-updates", str(N))
    assert [r.ramp_factor for r in routers(model)] == [0.0] * 4
    # BaseFairseqModel.set_num_updates (what fairseq's train_step calls) reaches every router
    for updates, ramp in ((1, 0.25), (3, 0.75), (N, 1.0), (N + 7, 1.0)):
        model.set_num_updates(updates)
        assert [r.ramp_factor for r in routers(model)] == [ramp] * 4
        assert all(int(r.num_updates) == updates for r in routers(model))
    # without a ramp the factor is 1 whatever fairseq reports
    plain = build_tiny("--routing-side", "both")
    plain.set_num_updates(0)
    assert [r.ramp_factor for r in routers(plain)] == [1.0] * 4


STOCK_DIMS = ["--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-layers", "2",
              "--encoder-attention-heads", "4", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32",
              "--decoder-layers", "2", "--decoder-attention-heads", "4"]


@pytest.mark.parametrize("side", ["encoder", "both"])
def test_at_update_zero_the_model_is_the_stock_transformer(side):
    """r(0) = 0: the routed term is zero, and (controlled start, same seed) every other
    parameter is the stock transformer's, so the outputs are the stock model's."""
    stock, _ = build_model(["--arch", "transformer", *STOCK_DIMS], seed=3)
    ramped, _ = build_model(["--arch", "transformer_cross_agg", *STOCK_DIMS, "--routing-side", side,
                             "--routing-ramp-updates", str(N)], seed=3)
    paper, _ = build_model(["--arch", "transformer_cross_agg", *STOCK_DIMS, "--routing-side", side], seed=3)
    src_tokens, src_lengths, prev, _ = random_batch(stock, (7, 5, 3), (4, 6, 2))
    with torch.no_grad():
        expected = decoder_logits(stock, src_tokens, src_lengths, prev)
        ramped.set_num_updates(0)
        torch.testing.assert_close(decoder_logits(ramped, src_tokens, src_lengths, prev), expected,
                                   atol=1e-5, rtol=1e-5)
        # the routed term is not negligible: without the ramp the model differs from stock
        assert (decoder_logits(paper, src_tokens, src_lengths, prev) - expected).abs().max() > 1e-3
        # after N updates: exactly the paper's Eq. 9 (the model without a ramp)
        ramped.set_num_updates(N)
        assert torch.equal(decoder_logits(ramped, src_tokens, src_lengths, prev),
                           decoder_logits(paper, src_tokens, src_lengths, prev))


def test_incremental_beam_and_padding_checks_hold_mid_ramp():
    model = build_tiny("--routing-side", "both", "--routing-ramp-updates", "10")
    model.set_num_updates(3)  # r = 0.3
    assert_padding_invariant(model)
    assert_incremental_matches_full(model, tgt_len=7)
    assert_reorder_consistent(model)
    # not vacuous: the mid-ramp model is neither the r = 0 nor the r = 1 model
    src_tokens, src_lengths, prev, _ = random_batch(model, (6, 5, 4), (6, 6, 6))
    with torch.no_grad():
        mid = decoder_logits(model, src_tokens, src_lengths, prev)
        for updates in (0, 10):
            model.set_num_updates(updates)
            assert (decoder_logits(model, src_tokens, src_lengths, prev) - mid).abs().max() > 1e-4


def test_decoder_only_ramp_incremental_matches_full():
    model = build_tiny("--routing-side", "decoder", "--routing-ramp-updates", "8", "--routing-init", "self")
    model.set_num_updates(2)
    assert_incremental_matches_full(model, tgt_len=7)
    assert_reorder_consistent(model)


def test_gradient_through_the_ramped_term_scales_with_r():
    """W^v (Eq. 13) only acts through the routed term: its gradient is r times the unramped one."""
    grads = {}
    for ramp_updates, updates in ((0, 0), (N, 1)):  # r = 1 (no ramp) and r = 0.25
        router = CrossAggregation(4, ramp_updates=ramp_updates)
        with torch.no_grad():
            router.head_weight.weight.copy_(torch.randn(4, 4, generator=torch.Generator().manual_seed(2)) * 0.1)
        router.set_num_updates(updates)
        logits = torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(3)) * 2
        routed, _ = router(logits)
        # a weight that differs per head: a head-independent one has zero gradient w.r.t. lambda
        (routed * torch.randn(routed.shape, generator=torch.Generator().manual_seed(4))).sum().backward()
        grads[ramp_updates] = router.head_weight.weight.grad
    assert grads[0].abs().max() > 1e-3
    torch.testing.assert_close(grads[N], 0.25 * grads[0])


# -- the factor after a checkpoint reload ----------------------------------------------


def save_checkpoint(path, args, model, num_updates):
    """The fields of a fairseq checkpoint that the loaders read."""
    state = {
        "cfg": convert_namespace_to_omegaconf(args),
        "model": model.state_dict(),
        "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam",
                               "lr_scheduler_state": {"best": None}, "num_updates": num_updates}],
        "extra_state": {},
        "last_optimizer_state": None,
    }
    torch.save(state, path)


@pytest.mark.parametrize("model_updates,checkpoint_updates,ramp", [(9, 10, 1.0), (1, 2, 0.25)])
def test_generation_loads_the_ramp_factor_the_checkpoint_was_trained_with(tmp_path, model_updates,
                                                                          checkpoint_updates, ramp):
    """fairseq-generate's loader (checkpoint_utils.load_model_ensemble_and_task) builds the model,
    calls set_num_updates with the checkpoint's count, then load_state_dict. fairseq's train_step
    calls set_num_updates(u) with the updates done BEFORE the step, so a checkpoint saved after U
    updates holds u = U - 1: the reloaded model computes what the trainer saved."""
    extra = ["--routing-side", "both", "--routing-ramp-updates", str(N)]
    options = ["--arch", "transformer_cross_agg", *TINY, *extra]
    model = build_tiny(*extra)
    model.set_num_updates(model_updates)
    for lang in ("src", "tgt"):
        make_dictionary(40).save(str(tmp_path / f"dict.{lang}.txt"))
    path = str(tmp_path / "checkpoint.pt")
    save_checkpoint(path, parse_train_args(options, data=str(tmp_path)), model, checkpoint_updates)

    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": str(tmp_path)})
    loaded = models[0].eval()
    assert [r.ramp_factor for r in routers(loaded)] == [ramp] * 4
    src_tokens, src_lengths, prev, _ = random_batch(model, (6, 4), (5, 5))
    with torch.no_grad():
        assert torch.equal(decoder_logits(loaded, src_tokens, src_lengths, prev),
                           decoder_logits(model, src_tokens, src_lengths, prev))

    # load_state_dict alone (no set_num_updates, e.g. a script of one's own) restores it too
    fresh = build_tiny(*extra, seed=5)
    assert [r.ramp_factor for r in routers(fresh)] == [0.0] * 4
    fresh.load_state_dict(torch.load(path, weights_only=False)["model"])
    assert [r.ramp_factor for r in routers(fresh)] == [ramp] * 4


def test_ramp_counter_is_in_the_state_dict_only_with_a_ramp():
    ramped = build_tiny("--routing-ramp-updates", str(N))
    assert sorted(k for k in ramped.state_dict() if k.endswith("num_updates")) == [
        "encoder.layers.0.self_attn.cross_aggregation.num_updates",
        "encoder.layers.1.self_attn.cross_aggregation.num_updates",
    ]
    assert not [k for k in build_tiny().state_dict() if k.endswith("num_updates")]
    # a buffer, not a parameter: the optimiser never sees it
    assert not [n for n, _ in ramped.named_parameters() if n.endswith("num_updates")]


def test_bad_ramp_is_one_clear_error_at_build_time():
    with pytest.raises(ValueError, match="--routing-ramp-updates must be >= 0"):
        build_model(["--arch", "transformer_cross_agg", *TINY, "--routing-ramp-updates", "-1"])
    with pytest.raises(ValueError, match="ramp_updates must be >= 0"):
        CrossAggregation(4, ramp_updates=-3)


def test_checkpoints_without_the_options_default_to_the_paper():
    from fairseq_ctx.models.transformer_cross_agg import cross_agg_defaults

    args = parse_train_args(["--arch", "transformer_cross_agg"])
    assert (args.routing_ramp_updates, args.routing_stop_gradient) == (0, False)
    for name in ("routing_ramp_updates", "routing_stop_gradient"):
        delattr(args, name)  # a checkpoint written before the options existed
    cross_agg_defaults(args)
    assert (args.routing_ramp_updates, args.routing_stop_gradient) == (0, False)
