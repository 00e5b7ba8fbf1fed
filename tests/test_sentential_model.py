"""transformer_sentential as a fairseq model: Table 1 parameter deltas, generic
decoding checks for every GLOBAL x DEEP combination, beam search, options."""
import copy
import os
import shlex

import pytest
import torch

import fairseq_ctx.models  # noqa: F401  (registers transformer_sentential with fairseq)
from fairseq.sequence_generator import SequenceGenerator
from fairseq_ctx.models.transformer_sentential import SententialDecoderLayer
from fairseq_ctx.paths import CONFIGS
from tests.model_checks import (
    assert_finite_low_precision,
    assert_incremental_matches_full,
    assert_padding_invariant,
    assert_reorder_consistent,
    build_model,
    encode,
    parse_train_args,
    random_batch,
)

TINY = [
    "--encoder-embed-dim", "8", "--encoder-ffn-embed-dim", "12", "--encoder-layers", "3",
    "--encoder-attention-heads", "2", "--decoder-embed-dim", "8", "--decoder-ffn-embed-dim", "12",
    "--decoder-layers", "2", "--decoder-attention-heads", "2", "--dropout", "0",
]  # fmt: skip
COMBINATIONS = [(g, d) for g in ("mean", "max", "attention") for d in ("none", "rnn", "tam")]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def tiny(global_type, deep_type, *extra):
    return build_model(
        ["--arch", "transformer_sentential", "--sentential-global", global_type,
         "--sentential-deep", deep_type, *TINY, *extra]
    )[0]  # fmt: skip


# ---------------------------------------------------------------- Table 1 parameter counts
@pytest.fixture(scope="module")
def base_params():
    return n_params(build_model(["--arch", "transformer"])[0])


@pytest.mark.parametrize(
    "global_type, deep_type, paper_delta",
    [
        ("mean", "none", 18.9e6),  # row 3
        ("max", "none", 18.9e6),  # row 4
        ("attention", "none", 19.9e6),  # row 5
        ("attention", "rnn", 26.8e6),  # row 6
        ("attention", "tam", 26.4e6),  # row 7
    ],
)
def test_parameter_delta_over_base_matches_table1(base_params, global_type, deep_type, paper_delta):
    model = build_model(
        ["--arch", "transformer_sentential", "--sentential-global", global_type,
         "--sentential-deep", deep_type]
    )[0]  # fmt: skip
    delta = n_params(model) - base_params
    assert abs(delta - paper_delta) <= 0.2e6, f"+{delta / 1e6:.3f}M vs paper +{paper_delta / 1e6}M"


def test_medium_baseline_config_adds_25_2m_over_base(base_params):  # Table 1 row 2
    with open(os.path.join(CONFIGS, "wang2019", "transformer_medium.args")) as handle:
        medium_args = shlex.split(handle.read())
    assert medium_args[:2] == ["--arch", "transformer"]  # a config of stock transformer
    delta = n_params(build_model(medium_args)[0]) - base_params
    assert abs(delta - 25.2e6) <= 0.1e6, f"+{delta / 1e6:.3f}M"


def test_named_architectures_have_the_papers_settings():
    base = parse_train_args(["--arch", "transformer_sentential"])
    assert (base.sentential_global, base.sentential_deep) == ("attention", "rnn")
    assert (base.encoder_embed_dim, base.decoder_ffn_embed_dim, base.decoder_attention_heads) == (512, 2048, 8)
    big = parse_train_args(["--arch", "transformer_sentential_big"])
    assert (big.sentential_global, big.sentential_deep) == ("attention", "tam")
    assert (big.encoder_embed_dim, big.decoder_ffn_embed_dim, big.decoder_attention_heads) == (1024, 4096, 16)
    override = parse_train_args(["--arch", "transformer_sentential", "--sentential-global", "mean",
                                 "--sentential-deep", "tam"])  # fmt: skip
    assert (override.sentential_global, override.sentential_deep) == ("mean", "tam")


# ---------------------------------------------------------------- generic decoding checks
@pytest.mark.parametrize("global_type, deep_type", COMBINATIONS)
def test_padding_incremental_and_reorder_checks(global_type, deep_type):
    model = tiny(global_type, deep_type)
    assert_padding_invariant(model)
    assert_incremental_matches_full(model)
    assert_reorder_consistent(model)


@pytest.mark.parametrize("deep_type", ["rnn", "tam"])
def test_prenorm_model_passes_decoding_checks(deep_type):
    model = tiny("attention", deep_type, "--encoder-normalize-before", "--decoder-normalize-before")
    assert_padding_invariant(model)
    assert_incremental_matches_full(model)
    assert_reorder_consistent(model)


@pytest.mark.parametrize("global_type, deep_type", [("max", "none"), ("attention", "rnn"), ("attention", "tam")])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_finite_in_low_precision(global_type, deep_type, dtype):
    assert_finite_low_precision(tiny(global_type, deep_type), dtype)


# ---------------------------------------------------------------- what flows where
@pytest.mark.parametrize("deep_type, key, shape", [("none", "sentential_context", (3, 8)),
                                                   ("rnn", "sentential_context", (3, 8)),
                                                   ("tam", "sentential_layers", (3, 3, 8))])  # fmt: skip
