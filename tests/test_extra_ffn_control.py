"""transformer_extra_ffn, the initialisation study's capacity control (init_study/16): a stock
transformer whose encoder FFNs carry N extra hidden units as parameters of their own.

Pinned here: the extra units make each encoder FFN a FFN of F + N units (against a reference
written from the definition, and against a stock fairseq transformer with
--encoder-ffn-embed-dim F + N holding the same weights, dropout included); the model starts
as the stock transformer (outputs and first gradients, output weights E2 = 0, the stock
parameters' values); decoding checks; one clear error for bad options; the fairseq CLI.
(Shared stock weights at one seed: tests/test_controlled_start.py, test_init_study_configs.py.)"""
import math

import pytest
import torch

from fairseq_ctx.modules.extra_ffn_units import ExtraUnitsInput, ExtraUnitsOutput
from tests.model_checks import (
    assert_finite_low_precision,
    assert_incremental_matches_full,
    assert_padding_invariant,
    assert_reorder_consistent,
    build_model,
    decoder_logits,
    random_batch,
)

D, F, N = 16, 32, 12
TINY = [
    "--encoder-embed-dim", str(D), "--encoder-ffn-embed-dim", str(F), "--encoder-layers", "2",
    "--encoder-attention-heads", "2", "--decoder-embed-dim", str(D), "--decoder-ffn-embed-dim", str(F),
    "--decoder-layers", "2", "--decoder-attention-heads", "2",
]  # fmt: skip
STOCK = ["--arch", "transformer", *TINY]
EXTRA = ["--arch", "transformer_extra_ffn", "--encoder-extra-ffn-units", str(N), *TINY]


