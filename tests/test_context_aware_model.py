"""fairseq-level tests of ``transformer_context_aware`` (Yang et al., 2019)."""
import pytest
import torch

import fairseq_ctx.models  # noqa: F401  (registers the architectures; conftest may import fairseq_ctx first)
from fairseq_ctx.modules.context_aware_attention import CONTEXT_INITS
from tests.model_checks import (
    assert_finite_low_precision,
    assert_incremental_matches_full,
    assert_padding_invariant,
    assert_reorder_consistent,
    build_model,
    decoder_logits,
    encode,
    incremental_logits,
    random_batch,
)
from tests.test_context_aware_module import reference_contextualise

ARCH = ["--arch", "transformer_context_aware"]
TINY = [
    "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-layers", "3",
    "--encoder-attention-heads", "2", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32",
    "--decoder-layers", "3", "--decoder-attention-heads", "2", "--dropout", "0",
]


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    """Tiny models run fastest on one thread; on a shared machine more threads only contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_model(*options, seed=0):
    # glorot, not the arch's default gate_half: with V = 0 every gate is 0.5, and a swapped
    # V^H / V^C, lambda for 1 - lambda or a gate from the wrong position would go unseen
    model, _ = build_model(ARCH + TINY + ["--context-init", "glorot", *options], seed=seed)
    return model


def context(encoder="none", decoder="none"):
    return ["--encoder-context", encoder, "--decoder-context", decoder]


# -- Eq. 5-10 through the whole stack -------------------------------------------------


def reference_global(h, padding, causal):
    """Eq. 8 (mean over non-padding positions) or, for the decoder, its causal prefix
    version (footnote 2), computed position by position. h: T x B x d."""
    T, B, _ = h.shape
    out = torch.zeros_like(h)
    for b in range(B):
        for t in range(T):
            keep = [j for j in range(T) if (padding is None or not padding[b, j]) and (not causal or j <= t)]
            out[t, b] = h[keep, b].mean(dim=0) if keep else 0
    return out


@pytest.mark.parametrize("side", ["encoder", "decoder"])
@pytest.mark.parametrize("context_type", ["global", "deep", "deep_global", "deep_global+deep"])
def test_stack_contexts_match_eq8_to_eq10_reference(side, context_type):
    """Capture every layer's self-attention input H^l, rebuild C for each layer from
    Eq. 8-10 (layer 1 has no deep context; deep-global includes the current layer),
    and compare the contextualised Q^ / K^ the model actually used."""
    model = tiny_model(*context(**{side: context_type})).double()
    stack = getattr(model, side)
    inputs, used = {}, {}
    for index, layer in enumerate(stack.layers, start=1):
        attention = layer.self_attn
        attention.register_forward_pre_hook(
            lambda mod, args, kwargs, index=index: inputs.__setitem__(index, kwargs["query"]), with_kwargs=True
        )
        if attention.contextualizer is not None:
            attention.contextualizer.register_forward_hook(
                lambda mod, args, out, index=index: used.__setitem__(index, (args[0], args[1], out[0], out[1]))
            )
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 3, 5), (4, 6, 2))
    with torch.no_grad():
        decoder_logits(model, src_tokens, src_lengths, prev)

    tokens = src_tokens if side == "encoder" else prev
    padding = tokens.eq(stack.padding_idx)
    causal = side == "decoder"
    H = [inputs[index] for index in range(1, len(stack.layers) + 1)]
    c = [reference_global(h, padding, causal) for h in H]
    assert set(used) == ({2, 3} if context_type == "deep" else {1, 2, 3})
    for index, (q, k, q_hat, k_hat) in used.items():
        attention = stack.layers[index - 1].self_attn
        torch.testing.assert_close(q, attention.q_proj(H[index - 1]))  # Q = H^l W_Q
        torch.testing.assert_close(k, attention.k_proj(H[index - 1]))
        parts, weights = [], []
        module = attention.contextualizer
        if context_type == "global":
            parts.append(c[index - 1])  # Eq. 8
        if context_type in ("deep_global", "deep_global+deep"):
            parts.append(torch.cat(c[:index], dim=-1))  # Eq. 10
        if context_type != "deep":
            weights.append(module.global_proj.weight)
        if context_type in ("deep", "deep_global+deep") and index > 1:
            parts.append(torch.cat(H[: index - 1], dim=-1))  # Eq. 9
            weights.append(module.deep_proj.weight)
        C = torch.cat(parts, dim=-1)
        d = q.size(-1)
        for target, (plain, got) in enumerate(((q, q_hat), (k, k_hat))):
            U = torch.cat([w[target * d : (target + 1) * d].t() for w in weights], dim=0)
            expected, _ = reference_contextualise(
                plain, C, U, module.gate_input[target], module.gate_context[target]
            )
            keep = ~padding.t()  # padding positions' outputs are never used
            torch.testing.assert_close(got[keep], expected[keep])


# -- generic fairseq behaviour ----------------------------------------------------------

BEHAVIOUR_CONFIGS = {
    "encoder-global": context("global"),
    "encoder-deep": context("deep"),
    "encoder-deep_global": context("deep_global"),
    "encoder-deep_global+deep": context("deep_global+deep"),
    "decoder-global": context(decoder="global"),
    "decoder-deep": context(decoder="deep"),
    "decoder-deep_global": context(decoder="deep_global"),
    "decoder-deep_global+deep": context(decoder="deep_global+deep"),
    "both-query-only": context("deep_global+deep", "deep_global+deep") + ["--context-apply", "query"],
    "both-key-only": context("deep_global+deep", "deep_global+deep") + ["--context-apply", "key"],
    "both-ungated": context("deep_global+deep", "deep_global+deep") + ["--no-context-gate"],
    "both-pre-norm": context("deep_global+deep", "deep_global+deep")
    + ["--encoder-normalize-before", "--decoder-normalize-before"],
}


@pytest.mark.parametrize("name", sorted(BEHAVIOUR_CONFIGS))
def test_padding_incremental_and_reorder_invariance(name):
    model = tiny_model(*BEHAVIOUR_CONFIGS[name])
    assert_padding_invariant(model)
    assert_incremental_matches_full(model)
    assert_reorder_consistent(model)


# each --context-init, and the gate bias (not in the paper; init_study config 12 and a
# nonzero bias on random gates)
STARTS = {init: ["--context-init", init] for init in CONTEXT_INITS}
STARTS["gate_half+gate_bias"] = ["--context-init", "gate_half", "--context-gate-bias", "-4"]
STARTS["glorot+gate_bias"] = ["--context-init", "glorot", "--context-gate-bias", "0.75"]
# dropout on C U (not in the paper; init_study config 14): the checks run in eval mode, where it is
# the identity, so that the option cannot leave a training-only path in inference
STARTS["gate_half+context_dropout"] = ["--context-init", "gate_half", "--context-dropout", "0.3"]


@pytest.mark.parametrize("start", list(STARTS))
def test_every_context_init_keeps_padding_incremental_reorder_and_low_precision_behaviour(start):
    """The starting values change, the mechanism must not: each start on both sides."""
    options = [*context("deep_global+deep", "deep_global+deep"), *STARTS[start]]
    model = tiny_model(*options)
    bias = float(STARTS[start][-1]) if "--context-gate-bias" in STARTS[start] else None
    biases = [layer.self_attn.contextualizer.gate_bias for side in (model.encoder, model.decoder)
              for layer in side.layers]
    assert len(biases) == 6 and all(b is None if bias is None else torch.equal(b, torch.full((2,), bias))
                                    for b in biases)
    assert_padding_invariant(model)
    assert_incremental_matches_full(model)
    assert_reorder_consistent(model)
    for dtype in (torch.bfloat16, torch.float16):
        assert_finite_low_precision(tiny_model(*options), dtype)


@pytest.mark.parametrize("name", ["both-ungated", "encoder-deep_global+deep", "decoder-deep_global+deep"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_finite_in_low_precision(name, dtype):
    assert_finite_low_precision(tiny_model(*BEHAVIOUR_CONFIGS[name]), dtype)


def test_context_changes_the_output():
    """Guard against the contextualisation silently not running: zeroing U and the gates'
    context weights must change the output of an otherwise identical model."""
    model = tiny_model(*context("deep_global+deep", "deep_global+deep"))
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 3, 5), (4, 6, 2))
    with torch.no_grad():
        before = decoder_logits(model, src_tokens, src_lengths, prev)
        for side in (model.encoder, model.decoder):
            for layer in side.layers:
                for param in layer.self_attn.contextualizer.parameters():
                    param.zero_()
        after = decoder_logits(model, src_tokens, src_lengths, prev)
    assert not torch.allclose(before, after, atol=1e-3)


def test_decoder_incremental_state_keeps_running_sums_not_history():
    model = tiny_model(*context(decoder="deep_global"))
    src_tokens, src_lengths, prev, _ = random_batch(model, (6, 4, 5), (6, 6, 6))
    encoder_out = encode(model, src_tokens, src_lengths)
    state = {}
    with torch.no_grad():
        incremental_logits(model, encoder_out, prev[:, :4], state)
        attention = model.decoder.layers[0].self_attn
        buffer = attention._get_input_buffer(state)
        assert buffer["context_sum"].shape == (3, 16) and buffer["context_count"].tolist() == [[4.0]] * 3
        # the sums are what the next step's global context comes from
        expected = incremental_logits(model, encoder_out, prev[:, :5], dict_copy(state), start=4)
        buffer["context_sum"] = buffer["context_sum"] + 1.0
        attention._set_input_buffer(state, buffer)
        perturbed = incremental_logits(model, encoder_out, prev[:, :5], state, start=4)
    assert not torch.allclose(expected, perturbed, atol=1e-4)


def dict_copy(state):
    return {key: dict(value) for key, value in state.items()}


def test_gate_statistics_hook_averages_per_layer_and_side():
    model = tiny_model(*context("deep_global+deep", "global"))
    model.record_context_gates()
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 3, 5), (4, 6, 2))
    with torch.no_grad():
        decoder_logits(model, src_tokens, src_lengths, prev)
    means = model.context_gate_means()
    assert [row["layer"] for row in means["encoder"]] == [1, 2, 3]
    assert [row["layer"] for row in means["decoder"]] == [1, 2, 3]
    for row in means["encoder"] + means["decoder"]:
        assert 0 < row["lambda_q"] < 1 and 0 < row["lambda_k"] < 1
    assert {row["positions"] for row in means["encoder"]} == {7 + 3 + 5}  # non-padding only
    assert {row["positions"] for row in means["decoder"]} == {4 + 6 + 2}
    model.record_context_gates(False)
    assert model.context_gate_means() == {"encoder": [], "decoder": []}


# -- options and named architectures --------------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        (context("none", "none"), "--encoder-context and --decoder-context are both 'none'"),
        (context("deep") + ["--encoder-layers", "1"], "--encoder-context deep needs --encoder-layers >= 2"),
        (context(decoder="deep_global+deep") + ["--decoder-layers", "1"], "--decoder-layers >= 2"),
        (context("deep_global") + ["--encoder-layerdrop", "0.1"], "--encoder-layerdrop is not supported"),
        (context(decoder="global") + ["--cross-self-attention"], "--cross-self-attention is not supported"),
        (context("deep") + ["--checkpoint-activations"], "--checkpoint-activations"),
        (context("deep") + ["--context-dropout", "1"], r"--context-dropout must be in \[0, 1\), got 1.0"),
        (context("deep") + ["--context-dropout=-0.2"], r"--context-dropout must be in \[0, 1\), got -0.2"),
    ],
)
def test_bad_options_are_rejected_when_the_model_is_built(options, message):
    with pytest.raises(ValueError, match=message):
        tiny_model(*options)


def test_invalid_choices_are_rejected_by_the_parser():
    with pytest.raises(SystemExit):
        tiny_model("--encoder-context", "deepglobal")
    with pytest.raises(SystemExit):
        tiny_model("--context-apply", "value")


def test_layer_one_with_global_context_still_valid_with_one_layer():
    model = tiny_model(*context("deep_global"), "--encoder-layers", "1")
    assert model.encoder.layers[0].self_attn.contextualizer is not None


@pytest.mark.parametrize(
    "arch, dims",
    [("transformer_context_aware", (512, 2048, 8)), ("transformer_context_aware_big", (1024, 4096, 16))],
)
def test_named_architectures_use_paper_settings(arch, dims):
    with torch.device("meta"):
        model, _ = build_model(["--arch", arch])
    args = model.args
    assert (args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_attention_heads) == dims
    assert (args.decoder_embed_dim, args.decoder_ffn_embed_dim, args.decoder_attention_heads) == dims
    assert (args.encoder_layers, args.decoder_layers) == (6, 6)
    assert (args.encoder_context, args.decoder_context, args.context_apply) == ("deep_global+deep", "none", "both")
    assert not args.no_context_gate


# -- parameter counts (Table 1 / Table 2) -----------------------------------------------


def count_parameters(arch_args, vocab_size=8):
    # meta device: shapes only, nothing allocated or initialised
    with torch.device("meta"):
        model, _ = build_model(arch_args, vocab_size=vocab_size)
    return sum(p.numel() for p in model.parameters())


def expected_delta(context_type, d, layers=6, gated=True, targets=2):
    """Per layer 2 u d^2 (U_Q, U_K) + 2 d per gate (V^H, V^C), u = 1, l-1, l, 2l-1."""
    total = 0
    for layer in range(1, layers + 1):
        u = {"global": 1, "deep": layer - 1, "deep_global": layer, "deep_global+deep": 2 * layer - 1}[context_type]
        if u:
            total += targets * u * d * d + (targets * 2 * d if gated else 0)
    return total


TABLE1_ROWS = {
    # row: (encoder context, decoder context, paper's # Para. in M)
    2: ("global", "none", 91.0),
    3: ("deep_global", "none", 99.0),
    4: ("deep", "none", 95.9),
    5: ("deep_global+deep", "none", 106.9),
    6: ("none", "deep_global", 99.0),
    7: ("none", "deep_global+deep", 106.9),
    8: ("deep_global+deep", "deep_global+deep", 125.8),
}


@pytest.mark.parametrize("row", sorted(TABLE1_ROWS))
def test_parameter_delta_over_stock_transformer_matches_table1_base(row):
    encoder, decoder, _ = TABLE1_ROWS[row]
    stock = count_parameters(["--arch", "transformer"])
    ours = count_parameters(["--arch", "transformer_context_aware"] + context(encoder, decoder))
    delta = sum(expected_delta(ctx, 512) for ctx in (encoder, decoder) if ctx != "none")
    assert ours - stock == delta


# Dictionaries of 42,834 rows per side (decoder input/output embeddings shared) put the
# stock base model at the paper's 88.0M; the context rows then land on Table 1, except
# row 2 (global: +3.16M -> 91.2M; the paper prints 91.0M).
PAPER_VOCAB = 42834 - 4  # make_dictionary adds 4 special symbols


@pytest.mark.parametrize("row", [3, 4, 5, 6, 7, 8])
def test_absolute_parameter_counts_match_table1_with_paper_sized_vocabulary(row):
    encoder, decoder, paper_millions = TABLE1_ROWS[row]
    shared = ["--share-decoder-input-output-embed"]
    assert round(count_parameters(["--arch", "transformer"] + shared, PAPER_VOCAB) / 1e6, 1) == 88.0
    ours = count_parameters(["--arch", "transformer_context_aware"] + context(encoder, decoder) + shared, PAPER_VOCAB)
    assert round(ours / 1e6, 1) == paper_millions


def test_parameter_delta_big_matches_table2():
    """Table 2: Transformer-Big 264.1M -> 339.6M (+75.5M) with encoder deep-global + deep."""
    stock = count_parameters(["--arch", "transformer_vaswani_wmt_en_de_big"])
    ours = count_parameters(["--arch", "transformer_context_aware_big"])
    assert ours - stock == expected_delta("deep_global+deep", 1024)
    assert round((ours - stock) / 1e6, 1) == round(339.6 - 264.1, 1)


@pytest.mark.parametrize("apply_to, targets", [("query", 1), ("key", 1)])
def test_parameter_delta_single_target_and_ungated(apply_to, targets):
    stock = count_parameters(["--arch", "transformer"])
    ours = count_parameters(["--arch", "transformer_context_aware", "--context-apply", apply_to])
    assert ours - stock == expected_delta("deep_global+deep", 512, targets=targets)
    ungated = count_parameters(["--arch", "transformer_context_aware", "--no-context-gate"])
    assert ungated - stock == expected_delta("deep_global+deep", 512, gated=False)


# -- the attention module itself ---------------------------------------------------------


def test_attention_weights_path_matches_fused_path():
    """need_weights=True (explicit softmax, used for alignment) and the fused SDPA path
    give the same output; the weights have fairseq's (batch, tgt, src) layout."""
    model = tiny_model(*context(decoder="deep_global"))
    attention = model.decoder.layers[0].self_attn
    x = torch.randn(5, 3, 16)
    padding = torch.zeros(3, 5, dtype=torch.bool)
    padding[1, 3:] = True
    causal = torch.triu(torch.full((5, 5), float("-inf")), 1)
    outputs = []
    for need_weights in (False, True):
        model.decoder.context_history.clear()
        outputs.append(attention(x, x, x, key_padding_mask=padding, attn_mask=causal, need_weights=need_weights))
    torch.testing.assert_close(outputs[0][0], outputs[1][0])
    assert outputs[0][1] is None and outputs[1][1].shape == (3, 5, 5)
    torch.testing.assert_close(outputs[1][1].sum(-1), torch.ones(3, 5))


