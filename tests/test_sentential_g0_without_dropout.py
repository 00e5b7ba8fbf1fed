"""--sentential-g0 no_dropout (initialisation study, issue 15; not in the paper): g0 = MAX(H^0)
(Eq. 7), the query of GLOBAL_ATT (Eq. 6), is taken over the embedding output before the
encoder's dropout instead of fairseq's encoder_states[0] (after it). Only g0 changes.

Reference for H^0 before dropout, from its definition: embed_scale * E[x] + positions
(+ layernorm_embedding), then the channel-wise max over each sentence's non-padding
positions.
"""
import pytest
import torch

from tests.model_checks import (
    assert_incremental_matches_full,
    assert_padding_invariant,
    build_model,
    decoder_logits,
    parse_train_args,
    random_batch,
)

DIMS = [
    "--encoder-embed-dim", "8", "--encoder-ffn-embed-dim", "12", "--encoder-layers", "3",
    "--encoder-attention-heads", "2", "--decoder-embed-dim", "8", "--decoder-ffn-embed-dim", "12",
    "--decoder-layers", "2", "--decoder-attention-heads", "2", "--dropout", "0.3",
]  # fmt: skip


def model_with(g0, deep="rnn", *extra):
    return build_model(["--arch", "transformer_sentential", "--sentential-global", "attention",
                        "--sentential-deep", deep, "--sentential-g0", g0, *DIMS, *extra])[0]


def embedding_max_before_dropout(encoder, src_tokens):
    """MAX(H^0) over non-padding positions, H^0 = scaled embeddings + positions (+ LN)."""
    h0 = encoder.embed_scale * encoder.embed_tokens(src_tokens) + encoder.embed_positions(src_tokens)
    if encoder.layernorm_embedding is not None:
        h0 = encoder.layernorm_embedding(h0)
    keep = src_tokens.ne(encoder.padding_idx)
    return torch.stack([h0[b][keep[b]].amax(dim=0) for b in range(src_tokens.size(0))])


def run_encoder(model, src_tokens, src_lengths, seed=7):
    """Encoder forward in training mode; returns (encoder_out, the g0 GLOBAL_ATT was queried with)."""
    queries = []
    pooling = model.encoder.sentential_context.attentive_pooling
    handle = pooling.register_forward_pre_hook(lambda module, args: queries.append(args[0]))
    try:
        torch.manual_seed(seed)  # the same dropout masks for every model
        out = model.encoder(src_tokens, src_lengths, return_all_hiddens=True)
    finally:
        handle.remove()
    assert len(queries) == 1
    return out, queries[0]


@pytest.mark.parametrize("deep,extra", [
    ("none", []),
    ("rnn", []),
    ("tam", []),
    ("rnn", ["--layernorm-embedding", "--encoder-normalize-before"]),
])
def test_training_g0_is_the_max_over_the_embeddings_before_dropout(deep, extra):
    model = model_with("no_dropout", deep, *extra).train()
    default = model_with("dropout", deep, *extra).train()  # same seed: the same parameters
    src_tokens, src_lengths, _, _ = random_batch(model, (7, 5, 3), (2, 2, 2))
    expected = embedding_max_before_dropout(model.encoder, src_tokens)

    out, g0 = run_encoder(model, src_tokens, src_lengths)
    torch.testing.assert_close(g0, expected, atol=1e-6, rtol=1e-6)

    default_out, default_g0 = run_encoder(default, src_tokens, src_lengths)
    # the default reads fairseq's encoder_states[0], after the dropout: another g0
    h0_after = default_out["encoder_states"][0].masked_fill(src_tokens.t().eq(default.encoder.padding_idx)[..., None], float("-inf"))
    torch.testing.assert_close(default_g0, h0_after.amax(dim=0))
    assert (default_g0 - expected).abs().max() > 1e-3

    # only g0 changes: the layers get the same dropped-out H^0, every H^l is the same
    assert len(out["encoder_states"]) == len(default_out["encoder_states"]) == 4
    for mine, theirs in zip(out["encoder_states"], default_out["encoder_states"]):
        assert torch.equal(mine, theirs)
    assert torch.equal(out["encoder_out"][0], default_out["encoder_out"][0])
    key = "sentential_layers" if deep == "tam" else "sentential_context"
    assert (out[key][0] - default_out[key][0]).abs().max() > 1e-6
    # no reference to the forward's tensors is kept
    assert model.encoder._embedding_before_dropout is None


@pytest.mark.parametrize("deep", ["none", "rnn", "tam"])
def test_eval_mode_is_identical_to_the_default(deep):
    model, default = model_with("no_dropout", deep), model_with("dropout", deep)  # eval mode
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 5, 3), (4, 6, 2))
    with torch.no_grad():
        assert torch.equal(decoder_logits(model, src_tokens, src_lengths, prev),
                           decoder_logits(default, src_tokens, src_lengths, prev))


def test_decoding_checks_hold():
    model = model_with("no_dropout", "tam")
    assert_padding_invariant(model)
    assert_incremental_matches_full(model)


def test_gradient_reaches_the_embeddings_through_the_undropped_g0():
    model = model_with("no_dropout", "none").train()
    src_tokens, src_lengths, _, _ = random_batch(model, (6, 4), (2, 2))
    out, _ = run_encoder(model, src_tokens, src_lengths)
    out["sentential_context"][0].sum().backward()
    assert model.encoder.embed_tokens.weight.grad.abs().sum() > 0


def test_bad_g0_options_are_one_clear_error_at_build_time():
    with pytest.raises(SystemExit):  # argparse: not one of the choices
        parse_train_args(["--arch", "transformer_sentential", "--sentential-g0", "before"])
    with pytest.raises(ValueError, match="--sentential-g0 no_dropout .*--sentential-global mean has no g0"):
        build_model(["--arch", "transformer_sentential", *DIMS, "--sentential-global", "mean",
                     "--sentential-g0", "no_dropout"])
    with pytest.raises(ValueError, match="--sentential-g0 no_dropout cannot be combined with --quant-noise-pq"):
        build_model(["--arch", "transformer_sentential", *DIMS, "--sentential-g0", "no_dropout",
                     "--quant-noise-pq", "0.1"])


def test_default_is_dropout_also_for_checkpoints_without_the_option():
    from fairseq_ctx.models.transformer_sentential import transformer_sentential

    args = parse_train_args(["--arch", "transformer_sentential"])
    assert args.sentential_g0 == "dropout"
    del args.sentential_g0  # a checkpoint written before the option existed
    transformer_sentential(args)
    assert args.sentential_g0 == "dropout"
    assert not model_with("dropout").encoder.g0_without_dropout
