"""The context-aware initialisation options (--context-init; the paper states none): each
starts from the state it promises, computes the same equations (Eq. 5-6) as the default,
and differs from it only in U / V (the stock parameters are the stock model's, tested in
tests/test_controlled_start.py). The references below are written from the definitions:
Q = H W_Q with fairseq's W_Q initialisation (Glorot-uniform, gain 1/sqrt(2)), lambda =
sigmoid(Q V^H + (C U) V^C), Q^ = (1 - lambda) Q + lambda C U."""
import math

import pytest
import torch

from fairseq_ctx.modules.context_aware_attention import CONTEXT_INITS, ContextualQueryKey
from tests.model_checks import build_model, parse_train_args

D = 256


def _inputs(seed=0, d=D, length=24, batch=6, global_blocks=3, deep_blocks=2):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(length, batch, d, generator=generator)  # unit-variance layer input
    w_q = torch.empty(d, d)
    bound = (1 / math.sqrt(2)) * math.sqrt(6.0 / (d + d))  # fairseq: xavier_uniform_(gain=1/sqrt 2)
    w_q.uniform_(-bound, bound, generator=generator)
    query = hidden @ w_q.t()
    # context entries with the layer input's variance (deep context: earlier layer inputs)
    global_context = torch.randn(1, batch, global_blocks * d, generator=generator)
    deep_context = torch.randn(length, batch, deep_blocks * d, generator=generator)
    return query, global_context, deep_context


def _module(init, seed=3, apply_to="both", gated=True):
    torch.manual_seed(seed)
    return ContextualQueryKey(D, 3, 2, apply_to, gated, init=init)


def _rms(x):
    return x.pow(2).mean().sqrt().item()


def _reference(module, query, global_context, deep_context):
    """Eq. 5-6 for the query target, from the parameters."""
    u_global = module.global_proj.weight[:D]
    u_deep = module.deep_proj.weight[:D]
    context = global_context @ u_global.t() + deep_context @ u_deep.t()
    logit = query @ module.gate_input[0] + context @ module.gate_context[0]
    gate = torch.sigmoid(logit).unsqueeze(-1)
    return (1 - gate) * query + gate * context, context, gate


@pytest.mark.parametrize("init", CONTEXT_INITS)
def test_every_init_computes_the_same_equations(init):
    module = _module(init)
    query, global_context, deep_context = _inputs()
    expected, _, gate = _reference(module, query, global_context, deep_context)
    q_hat, _, gates = module(query, query, global_context, deep_context)
    torch.testing.assert_close(q_hat, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gates[..., :1], gate, rtol=1e-6, atol=1e-6)


def test_gate_half_starts_every_gate_at_one_half():
    module = _module("gate_half")
    query, global_context, deep_context = _inputs()
    _, _, gates = module(query, query, global_context, deep_context)
    assert torch.equal(gates, torch.full_like(gates, 0.5))
    # the default does not: its gates spread (the finding the option answers)
    _, _, default_gates = _module("glorot")(query, query, global_context, deep_context)
    assert default_gates.min() < 0.2 and default_gates.max() > 0.8


def test_matched_starts_context_projection_at_the_scale_of_the_query():
    query, global_context, deep_context = _inputs()
    _, context, _ = _reference(_module("matched"), query, global_context, deep_context)
    assert 0.9 < _rms(context) / _rms(query) < 1.1
    # the default starts at about twice the query's RMS (global + deep projections summed)
    _, context, _ = _reference(_module("glorot"), query, global_context, deep_context)
    assert _rms(context) / _rms(query) > 1.8