def test_attention_dropout_reaches_every_contextualised_layer():
    model = tiny_model(*context(encoder="deep_global", decoder="deep_global"), "--attention-dropout", "0.3")
    layers = [*model.encoder.layers, *model.decoder.layers]
    assert all(layer.self_attn.contextualizer is not None for layer in layers)
    assert [layer.self_attn.dropout_module.p for layer in layers] == [0.3] * 6


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_attention_dropout_drops_the_contextualised_probabilities(need_weights):
    """Train mode with --attention-dropout, on both paths (fused SDPA: training; explicit:
    alignment): out_proj(dropout(softmax(Q^ K^T / sqrt(d) + mask)) V), the mask replayed from
    the same RNG state. (The equation tests run with attention dropout 0.)"""
    model = tiny_model(*context(encoder="deep_global"), "--attention-dropout", "0.3").train()
    attention = model.encoder.layers[1].self_attn
    x = torch.randn(5, 3, 16)
    padding = torch.zeros(3, 5, dtype=torch.bool)
    padding[1, 3:] = True

    def layer_two(**options):  # layer 1 records its input for layer 2's deep context
        model.encoder.context_history.clear()
        model.encoder.layers[0].self_attn(x, x, x, key_padding_mask=padding, need_weights=False)
        torch.manual_seed(7)
        return attention(x, x, x, key_padding_mask=padding, **options)

    out, _ = layer_two(need_weights=need_weights)
    with torch.no_grad():
        scores, v = layer_two(before_softmax=True)  # Q^ K^T scaled and masked (Eq. 5-7 elsewhere)
    probs = scores.softmax(-1)
    torch.manual_seed(7)
    dropped = torch.nn.functional.dropout(probs, 0.3, training=True)
    expected = attention.out_proj((dropped @ v).view(3, 2, 5, 8).permute(2, 0, 1, 3).reshape(5, 3, 16))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    without = attention.out_proj((probs @ v).view(3, 2, 5, 8).permute(2, 0, 1, 3).reshape(5, 3, 16))
    assert (out - without).abs().max() > 1e-2  # the mask did something