def test_generation_encoder_out_carries_context_through_reorder(deep_type, key, shape):
    model = tiny("attention", deep_type)
    src_tokens, src_lengths, _, _ = random_batch(model, (6, 4, 5), (2, 2, 2))
    with torch.no_grad():
        encoder_out = encode(model, src_tokens, src_lengths)  # no return_all_hiddens, as in generate
        assert encoder_out["encoder_states"] == []  # not handed out when not asked for
        context = encoder_out[key][0]
        assert context.shape == shape
        order = torch.tensor([2, 2, 0])
        reordered = model.encoder.reorder_encoder_out(encoder_out, order)
    torch.testing.assert_close(reordered[key][0], context[order])


def test_deep_context_reads_every_encoder_layer():
    """Eq. 8: the deep context has a gradient path through every encoder layer's pool."""
    src_tokens, src_lengths, prev, _ = random_batch(tiny("mean", "none"), (6, 4), (3, 3))
    for deep_type in ("rnn", "tam"):
        model = tiny("attention", deep_type)
        model(src_tokens, src_lengths, prev)[0].sum().backward()
        grad = model.encoder.sentential_context.attentive_pooling.v_weight.grad
        assert grad.shape[0] == 3 and all(grad[layer].abs().sum() > 0 for layer in range(3))
    # and the decoder output depends on g through the g half of FFN_l's first matrix
    model = tiny("mean", "none")
    with torch.no_grad():
        before = model(src_tokens, src_lengths, prev)[0]
        for layer in model.decoder.layers:
            layer.sentential_ffn.context_proj.weight.add_(1.0)  # the g block of W1 only
        after = model(src_tokens, src_lengths, prev)[0]
    assert not torch.allclose(before, after)


def test_layers_drop_the_context_after_a_forward():
    """No tensors of a finished call stay referenced by the layers (a trained model
    can be deep-copied, e.g. for EMA)."""
    model = tiny("attention", "tam").train()
    src_tokens, src_lengths, prev, _ = random_batch(model, (5, 3), (3, 3))
    model(src_tokens, src_lengths, prev)[0].sum().backward()
    assert all(layer.sentential_context is None for layer in model.decoder.layers)
    copy.deepcopy(model)


@pytest.mark.parametrize("deep_type", ["rnn", "tam"])
def test_activation_checkpointing_gives_the_same_gradients(deep_type):
    """--checkpoint-activations re-runs the decoder layers during backward: they must
    find the same sentential context there."""
    src_tokens, src_lengths, prev, _ = random_batch(tiny("mean", "none"), (6, 4), (3, 3))
    grads = []
    for extra in ([], ["--checkpoint-activations"]):
        model = tiny("attention", deep_type, *extra).train()
        assert all(isinstance(layer, SententialDecoderLayer) for layer in model.decoder.layers)
        model(src_tokens, src_lengths, prev)[0].sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], msg=name)


@pytest.mark.parametrize("deep_type", ["rnn", "tam"])
def test_beam_search_scores_equal_teacher_forced_rescoring(deep_type):
    """fairseq's SequenceGenerator (beam 3: reorders beams, drops finished sentences)
    gives each hypothesis the per-token scores a full forward pass gives it."""
    model = tiny("attention", deep_type)
    torch.manual_seed(0)
    with torch.no_grad():  # sharper, input-dependent distributions than at init
        for p in model.parameters():
            p.mul_(3.0)
    tgt_dict = model.decoder.dictionary
    src_tokens, src_lengths, _, _ = random_batch(model, (7, 3, 5, 6), (2, 2, 2, 2))
    generator = SequenceGenerator([model], tgt_dict, beam_size=3, max_len_b=8)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    with torch.no_grad():
        hypos = generator.generate([model], sample)
        for i, sentence_hypos in enumerate(hypos):
            for hypo in sentence_hypos:
                tokens = hypo["tokens"]
                prev = torch.cat([tokens.new_tensor([tgt_dict.eos()]), tokens[:-1]])[None]
                single_src = src_tokens[i : i + 1, src_tokens.size(1) - src_lengths[i] :]
                logits = model(single_src, src_lengths[i : i + 1], prev)[0]
                lprobs = model.get_normalized_probs((logits, None), log_probs=True)[0]
                rescored = lprobs.gather(-1, tokens[:, None]).squeeze(-1)
                torch.testing.assert_close(hypo["positional_scores"], rescored, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- bad options
def test_bad_option_values_are_rejected_by_the_parser():
    with pytest.raises(SystemExit):
        parse_train_args(["--arch", "transformer_sentential", "--sentential-global", "sum"])
    with pytest.raises(SystemExit):
        parse_train_args(["--arch", "transformer_sentential", "--sentential-deep", "lstm"])


@pytest.mark.parametrize(
    "extra, option",
    [
        (["--sentential-deep", "rnn", "--encoder-layerdrop", "0.1"], "--encoder-layerdrop"),
        (["--sentential-deep", "tam", "--decoder-attention-heads", "3"], "--decoder-attention-heads"),
        (["--sentential-global", "attention", "--encoder-attention-heads", "3"], "--encoder-attention-heads"),
        (["--offload-activations"], "--offload-activations"),
    ],
)
def test_incompatible_options_fail_with_one_clear_error(extra, option):
    with pytest.raises(ValueError, match=option):
        build_model(["--arch", "transformer_sentential", *TINY, *extra])