def randomise_extra_output(model, seed=11):
    """E2 away from its start of 0, so that the extra units change what the model computes."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.encoder.layers:
            layer.fc2.extra_weight.copy_(torch.randn(layer.fc2.extra_weight.shape, generator=generator) * 0.3)
    return model


# ------------------------------------------------------------------ the module
def test_extra_units_compute_a_feed_forward_network_of_f_plus_n_units():
    torch.manual_seed(0)
    fc1, fc2 = ExtraUnitsInput(D, F, N), ExtraUnitsOutput(F, D, N)
    fc1.reset_extra_parameters()
    with torch.no_grad():
        fc2.extra_weight.normal_()
    x = torch.randn(5, 3, D)
    got = fc2(torch.relu(fc1(x)))
    # FFN+(x) = W2 relu(W1 x + b1) + b2 + E2 relu(E1 x + c1), unit by unit
    W1, b1, E1, c1 = fc1.weight, fc1.bias, fc1.extra_weight, fc1.extra_bias
    W2, b2, E2 = fc2.weight, fc2.bias, fc2.extra_weight
    expected = b2.expand(5, 3, D).clone()
    for j in range(F):
        expected = expected + torch.relu(x @ W1[j] + b1[j])[..., None] * W2[:, j]
    for j in range(N):
        expected = expected + torch.relu(x @ E1[j] + c1[j])[..., None] * E2[:, j]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # the hidden layer holds the stock units first, then the extra ones
    hidden = fc1(x)
    assert hidden.shape == (5, 3, F + N)
    torch.testing.assert_close(hidden[..., :F], x @ W1.T + b1)
    torch.testing.assert_close(hidden[..., F:], x @ E1.T + c1)


def test_extra_units_start_like_the_stock_rows_and_the_output_at_zero():
    torch.manual_seed(0)
    fc1, fc2 = ExtraUnitsInput(128, 512, 384), ExtraUnitsOutput(512, 128, 384)
    fc1.reset_extra_parameters()
    bound = 1 / math.sqrt(128)  # nn.Linear's start: uniform in +-1/sqrt(fan_in)
    for extra, stock in ((fc1.extra_weight, fc1.weight), (fc1.extra_bias, fc1.bias)):
        assert extra.abs().max() <= bound and extra.abs().max() > 0.95 * bound
        assert abs(extra.std().item() - stock.std().item()) < 0.05 * stock.std().item()
    assert not fc2.extra_weight.any()
    with pytest.raises(ValueError, match="extra_units"):
        ExtraUnitsInput(4, 8, 0)


# ------------------------------------------------------------------ the model
@pytest.mark.parametrize("train_mode", [False, True])
def test_model_is_the_stock_transformer_with_a_wider_encoder_ffn(train_mode):
    """A stock fairseq transformer with --encoder-ffn-embed-dim F + N, given the same weights
    ([W1; E1], [b1; c1], [W2, E2]), computes the same logits; in train mode with the same
    dropout draws too (dropout and activation dropout on)."""
    dropout = ["--dropout", "0.2", "--activation-dropout", "0.3"]
    model, _ = build_model([*EXTRA, *dropout], seed=1)
    randomise_extra_output(model)
    wide, _ = build_model(["--arch", "transformer", *TINY, "--encoder-ffn-embed-dim", str(F + N), *dropout], seed=2)
    ours = model.state_dict()
    with torch.no_grad():
        for name, tensor in wide.state_dict().items():
            if ".fc1.weight" in name and name.startswith("encoder."):
                value = torch.cat([ours[name], ours[name.replace("weight", "extra_weight")]], 0)
            elif ".fc1.bias" in name and name.startswith("encoder."):
                value = torch.cat([ours[name], ours[name.replace("bias", "extra_bias")]], 0)
            elif ".fc2.weight" in name and name.startswith("encoder."):
                value = torch.cat([ours[name], ours[name.replace("weight", "extra_weight")]], 1)
            else:
                value = ours[name]
            tensor.copy_(value)
    batch = random_batch(model, (7, 5, 3), (4, 6, 2))[:3]
    for m in (model, wide):
        m.train(train_mode)
    torch.manual_seed(7)
    got = decoder_logits(model, *batch)
    torch.manual_seed(7)
    expected = decoder_logits(wide, *batch)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # not vacuous: the extra units change the output
    stock, _ = build_model([*STOCK, *dropout], seed=1)
    stock.train(train_mode)
    torch.manual_seed(7)
    assert (decoder_logits(stock, *batch) - got).abs().max() > 1e-3


@pytest.mark.parametrize("train_mode", [False, True])
def test_model_starts_as_the_stock_transformer(train_mode):
    """At one seed: the same logits and the same gradients for every stock parameter at the
    first step (dropout on, the same draws); E2's gradient is not 0, E1's is (E2 = 0)."""
    model, _ = build_model([*EXTRA, "--dropout", "0.2"], seed=3)
    stock, _ = build_model([*STOCK, "--dropout", "0.2"], seed=3)
    batch = random_batch(model, (7, 5, 3), (4, 6, 2))[:3]
    outputs = []
    for m in (model, stock):
        m.train(train_mode)
        torch.manual_seed(9)
        logits = decoder_logits(m, *batch)
        logits.log_softmax(-1)[..., 3].sum().backward()
        outputs.append(logits)
    torch.testing.assert_close(outputs[0], outputs[1], atol=1e-6, rtol=1e-6)
    ours = dict(model.named_parameters())
    for name, parameter in stock.named_parameters():
        torch.testing.assert_close(ours[name].grad, parameter.grad, atol=1e-6, rtol=1e-5, msg=name)
    for layer in model.encoder.layers:
        assert not layer.fc2.extra_weight.any()
        assert layer.fc2.extra_weight.grad.abs().max() > 1e-4
        assert not layer.fc1.extra_weight.grad.any() and not layer.fc1.extra_bias.grad.any()


def test_extra_units_differ_between_layers_and_seeds():
    first, _ = build_model(EXTRA, seed=1)
    again, _ = build_model(EXTRA, seed=1)
    other, _ = build_model(EXTRA, seed=2)
    layers = [layer.fc1.extra_weight for layer in first.encoder.layers]
    assert not torch.equal(layers[0], layers[1])
    assert torch.equal(layers[0], again.encoder.layers[0].fc1.extra_weight)
    assert not torch.equal(layers[0], other.encoder.layers[0].fc1.extra_weight)


def test_extra_units_draw_from_their_own_stream():
    """E1 depends on the seed and the layer's name only: not on how many numbers the stock
    layers drew before it (another vocabulary size: other embedding draws), while every stock
    tensor after the embeddings moves with those draws."""
    small, _ = build_model(EXTRA, vocab_size=40, seed=5)
    large, _ = build_model(EXTRA, vocab_size=60, seed=5)
    assert not torch.equal(small.encoder.layers[0].fc1.weight, large.encoder.layers[0].fc1.weight)
    for a, b in zip(small.encoder.layers, large.encoder.layers):
        assert torch.equal(a.fc1.extra_weight, b.fc1.extra_weight)
        assert torch.equal(a.fc1.extra_bias, b.fc1.extra_bias)
    # and not a copy of a stock tensor drawn nearby (a stream left unseeded would continue the
    # global one): E1 is uncorrelated with the layer's own stock weights
    layer = small.encoder.layers[0]
    for stock in (layer.fc1.weight[:N], layer.fc2.weight.T[:N, :D], layer.self_attn.out_proj.weight[:N]):
        correlation = torch.corrcoef(torch.stack([layer.fc1.extra_weight.flatten(), stock.flatten()]))[0, 1]
        assert abs(correlation) < 0.2


def test_activation_checkpointing_and_return_fc_reach_the_layers():
    from fairseq.models.transformer import TransformerConfig

    from fairseq_ctx.models.transformer_extra_ffn import ExtraFfnTransformerEncoder

    plain, _ = build_model([*EXTRA, "--dropout", "0"], seed=4)  # train mode, dropout off
    checkpointed, _ = build_model([*EXTRA, "--dropout", "0", "--checkpoint-activations"], seed=4)
    assert all(hasattr(layer, "precheckpoint_forward") for layer in checkpointed.encoder.layers)
    assert not any(hasattr(layer, "precheckpoint_forward") for layer in plain.encoder.layers)
    randomise_extra_output(plain), randomise_extra_output(checkpointed)
    batch = random_batch(plain, (7, 5, 3), (4, 6, 2))[:3]
    for model in (plain, checkpointed):
        model.train()
        decoder_logits(model, *batch).log_softmax(-1)[..., 3].sum().backward()
    grads = dict(checkpointed.named_parameters())
    for name, parameter in plain.named_parameters():
        torch.testing.assert_close(grads[name].grad, parameter.grad, atol=1e-6, rtol=1e-5, msg=name)
    encoder = ExtraFfnTransformerEncoder(TransformerConfig.from_namespace(plain.args), plain.encoder.dictionary,
                                         plain.encoder.embed_tokens, return_fc=True)
    assert all(layer.return_fc for layer in encoder.layers)


def test_pruning_helpers_refuse_rather_than_drop_the_extra_units():
    layer = build_model(EXTRA)[0].encoder.layers[0]
    for call in (lambda: layer._get_fc_rank(2), lambda: layer._prune_fc_layer([0])):
        with pytest.raises(NotImplementedError, match="extra units"):
            call()


def test_hidden_dropout_warns_that_later_masks_are_unpaired(caplog):
    with caplog.at_level("WARNING"):
        build_model(EXTRA)
    assert "every later dropout mask differs" not in caplog.text
    with caplog.at_level("WARNING"):
        build_model([*EXTRA, "--activation-dropout", "0.1"])
    assert "every later dropout mask differs" in caplog.text


def test_padding_incremental_and_reorder_checks():
    model = randomise_extra_output(build_model(EXTRA)[0])
    assert_padding_invariant(model)
    assert_incremental_matches_full(model)
    assert_reorder_consistent(model)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_finite_in_low_precision(dtype):
    assert_finite_low_precision(randomise_extra_output(build_model(EXTRA)[0]), dtype)


# ------------------------------------------------------------------ options
@pytest.mark.parametrize("extra, message", [
    ([], "--encoder-extra-ffn-units N is required"),
    (["--encoder-extra-ffn-units", "0"], "use --arch transformer"),
    (["--encoder-extra-ffn-units", "-3"], "must be an integer >= 1"),
    (["--encoder-extra-ffn-units", "8", "--quant-noise-pq", "0.1"], "--quant-noise-pq"),
    (["--encoder-extra-ffn-units", "8", "--quant-noise-scalar", "0.1"], "--quant-noise-scalar"),
])
def test_bad_options_fail_with_one_clear_error(extra, message):
    with pytest.raises(ValueError, match="transformer_extra_ffn: .*" + message.replace("-", r"\-")):
        build_model(["--arch", "transformer_extra_ffn", *TINY, *extra])


def test_cli_train_resume_generate_interactive(cli_roundtrip):
    cli_roundtrip(["--arch", "transformer_extra_ffn", "--encoder-extra-ffn-units", "8", *TINY,
                   "--share-decoder-input-output-embed"])