def test_layer_run_out_of_order_fails_loudly():
    model = tiny_model(*context("deep"))
    model.encoder.context_history.clear()
    x = torch.randn(4, 2, 16)
    with pytest.raises(RuntimeError, match="expected the inputs of 1 layers below it, found 0"):
        model.encoder.layers[1].self_attn(x, x, x, need_weights=False)


def test_context_dropout_reaches_every_contextualised_layer_and_acts_only_in_training():
    """--context-dropout (not in the paper) is given to every contextualiser of both stacks, each
    under its own stream; with every other dropout off, a model with it and one without, same
    weights, agree in eval mode and differ in training mode (module tests pin what it drops)."""
    options = [*context("deep_global+deep", "deep_global+deep"), "--attention-dropout", "0"]
    plain = tiny_model(*options)
    dropped = tiny_model(*options, "--context-dropout", "0.3")
    dropped.load_state_dict(plain.state_dict())
    contextualisers = [layer.self_attn.contextualizer for side in (dropped.encoder, dropped.decoder)
                       for layer in side.layers]
    assert [c.context_dropout for c in contextualisers] == [0.3] * 6
    assert [c.dropout_stream for c in contextualisers] == [
        f"{side}.layers.{i}.self_attn.contextualizer" for side in ("encoder", "decoder") for i in range(3)]
    assert {layer.self_attn.contextualizer.context_dropout
            for side in (plain.encoder, plain.decoder) for layer in side.layers} == {0.0}
    src_tokens, src_lengths, prev, _ = random_batch(plain, (7, 3, 5), (4, 6, 2))
    with torch.no_grad():
        for model in (plain, dropped):
            model.eval()
        torch.testing.assert_close(decoder_logits(dropped, src_tokens, src_lengths, prev),
                                   decoder_logits(plain, src_tokens, src_lengths, prev), rtol=0, atol=0)
        for model in (plain, dropped):
            model.train()
        torch.manual_seed(3)
        expected = decoder_logits(plain, src_tokens, src_lengths, prev)
        torch.manual_seed(3)
        again = decoder_logits(plain, src_tokens, src_lengths, prev)
        torch.manual_seed(3)
        got = decoder_logits(dropped, src_tokens, src_lengths, prev)
    torch.testing.assert_close(again, expected, rtol=0, atol=0)  # nothing else random in training
    assert (got - expected).abs().max() > 1e-3