def test_gate_half_matched_starts_with_both():
    """The factorial arm: gates at 0.5 (gate_half) and C U at the query's scale (matched),
    with exactly matched's U and the default's random numbers."""
    module = _module("gate_half_matched")
    query, global_context, deep_context = _inputs()
    _, context, gate = _reference(module, query, global_context, deep_context)
    assert torch.equal(gate, torch.full_like(gate, 0.5))
    assert 0.9 < _rms(context) / _rms(query) < 1.1
    assert torch.equal(module.deep_proj.weight, _module("matched").deep_proj.weight)
    assert torch.equal(module.global_proj.weight, _module("matched").global_proj.weight)


def test_zero_context_starts_with_no_context_term():
    module = _module("zero_context")
    query, global_context, deep_context = _inputs()
    q_hat, _, gates = module(query, query, global_context, deep_context)
    assert torch.count_nonzero(module.global_proj.weight) == 0
    assert torch.count_nonzero(module.deep_proj.weight) == 0
    gate = torch.sigmoid(query @ module.gate_input[0]).unsqueeze(-1)  # (C U) V^C = 0
    torch.testing.assert_close(q_hat, (1 - gate) * query, rtol=1e-5, atol=1e-6)


def test_gate_half_zero_context_starts_as_halved_queries_and_keys_with_no_context():
    """gate_half's shrinkage without its context term: lambda = 0.5 everywhere and C U = 0,
    so Q^ = Q / 2 and K^ = K / 2 (Eq. 5 with lambda = 1/2); U still learns from the first
    gradient (dQ^/dU = lambda C), V too (through C U V^C only once U has moved)."""
    module = _module("gate_half_zero_context")
    query, global_context, deep_context = _inputs()
    key = query.flip(0)
    q_hat, k_hat, gates = module(query, key, global_context, deep_context)
    assert torch.equal(gates, torch.full_like(gates, 0.5))
    torch.testing.assert_close(q_hat, query / 2, rtol=0, atol=1e-7)
    torch.testing.assert_close(k_hat, key / 2, rtol=0, atol=1e-7)
    assert all(torch.count_nonzero(p) == 0 for p in (module.global_proj.weight, module.deep_proj.weight,
                                                      module.gate_input, module.gate_context))
    (q_hat.square().sum() + k_hat.square().sum()).backward()
    assert module.deep_proj.weight.grad.abs().sum() > 0 and module.global_proj.weight.grad.abs().sum() > 0
    assert module.gate_input.grad.abs().sum() > 0  # d lambda / d V^H = lambda (1 - lambda) Q
    assert torch.count_nonzero(module.gate_context.grad) == 0  # d lambda / d V^C ~ C U = 0


@pytest.mark.parametrize("apply_to", ["query", "key"])
def test_gate_half_zero_context_halves_only_the_contextualised_target(apply_to):
    torch.manual_seed(3)
    module = ContextualQueryKey(D, 3, 2, apply_to, True, init="gate_half_zero_context")
    query, global_context, deep_context = _inputs()
    key = query.flip(0)
    q_hat, k_hat, _ = module(query, key, global_context, deep_context)
    halved, kept = (q_hat, k_hat) if apply_to == "query" else (k_hat, q_hat)
    torch.testing.assert_close(halved, (query if apply_to == "query" else key) / 2, rtol=0, atol=1e-7)
    assert torch.equal(kept, key if apply_to == "query" else query)


@pytest.mark.parametrize("init", ["gate_half", "gate_half_matched", "gate_half_zero_context"])
def test_an_init_of_the_gate_vectors_is_refused_without_gates(init):
    with pytest.raises(ValueError, match=f"init '{init}' sets the gate vectors V .*gated=False"):
        ContextualQueryKey(D, 3, 2, "both", False, init=init)


def test_inits_draw_the_same_random_numbers():
    """An option rescales or zeroes, it does not shift the stream: V of matched and
    zero_context, and U of gate_half, are the default's."""
    default = _module("glorot")
    assert torch.equal(_module("matched").gate_input, default.gate_input)
    assert torch.equal(_module("zero_context").gate_context, default.gate_context)
    assert torch.equal(_module("gate_half").deep_proj.weight, default.deep_proj.weight)
    ratio = _module("matched").deep_proj.weight / default.deep_proj.weight
    torch.testing.assert_close(ratio, torch.full_like(ratio, ratio.flatten()[0].item()))


