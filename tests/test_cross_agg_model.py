"""fairseq-level tests of transformer_cross_agg: options, parameter counts, and the generic
padding / incremental / beam-reorder / low-precision checks for every routing variant."""
import pytest
import torch

from tests.model_checks import (
    assert_finite_low_precision,
    assert_incremental_matches_full,
    assert_padding_invariant,
    assert_reorder_consistent,
    build_model,
    decoder_logits,
    parse_train_args,
    random_batch,
)
from fairseq_ctx.models.transformer_cross_agg import CrossAggregationMultiheadAttention

TINY = [
    "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-layers", "2",
    "--encoder-attention-heads", "4", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32",
    "--decoder-layers", "2", "--decoder-attention-heads", "4",
]
# Table 1 rows 2-5, plus vertical routing alone
VARIANTS = {
    "h-zero": ["--no-routing-vertical", "--routing-horizontal", "--routing-init", "zero"],
    "h-self": ["--no-routing-vertical", "--routing-horizontal", "--routing-init", "self"],
    "vh-zero": ["--routing-vertical", "--routing-horizontal", "--routing-init", "zero"],
    "vh-self": ["--routing-vertical", "--routing-horizontal", "--routing-init", "self"],
    "v-zero": ["--routing-vertical", "--no-routing-horizontal"],
}


def routed_attentions(model):
    return [m for m in model.modules() if isinstance(m, CrossAggregationMultiheadAttention)]


def build_tiny(*extra, seed=0):
    model, _ = build_model(["--arch", "transformer_cross_agg", *TINY, *extra], seed=seed)
    # W^v is zero-initialised (uniform lambda); random small weights make the checks
    # below exercise Eq. 13 too.
    generator = torch.Generator().manual_seed(seed + 11)
    with torch.no_grad():
        for attention in routed_attentions(model):
            if attention.cross_aggregation.head_weight is not None:
                attention.cross_aggregation.head_weight.weight.normal_(std=0.05, generator=generator)
    return model


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())


def test_named_archs_default_to_table1_row4_on_the_encoder():
    args = parse_train_args(["--arch", "transformer_cross_agg"])
    assert (args.routing_vertical, args.routing_horizontal, args.routing_init, args.routing_iters,
            args.routing_side) == (True, True, "zero", 3, "encoder")
    assert (args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_attention_heads,
            args.encoder_layers, args.decoder_layers) == (512, 2048, 8, 6, 6)
    big = parse_train_args(["--arch", "transformer_cross_agg_big"])
    assert (big.encoder_embed_dim, big.encoder_ffn_embed_dim, big.encoder_attention_heads,
            big.decoder_attention_heads, big.dropout) == (1024, 4096, 16, 16, 0.3)
    assert (big.routing_vertical, big.routing_horizontal, big.routing_init, big.routing_iters,
            big.routing_side) == (True, True, "zero", 3, "encoder")


def test_cli_options_reach_every_routed_layer():
    model = build_tiny("--no-routing-vertical", "--routing-init", "self", "--routing-iters", "2",
                       "--routing-side", "both")
    routers = [a.cross_aggregation for a in routed_attentions(model)]
    assert len(routers) == 4  # 2 encoder + 2 decoder self-attention layers
    assert all((r.vertical, r.horizontal, r.init, r.iters) == (False, True, "self", 2) for r in routers)
    assert [r.causal for r in routers] == [False, False, True, True]
    # encoder-decoder attention is never routed
    assert all(not isinstance(layer.encoder_attn, CrossAggregationMultiheadAttention) for layer in model.decoder.layers)


@pytest.mark.parametrize(
    "arch,stock_arch,heads,extra,routed_layers",
    [
        ("transformer_cross_agg", "transformer", 8, [], 6),
        ("transformer_cross_agg", "transformer", 8, ["--routing-side", "both"], 12),
        ("transformer_cross_agg", "transformer", 8, ["--no-routing-vertical"], 0),
        ("transformer_cross_agg_big", "transformer_vaswani_wmt_en_de_big", 16, [], 6),
    ],
)
def test_parameter_count_is_stock_plus_one_head_matrix_per_routed_layer(arch, stock_arch, heads, extra, routed_layers):
    """Only W^v (H x H, Eq. 13) is new: votes are the logits themselves, no vote matrices."""
    shared = ["--share-decoder-input-output-embed"]
    model, _ = build_model(["--arch", arch, *shared, *extra], vocab_size=1000)
    stock, _ = build_model(["--arch", stock_arch, *shared], vocab_size=1000)
    assert count_parameters(model) - count_parameters(stock) == routed_layers * heads * heads


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_encoder_side_padding_invariant(variant):
    assert_padding_invariant(build_tiny(*VARIANTS[variant]))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_decoder_side_padding_incremental_and_reorder(variant):
    model = build_tiny("--routing-side", "decoder", *VARIANTS[variant])
    assert_padding_invariant(model)
    assert_incremental_matches_full(model)
    assert_reorder_consistent(model)


def test_both_sides_padding_incremental_and_reorder_with_five_iterations():
    model = build_tiny("--routing-side", "both", "--routing-iters", "5")
    assert_padding_invariant(model)
    assert_incremental_matches_full(model, tgt_len=8)
    assert_reorder_consistent(model)