def test_context_dropout_leaves_the_stock_dropout_masks_of_a_training_step_as_without_it():
    """Paired training noise (like the controlled start): with --dropout and --attention-dropout
    on, a training forward of the model with --context-dropout leaves the global RNG exactly where
    the model without it does, so at one seed the two runs draw the same stock masks throughout."""
    options = [*context("deep_global+deep", "deep"), "--dropout", "0.1", "--attention-dropout", "0.1"]
    plain = tiny_model(*options)
    dropped = tiny_model(*options, "--context-dropout", "0.3")
    dropped.load_state_dict(plain.state_dict())
    src_tokens, src_lengths, prev, _ = random_batch(plain, (7, 3, 5), (4, 6, 2))
    states = []
    with torch.no_grad():
        for model in (plain, dropped):
            model.train()
            torch.manual_seed(8)
            decoder_logits(model, src_tokens, src_lengths, prev)
            states.append(torch.get_rng_state())
    assert torch.equal(*states)


def test_retain_dropout_keeps_the_context_dropout_on_in_generation():
    """fairseq-generate --retain-dropout goes through the model's make_generation_fast_, which
    reaches every contextualiser (as it reaches fairseq's own dropout modules)."""
    options = [*context("deep_global+deep", "deep_global+deep"), "--context-dropout", "0.3"]
    model = tiny_model(*options)
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 3, 5), (4, 6, 2))
    model.make_generation_fast_(retain_dropout=True, retain_dropout_modules=["ContextualQueryKey"])
    assert not model.training
    with torch.no_grad():
        first = decoder_logits(model, src_tokens, src_lengths, prev)
        second = decoder_logits(model, src_tokens, src_lengths, prev)
    assert (first - second).abs().max() > 1e-3
    assert all(layer.self_attn.contextualizer.apply_dropout_during_inference
               for side in (model.encoder, model.decoder) for layer in side.layers)