def _options(init, *extra):
    return ["--arch", "transformer_context_aware", "--encoder-embed-dim", "16",
            "--encoder-ffn-embed-dim", "24", "--encoder-layers", "2", "--encoder-attention-heads", "4",
            "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "24", "--decoder-layers", "2",
            "--decoder-attention-heads", "4", "--decoder-context", "global", "--context-init", init, *extra]


@pytest.mark.parametrize("init", CONTEXT_INITS)
def test_option_reaches_every_contextualiser(init):
    model, _ = build_model(_options(init))
    modules = [layer.self_attn.contextualizer for stack in (model.encoder, model.decoder)
               for layer in stack.layers if layer.self_attn.contextualizer is not None]
    assert len(modules) == 4 and {m.init for m in modules} == {init}


def test_bad_init_options_are_one_clear_error_at_build_time():
    with pytest.raises(SystemExit):  # argparse: not one of the choices
        parse_train_args(_options("xavier"))
    with pytest.raises(ValueError, match="--context-init gate_half .*--no-context-gate"):
        build_model(_options("gate_half", "--no-context-gate"))
    with pytest.raises(ValueError, match="--context-init gate_half_matched .*--no-context-gate"):
        build_model(_options("gate_half_matched", "--no-context-gate"))
    with pytest.raises(ValueError, match="--context-init gate_half_zero_context .*--no-context-gate"):
        build_model(_options("gate_half_zero_context", "--no-context-gate"))


def test_default_is_gate_half_and_glorot_without_gates():
    """The arch's default is the study's choice, gate_half (V = 0); without gates (footnote 1)
    there is no V to zero, so the default there is glorot, not the gate_half error. (A
    checkpoint written before the option existed has no value either and is labelled by
    the same rule; its weights are loaded over the start anyway.)"""
    from fairseq_ctx.models.transformer_context_aware import context_aware_base_architecture

    for extra, expected in (([], "gate_half"), (["--no-context-gate"], "glorot")):
        args = parse_train_args(_options("glorot", *extra))
        del args.context_init  # not given / a checkpoint written before the option existed
        context_aware_base_architecture(args)
        assert args.context_init == expected
        model, _ = build_model([w for w in _options("glorot", *extra) if w not in ("--context-init", "glorot")])
        contextualizers = [layer.self_attn.contextualizer for layer in model.encoder.layers
                           if layer.self_attn.contextualizer is not None]
        assert contextualizers and {m.init for m in contextualizers} == {expected}
        for m in contextualizers:  # gate_half: V^H = V^C = 0; glorot: no gates at all here
            assert m.gate_input is None if expected == "glorot" else not (m.gate_input.any() or m.gate_context.any())


# -- the gate bias (--context-gate-bias; not in the paper): lambda = sigmoid(Q V^H + C U V^C + b)


def _contextualizers(model):
    return {f"{side}.layers.{i}": layer.self_attn.contextualizer
            for side, stack in (("encoder", model.encoder), ("decoder", model.decoder))
            for i, layer in enumerate(stack.layers) if layer.self_attn.contextualizer is not None}


def test_gate_bias_reaches_every_contextualised_layer_on_both_sides():
    # decoder deep: its layer 1 has no context (stock attention), so no bias either
    model, _ = build_model(_options("glorot", "--decoder-context", "deep", "--context-gate-bias", "-2.5"))
    state = model.state_dict()
    biases = {k: v for k, v in state.items() if k.endswith("gate_bias")}
    assert sorted(biases) == sorted(
        [f"encoder.layers.{i}.self_attn.contextualizer.gate_bias" for i in (0, 1)]
        + ["decoder.layers.1.self_attn.contextualizer.gate_bias"])
    for value in biases.values():
        assert torch.equal(value, torch.tensor([-2.5, -2.5]))
    assert all(isinstance(m.gate_bias, torch.nn.Parameter) and m.gate_bias.requires_grad
               for m in _contextualizers(model).values())