@pytest.mark.parametrize("side", ["encoder", "both"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_forward_backward_finite(side, dtype):
    assert_finite_low_precision(build_tiny("--routing-side", side, "--routing-init", "self"), dtype)


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_routing_changes_the_translation_scores(side):
    """The routed term is wired into the softmax: zeroing it changes the model's output."""
    model = build_tiny("--routing-side", side)
    src_tokens, src_lengths, prev, _ = random_batch(model, (5, 3), (4, 4))
    with torch.no_grad():
        routed = decoder_logits(model, src_tokens, src_lengths, prev)
        for attention in routed_attentions(model):
            attention.cross_aggregation.forward = lambda logits, *a, **k: (torch.zeros_like(logits, dtype=torch.float32), {})
        plain = decoder_logits(model, src_tokens, src_lengths, prev)
    assert (routed - plain).abs().max() > 1e-4


def test_attention_softmax_uses_routed_logits_eq9():
    """CrossAggregationMultiheadAttention == softmax(E + Omega^v + Omega^h) V, then out_proj."""
    torch.manual_seed(0)
    attention = CrossAggregationMultiheadAttention(
        8, 2, self_attention=True, routing=dict(vertical=True, horizontal=True, init="self", iters=3, causal=False)
    ).eval()
    with torch.no_grad():
        attention.cross_aggregation.head_weight.weight.normal_(std=0.1)
    x = torch.randn(5, 2, 8)
    padding = torch.tensor([[True, True, False, False, False], [False] * 5])
    out, weights = attention(x, x, x, key_padding_mask=padding, need_weights=True, need_head_weights=True)

    q = attention.q_proj(x) * attention.scaling
    k, v = attention.k_proj(x), attention.v_proj(x)
    split = lambda t: t.view(5, 2, 2, 4).permute(1, 2, 0, 3)  # (bsz, H, L, d_head)
    logits = split(q) @ split(k).transpose(-1, -2)
    logits = logits.masked_fill(padding[:, None, None, :], float("-inf"))
    routed, _ = attention.cross_aggregation(logits, padding)
    probs = (logits + routed).softmax(-1)
    expected = attention.out_proj((probs @ split(v)).permute(2, 0, 1, 3).reshape(5, 2, 8))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights, probs.transpose(0, 1), atol=1e-6, rtol=1e-5)
    assert not torch.allclose(probs, logits.softmax(-1), atol=1e-3)


def test_attention_dropout_reaches_every_routed_layer():
    model = build_tiny("--routing-side", "both", "--attention-dropout", "0.3")
    attentions = routed_attentions(model)
    assert len(attentions) == 4 and [a.dropout_module.p for a in attentions] == [0.3] * 4


def test_attention_dropout_drops_the_routed_probabilities():
    """Train mode with --attention-dropout: out_proj(dropout(softmax(E + Omega^v + Omega^h)) V),
    fairseq's placement; the reference replays F.dropout's mask from the same RNG state. (The
    equation tests run with attention dropout 0, so a tail that lost it passed them.)"""
    torch.manual_seed(0)
    attention = CrossAggregationMultiheadAttention(
        8, 2, dropout=0.3, self_attention=True,
        routing=dict(vertical=True, horizontal=True, init="self", iters=3, causal=False)).train()
    with torch.no_grad():
        attention.cross_aggregation.head_weight.weight.normal_(std=0.1)
    x = torch.randn(5, 2, 8)
    padding = torch.tensor([[True, True, False, False, False], [False] * 5])
    torch.manual_seed(7)
    out, _ = attention(x, x, x, key_padding_mask=padding, need_weights=False)

    q = attention.q_proj(x) * attention.scaling
    k, v = attention.k_proj(x), attention.v_proj(x)
    split = lambda t: t.view(5, 2, 2, 4).permute(1, 2, 0, 3)  # (bsz, H, L, d_head)
    logits = (split(q) @ split(k).transpose(-1, -2)).masked_fill(padding[:, None, None, :], float("-inf"))
    routed, _ = attention.cross_aggregation(logits, padding)
    probs = (logits + routed).softmax(-1)
    torch.manual_seed(7)
    dropped = torch.nn.functional.dropout(probs, 0.3, training=True)
    expected = attention.out_proj((dropped @ split(v)).permute(2, 0, 1, 3).reshape(5, 2, 8))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    without = attention.out_proj((probs @ split(v)).permute(2, 0, 1, 3).reshape(5, 2, 8))
    assert (out - without).abs().max() > 1e-2  # the mask did something


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--routing-init", "self", "--no-routing-horizontal"], "--routing-init self"),
        (["--no-routing-vertical", "--no-routing-horizontal"], "nothing to route"),
        (["--routing-iters", "0"], "--routing-iters"),
        (["--routing-side", "decoder", "--cross-self-attention"], "--cross-self-attention"),
    ],
)
def test_bad_option_combinations_rejected_at_build_time(extra, message):
    with pytest.raises(ValueError, match=message):
        build_model(["--arch", "transformer_cross_agg", *TINY, *extra])


def test_cross_self_attention_is_fine_when_only_the_encoder_routes():
    model = build_tiny("--routing-side", "encoder", "--cross-self-attention")
    assert len(routed_attentions(model)) == 2