def test_checkpoints_without_the_not_in_the_paper_options_build_the_paper_model():
    """A checkpoint written before --context-gate-bias / --context-dropout / --freeze-context /
    --context-stop-gradient existed has none of them in its args: the architecture fills them with
    'no bias', 'no dropout', 'trained' and 'the gradient through C'."""
    from fairseq_ctx.models.transformer_context_aware import context_aware_base_architecture
    from tests.model_checks import parse_train_args

    args = parse_train_args([*ARCH, *TINY])
    later = ("context_gate_bias", "context_dropout", "freeze_context", "freeze_context_gates",
             "freeze_context_projection", "context_stop_gradient", "context_stop_key_gradient")
    assert tuple(getattr(args, name) for name in later) == (None, 0.0, False, False, False, False, False)
    for name in later:
        delattr(args, name)
    context_aware_base_architecture(args)
    assert tuple(getattr(args, name) for name in later) == (None, 0.0, False, False, False, False, False)


@pytest.mark.parametrize("freeze", [False, True])
def test_freeze_context_freezes_every_added_tensor_on_both_sides_and_nothing_stock(freeze):
    """--freeze-context (init study arm 19, not in the paper): U, V^H, V^C and the gate bias of
    every contextualised layer, encoder and decoder, stop requiring a gradient; no stock tensor."""
    options = [*context("deep_global+deep", "deep_global+deep"), "--context-gate-bias", "-2"]
    model = tiny_model(*options, *(["--freeze-context"] if freeze else []))
    added = {n for n, _ in model.named_parameters() if ".contextualizer." in n}
    # per side: layer 1 global U; layers 2-3 global and deep U; V^H, V^C and the bias in each layer
    assert len(added) == 2 * (1 + 2 + 2 + 3 * 3)
    assert {n.split(".")[0] for n in added} == {"encoder", "decoder"}
    assert sum(n.endswith("gate_bias") for n in added) == 6
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == (added if freeze else set())