def test_a_zero_gate_bias_reaches_the_model():
    model, _ = build_model(_options("gate_half", "--context-gate-bias", "0"))
    biases = [m.gate_bias for m in _contextualizers(model).values()]
    assert biases and all(isinstance(b, torch.nn.Parameter) and torch.equal(b, torch.zeros(2)) for b in biases)


def test_gate_bias_arm_starts_every_gate_at_sigmoid_of_the_bias():
    """init_study config 12's start (V = 0, b = -4) through the model: every lambda_Q / lambda_K
    of every contextualised layer, at every real token, is sigmoid(-4) ~ 0.018."""
    from tests.model_checks import decoder_logits, random_batch

    model, _ = build_model(_options("gate_half", "--context-gate-bias", "-4"))
    gates = {}
    for name, module in _contextualizers(model).items():
        module.register_forward_hook(lambda mod, args, out, name=name: gates.__setitem__(name, out[2]))
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 3, 5), (4, 6, 2))
    with torch.no_grad():
        decoder_logits(model, src_tokens, src_lengths, prev)
    assert len(gates) == 4
    expected = 1 / (1 + math.exp(4))
    for name, tensor in gates.items():
        tokens = src_tokens if name.startswith("encoder") else prev
        real = tensor[~tokens.eq(model.encoder.padding_idx).t()]
        torch.testing.assert_close(real, torch.full_like(real, expected), rtol=1e-6, atol=0, msg=name)


def test_bad_gate_bias_options_are_one_clear_error_at_build_time():
    with pytest.raises(SystemExit):  # argparse: not a float
        parse_train_args(_options("glorot", "--context-gate-bias", "minus4"))
    for value in ("-4", "0"):  # 0 is a bias too
        with pytest.raises(ValueError, match="--context-gate-bias .*--no-context-gate"):
            build_model(_options("glorot", "--no-context-gate", "--context-gate-bias", value))
    for value in ("nan", "inf", "-inf"):  # (argparse reads "-inf" as an option name unless after "=")
        with pytest.raises(ValueError, match=f"--context-gate-bias must be finite, got {value}"):
            build_model(_options("gate_half", f"--context-gate-bias={value}"))
    # every problem in the one message
    with pytest.raises(ValueError, match="--context-init gate_half .*--no-context-gate.*; --context-gate-bias "
                                         ".*--no-context-gate.*; --context-gate-bias must be finite"):
        build_model(_options("gate_half", "--no-context-gate", "--context-gate-bias", "nan"))


def test_without_the_gate_bias_option_there_is_no_bias():
    """Not given, or a checkpoint's namespace written before the option existed: the model has
    exactly the parameters it had before (its state dict loads strictly)."""
    from fairseq.tasks.translation import TranslationTask

    from tests.model_checks import make_dictionary

    before, _ = build_model(_options("gate_half"))
    assert before.args.context_gate_bias is None
    assert not [k for k in before.state_dict() if "gate_bias" in k]
    args = parse_train_args(_options("gate_half"))
    del args.context_gate_bias
    old = TranslationTask(args, make_dictionary(40), make_dictionary(40)).build_model(args)
    assert args.context_gate_bias is None
    assert all(m.gate_bias is None for m in _contextualizers(old).values())
    old.load_state_dict(before.state_dict(), strict=True)
    # a model with the bias has exactly the gate_bias tensors more
    biased, _ = build_model(_options("gate_half", "--context-gate-bias", "-4"))
    extra = set(biased.state_dict()) - set(before.state_dict())
    assert extra and all(k.endswith(".contextualizer.gate_bias") for k in extra)
    assert set(before.state_dict()) <= set(biased.state_dict())