@pytest.mark.parametrize("part", ["gates", "projection", "gates+projection"])
def test_freeze_context_parts_freeze_the_gates_or_u_on_both_sides_and_nothing_else(part):
    """--freeze-context-gates (V^H, V^C and the gate bias of Eq. 6) and --freeze-context-projection
    (U of Eq. 5) split --freeze-context (init study arms 21 / 22, not in the paper): each freezes
    exactly its own tensors in every contextualised layer, encoder and decoder; both together are
    --freeze-context."""
    options = [*context("deep_global+deep", "deep_global+deep"), "--context-gate-bias", "-2"]
    flags = [f"--freeze-context-{name}" for name in part.split("+")]
    model = tiny_model(*options, *flags)
    gate_names = ("gate_input", "gate_context", "gate_bias")
    gates = {n for n, _ in model.named_parameters() if ".contextualizer." in n and n.split(".")[-1] in gate_names}
    projections = {n for n, _ in model.named_parameters()
                   if ".contextualizer." in n and n.endswith(("global_proj.weight", "deep_proj.weight"))}
    assert len(gates) == 2 * 3 * 3 and len(projections) == 2 * (1 + 2 + 2)
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    expected = {"gates": gates, "projection": projections, "gates+projection": gates | projections}[part]
    assert frozen == expected
    if part == "gates+projection":
        everything = tiny_model(*options, "--freeze-context")
        assert frozen == {n for n, p in everything.named_parameters() if not p.requires_grad}


@pytest.mark.parametrize("flag, message", [
    ("--freeze-context-gates", "--freeze-context-gates freezes the gates of Eq. 6, which --no-context-gate"),
    ("--freeze-context-projection", "--freeze-context-projection trains only the gates of Eq. 6, which --no-context-gate"),
])
def test_freeze_context_parts_without_gates_are_rejected_at_build_time(flag, message):
    with pytest.raises(ValueError, match=message):
        tiny_model(*context("deep", "none"), "--no-context-gate", flag)


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_context_stop_gradient_changes_only_the_gradients_below_the_context(side):
    """--context-stop-gradient (init study arm 25, not in the paper): at the seed every tensor
    starts as without it and the logits are the same; in a training step the gradients of the
    contextualised stack's top layer (whose output no context reads) and of everything above it
    are the same, while its embeddings and the layers whose outputs are read as context get other
    gradients (those sent back through C are gone; with it, the layers below also get other
    upstream gradients, so their U and V too); nothing is frozen. Encoder or (causal) decoder."""
    options = [*(context("deep_global+deep", "none") if side == "encoder" else context("none", "deep_global+deep")),
               "--dropout", "0"]
    grads, logits = {}, {}
    for stop in (False, True):
        model = tiny_model(*options, *(["--context-stop-gradient"] if stop else []), seed=3)
        assert all(p.requires_grad for p in model.parameters())
        stack = getattr(model, side)
        assert all(layer.self_attn.contextualizer.stop_context_gradient == stop
                   for layer in stack.layers if layer.self_attn.contextualizer is not None)
        model.train()
        batch = random_batch(model, (7, 5, 3), (4, 6, 2))[:3]
        out = decoder_logits(model, *batch)
        out.log_softmax(-1)[..., 5].sum().backward()
        logits[stop] = out.detach()
        grads[stop] = {n: p.grad.clone() for n, p in model.named_parameters()}
    assert torch.equal(logits[False], logits[True])
    same = {n for n in grads[False] if torch.equal(grads[False][n], grads[True][n])}
    layers = len(getattr(model, side).layers)
    top = f"{side}.layers.{layers - 1}."
    above = ("decoder.",) if side == "encoder" else ("decoder.output_projection",)
    assert {n for n in grads[False] if n.startswith((*above, top))} <= same
    assert f"{side}.embed_tokens.weight" not in same
    assert all(f"{side}.layers.{i}.fc2.weight" not in same for i in range(layers - 1))


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_layerdrop_leaves_every_layer_contextualised_and_the_start_controlled(side):
    # fairseq's LayerDropModuleList skips layers at random when iterated in training mode (the mode
    # modules are built in): configuring or walking the stack must index it, not iterate it
    from tests.test_controlled_start import build, compare
    dims = ["--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "24", "--encoder-layers", "6",
            "--encoder-attention-heads", "4", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "24",
            "--decoder-layers", "6", "--decoder-attention-heads", "4", f"--{side}-layerdrop", "0.5"]
    other = "decoder" if side == "encoder" else "encoder"
    options = ["--arch", "transformer_context_aware", f"--{side}-context", "global", f"--{other}-context", "none",
               "--context-apply", "key", "--no-context-gate", *dims]
    model, _ = build_model(options)
    stack = getattr(model, side)
    assert all(stack.layers[i].self_attn.contextualizer is not None for i in range(6))
    assert len(list(model._context_attentions())) == 6
    model.train()
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 5, 3), (4, 6, 2))
    for _ in range(3):  # every layer (whichever are kept) can run
        assert torch.isfinite(decoder_logits(model, src_tokens, src_lengths, prev)).all()
    stock, stock_rng = build(["--arch", "transformer", *dims], seed=3)
    arch, arch_rng = build(options, seed=3)
    shared, identical, _ = compare(stock, arch)
    assert shared and identical == shared
    assert torch.equal(stock_rng, arch_rng)
