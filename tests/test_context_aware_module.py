"""Pure-torch tests of fairseq_ctx/modules/context_aware_attention.py (no fairseq).

The reference computations are written straight from Eq. 5-10 of Yang et al. (2019),
position by position, with separate U_Q / U_K / V matrices sliced out of the module's
fused parameters.
"""
import math

import pytest
import torch

from fairseq_ctx.modules.context_aware_attention import (
    CONTEXT_INITS,
    ContextualQueryKey,
    GateStatistics,
    context_units,
    masked_mean,
    prefix_mean,
)

D = 6


def reference_contextualise(plain, context_matrix, U, v_input, v_context, gated=True, bias=0.0):
    """Eq. 5-6 for one target (Q or K), one position at a time.

    plain: T x B x d (Q or K); context_matrix: T x B x d_c (C, already broadcast);
    U: d_c x d; v_input, v_context: d; bias: the gate bias b inside the sigmoid (not in
    the paper; 0 is Eq. 6 as written).
    """
    out = torch.empty_like(plain)
    gates = torch.empty(plain.shape[:2])
    for t in range(plain.size(0)):
        for b in range(plain.size(1)):
            q = plain[t, b]
            cu = context_matrix[t, b] @ U  # C U_Q
            if not gated:
                out[t, b] = q + cu
                continue
            lam = torch.sigmoid(q @ v_input + cu @ v_context + bias)  # Eq. 6, one scalar
            gates[t, b] = lam
            out[t, b] = (1 - lam) * q + lam * cu  # Eq. 5
    return out, gates


def fused_block(weight, target_index):
    """U for one target as a d_c x d matrix, from the fused nn.Linear weight."""
    return weight[target_index * D : (target_index + 1) * D].t()


@pytest.mark.parametrize("apply_to", ["both", "query", "key"])
@pytest.mark.parametrize("gated", [True, False])
def test_contextual_query_key_matches_eq5_eq6_reference(apply_to, gated):
    torch.manual_seed(0)
    T, B, g, u = 5, 3, 2, 3  # deep-global of layer 2 (2 blocks) + deep of layer 4 (3 blocks)
    module = ContextualQueryKey(D, global_blocks=g, deep_blocks=u, apply_to=apply_to, gated=gated).double()
    q, k = torch.randn(T, B, D).double(), torch.randn(T, B, D).double()
    global_ctx = torch.randn(1, B, g * D).double()  # one vector per sentence
    deep_ctx = torch.randn(T, B, u * D).double()
    q_hat, k_hat, gates = module(q, k, global_ctx, deep_ctx)

    # deep_global+deep: C = [c ; C_deep] with U = [U_global ; U_deep] (summed projections)
    C = torch.cat([global_ctx.expand(T, B, g * D), deep_ctx], dim=-1)
    expected = {"query": q, "key": k}
    expected_gates = []
    for i, target in enumerate(module.targets):
        U = torch.cat([fused_block(module.global_proj.weight, i), fused_block(module.deep_proj.weight, i)], dim=0)
        v_in = module.gate_input[i] if gated else None
        v_ctx = module.gate_context[i] if gated else None
        expected[target], lam = reference_contextualise(expected[target], C, U, v_in, v_ctx, gated)
        expected_gates.append(lam)
    torch.testing.assert_close(q_hat, expected["query"])
    torch.testing.assert_close(k_hat, expected["key"])
    if gated:
        torch.testing.assert_close(gates.double(), torch.stack(expected_gates, dim=-1).double())
    else:
        assert gates is None
    if apply_to == "query":
        assert torch.equal(k_hat, k)
    if apply_to == "key":
        assert torch.equal(q_hat, q)


def test_gate_is_one_scalar_per_position_and_target():
    module = ContextualQueryKey(D, global_blocks=1, deep_blocks=0)
    q, k = torch.randn(4, 2, D), torch.randn(4, 2, D)
    _, _, gates = module(q, k, torch.randn(1, 2, D))
    assert gates.shape == (4, 2, 2)  # lambda_Q and lambda_K, not per channel
    assert ((gates > 0) & (gates < 1)).all()


def test_parameters_are_bias_free_u_and_gate_vectors():
    module = ContextualQueryKey(D, global_blocks=2, deep_blocks=1, apply_to="both")
    shapes = {name: tuple(p.shape) for name, p in module.named_parameters()}
    assert shapes == {
        "global_proj.weight": (2 * D, 2 * D),  # [U_Q; U_K] over a 2d-wide deep-global context
        "deep_proj.weight": (2 * D, D),
        "gate_input": (2, D),  # V^H_Q, V^H_K
        "gate_context": (2, D),  # V^C_Q, V^C_K
    }
    ungated = ContextualQueryKey(D, global_blocks=1, deep_blocks=0, apply_to="key", gated=False)
    assert {name for name, _ in ungated.named_parameters()} == {"global_proj.weight"}


@pytest.mark.parametrize(
    "context_type, expected",
    [
        ("none", [(0, 0)] * 3),
        ("global", [(1, 0)] * 3),  # Eq. 8: the layer's own mean
        ("deep", [(0, 0), (0, 1), (0, 2)]),  # Eq. 9: layers below only
        ("deep_global", [(1, 0), (2, 0), (3, 0)]),  # Eq. 10: c^1..c^l, current included
        ("deep_global+deep", [(1, 0), (2, 1), (3, 2)]),
    ],
)
def test_context_units_per_layer(context_type, expected):
    assert [context_units(context_type, layer) for layer in (1, 2, 3)] == expected


def test_context_units_rejects_unknown_type():
    with pytest.raises(ValueError, match="unknown context type"):
        context_units("deepglobal", 1)


def test_masked_mean_ignores_padding_positions():
    x = torch.randn(5, 2, D)
    padding = torch.tensor([[True, True, False, False, False], [False] * 5])  # left padding
    x[:2, 0] = float("nan")  # whatever sits at padding positions must not leak
    mean = masked_mean(x, padding)
    torch.testing.assert_close(mean[0], x[2:, 0].mean(dim=0))
    torch.testing.assert_close(mean[1], x[:, 1].mean(dim=0))


def test_prefix_mean_is_causal_mean_of_non_padding_positions():
    x = torch.randn(6, 2, D)
    padding = torch.zeros(2, 6, dtype=torch.bool)
    padding[1, 4:] = True  # right padding of the second target
    means, _, _ = prefix_mean(x, padding)
    for t in range(6):
        torch.testing.assert_close(means[t, 0], x[: t + 1, 0].mean(dim=0))
        if t < 4:
            torch.testing.assert_close(means[t, 1], x[: t + 1, 1].mean(dim=0))


def test_prefix_mean_running_sums_match_full_pass():
    """Incremental decoding keeps (sum, count) per sentence, not the history."""
    x = torch.randn(7, 3, D)
    padding = torch.rand(3, 7) < 0.3
    full, full_sum, full_count = prefix_mean(x, padding)
    running_sum = running_count = None
    steps = []
    for t in range(7):
        mean, running_sum, running_count = prefix_mean(x[t : t + 1], padding[:, t : t + 1], running_sum, running_count)
        assert running_sum.shape == (3, D) and running_count.shape == (3, 1)
        steps.append(mean)
    torch.testing.assert_close(torch.cat(steps), full)
    torch.testing.assert_close(running_sum, full_sum)


def test_means_are_accumulated_in_fp32_for_half_inputs():
    x = torch.full((4096, 1, D), 1000.0, dtype=torch.float16)
    assert torch.isfinite(masked_mean(x)).all()  # a half-precision sum would overflow
    means, _, _ = prefix_mean(x)
    assert torch.isfinite(means).all() and means.dtype == torch.float16


def test_gate_statistics_average_non_padding_positions_only():
    stats = GateStatistics(("query", "key"))
    gates = torch.tensor([[[0.2, 0.4]], [[0.6, 0.8]], [[0.9, 0.9]]])  # T=3, B=1
    stats.update(gates, torch.tensor([[False, False, True]]))
    assert stats.count == 2
    assert stats.means() == pytest.approx({"lambda_q": 0.4, "lambda_k": 0.6})


# -- the gate bias (not in the paper; a diagnostic start of the initialisation study) ------


def _contexts(T=5, B=3, g=2, u=3, dtype=torch.float64, seed=1):
    generator = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=generator, dtype=dtype)  # noqa: E731
    return rand(T, B, D), rand(T, B, D), rand(1, B, g * D), rand(T, B, u * D)


def test_gate_bias_with_zero_gate_vectors_starts_every_gate_at_sigmoid_of_it():
    """V = 0 (gate_half) and b0 = -4: lambda = sigmoid(0 + 0 + -4) at every position and for
    both targets, so Q^ = (1 - s) Q + s C U with s = 1 / (1 + e^4) ~ 0.018."""
    module = ContextualQueryKey(D, 2, 3, init="gate_half", gate_bias=-4.0)
    q, k, global_ctx, deep_ctx = (t.float() for t in _contexts())
    q_hat, k_hat, gates = module(q, k, global_ctx, deep_ctx)
    assert torch.equal(gates, torch.full_like(gates, torch.sigmoid(torch.tensor(-4.0)).item()))
    assert gates.flatten()[0].item() == pytest.approx(1 / (1 + math.exp(4)), rel=1e-6)
    s = 1 / (1 + math.exp(4))
    C = torch.cat([global_ctx.expand(5, 3, -1), deep_ctx], dim=-1)
    for i, (plain, got) in enumerate(((q, q_hat), (k, k_hat))):
        U = torch.cat([fused_block(module.global_proj.weight, i), fused_block(module.deep_proj.weight, i)], dim=0)
        torch.testing.assert_close(got, (1 - s) * plain + s * (C @ U))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gate_bias_is_applied_in_low_precision(dtype):
    """In a half / bf16 model the gate logit is still widened to fp32 with the bias in it: with
    V = 0 and b0 = -4 every gate is sigmoid(-4) computed in fp32 (-4 is exact in both)."""
    module = ContextualQueryKey(D, 2, 3, init="gate_half", gate_bias=-4.0).to(dtype)
    q, k, global_ctx, deep_ctx = (t.to(dtype) for t in _contexts())
    _, _, gates = module(q, k, global_ctx, deep_ctx)
    assert gates.dtype == torch.float32
    assert torch.equal(gates, torch.full_like(gates, 1 / (1 + math.exp(4))))


def test_a_zero_gate_bias_is_a_parameter_too():
    """b0 = 0 is a bias that starts at 0, not 'no bias' (a falsy value must not drop it)."""
    module = ContextualQueryKey(D, 2, 3, init="gate_half", gate_bias=0.0)
    assert isinstance(module.gate_bias, torch.nn.Parameter) and torch.equal(module.gate_bias, torch.zeros(2))
    with pytest.raises(ValueError, match="gated=False"):
        ContextualQueryKey(D, 2, 3, gated=False, gate_bias=0.0)


@pytest.mark.parametrize("apply_to", ["both", "query", "key"])
def test_gate_bias_matches_eq5_eq6_reference_with_the_bias(apply_to):
    """Random U, V (glorot) and a different bias per gate: lambda = sigmoid(Q V^H + C U V^C + b)."""
    torch.manual_seed(0)
    module = ContextualQueryKey(D, 2, 3, apply_to=apply_to, gate_bias=0.5).double()
    with torch.no_grad():  # one value per gate, so a bias read from the other gate shows
        module.gate_bias.copy_(torch.tensor([0.9, -1.7][: len(module.targets)], dtype=torch.float64))
    q, k, global_ctx, deep_ctx = _contexts()
    q_hat, k_hat, gates = module(q, k, global_ctx, deep_ctx)
    C = torch.cat([global_ctx.expand(5, 3, -1), deep_ctx], dim=-1)
    expected, expected_gates = {"query": q, "key": k}, []
    for i, target in enumerate(module.targets):
        U = torch.cat([fused_block(module.global_proj.weight, i), fused_block(module.deep_proj.weight, i)], dim=0)
        expected[target], lam = reference_contextualise(
            expected[target], C, U, module.gate_input[i], module.gate_context[i], bias=module.gate_bias[i].item()
        )
        expected_gates.append(lam)
    torch.testing.assert_close(q_hat, expected["query"])
    torch.testing.assert_close(k_hat, expected["key"])
    torch.testing.assert_close(gates.double(), torch.stack(expected_gates, dim=-1).double())


def test_gate_bias_is_learned():
    """d/db sum(Q^) = sum over positions of lambda (1 - lambda) sum_j (C U - Q)_j (Eq. 5-6)."""
    torch.manual_seed(0)
    module = ContextualQueryKey(D, 2, 3, gate_bias=-1.0).double()
    q, k, global_ctx, deep_ctx = _contexts()
    q_hat, k_hat, gates = module(q, k, global_ctx, deep_ctx)
    (q_hat.sum() + k_hat.sum()).backward()
    C = torch.cat([global_ctx.expand(5, 3, -1), deep_ctx], dim=-1)
    expected = []
    for i, plain in enumerate((q, k)):
        U = torch.cat([fused_block(module.global_proj.weight, i), fused_block(module.deep_proj.weight, i)], dim=0)
        lam = gates[..., i].detach()
        expected.append((lam * (1 - lam) * ((C @ U).detach() - plain).sum(-1)).sum())
    assert module.gate_bias.grad is not None and module.gate_bias.grad.abs().min() > 0
    torch.testing.assert_close(module.gate_bias.grad, torch.stack(expected))


def test_without_gate_bias_there_is_no_parameter():
    plain = ContextualQueryKey(D, 2, 1)
    assert plain.gate_bias is None and "gate_bias" not in plain.state_dict()
    assert {name for name, _ in plain.named_parameters()} == {
        "global_proj.weight", "deep_proj.weight", "gate_input", "gate_context"}
    biased = ContextualQueryKey(D, 2, 1, apply_to="key", gate_bias=-4)
    assert {name: tuple(p.shape) for name, p in biased.named_parameters()}["gate_bias"] == (1,)
    assert torch.equal(biased.gate_bias, torch.tensor([-4.0]))


@pytest.mark.parametrize("kwargs, message", [
    ({"gated": False, "gate_bias": -4.0}, "gated=False"),
    ({"gate_bias": float("nan")}, "finite"),
    ({"gate_bias": float("-inf")}, "finite"),
])
def test_gate_bias_needs_the_gate_and_a_finite_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ContextualQueryKey(D, 1, 0, **kwargs)


@pytest.mark.parametrize("init", CONTEXT_INITS)
def test_gate_bias_leaves_every_other_parameter_and_the_rng_as_without_it(init):
    """Controlled start: the bias is a constant (no draw), so at one seed U and V are
    bit-identical with and without it, and the global RNG ends in the same state."""
    torch.manual_seed(5)
    plain = ContextualQueryKey(D, 2, 3, init=init)
    plain_rng = torch.get_rng_state()
    torch.manual_seed(5)
    biased = ContextualQueryKey(D, 2, 3, init=init, gate_bias=-4.0)
    assert torch.equal(torch.get_rng_state(), plain_rng)
    other = dict(biased.named_parameters())
    assert other.pop("gate_bias") is not None
    assert sorted(other) == sorted(name for name, _ in plain.named_parameters())
    for name, value in plain.named_parameters():
        assert torch.equal(value, other[name]), name


# -- dropout on C U (not in the paper: an arm of the initialisation study) -----------------


def _dropped_context(plain, contextualised, gate):
    """What Eq. 5 mixed in, solved from its output: Q^ = (1 - lambda) Q + lambda D gives
    D = (Q^ - (1 - lambda) Q) / lambda."""
    lam = gate.unsqueeze(-1)
    return (contextualised - (1 - lam) * plain) / lam


def dropping(p, *blocks, **kwargs):
    return ContextualQueryKey(D, *blocks, context_dropout=p, dropout_stream="layer", **kwargs).double().train()


@pytest.mark.parametrize("apply_to", ["both", "query", "key"])
def test_context_dropout_drops_entries_of_c_u_and_eq6_sees_the_dropped_c_u(apply_to):
    """In training, what Eq. 5 mixes in is C U with each entry either dropped (0) or scaled by
    1 / (1 - p), about a fraction p of them dropped, and the gate of Eq. 6 is computed from that
    same dropped C U."""
    torch.manual_seed(0)
    p, T, B = 0.2, 40, 10  # 2,400 entries per target: the dropped fraction within 0.04 of p is ~5 sd
    module = dropping(p, 2, 3, apply_to=apply_to)
    q, k, global_ctx, deep_ctx = _contexts(T=T, B=B)
    q_hat, k_hat, gates = module(q, k, global_ctx, deep_ctx)
    C = torch.cat([global_ctx.expand(T, B, -1), deep_ctx], dim=-1)
    outputs = {"query": (q, q_hat), "key": (k, k_hat)}
    masks = []
    for i, target in enumerate(module.targets):
        plain, got = outputs[target]
        U = torch.cat([fused_block(module.global_proj.weight, i), fused_block(module.deep_proj.weight, i)], dim=0)
        cu = (C @ U).detach()
        d = _dropped_context(plain, got.detach(), gates[..., i].double())
        kept = (d - cu / (1 - p)).abs() < 1e-9
        dropped = d.abs() < 1e-9
        assert bool((kept | dropped).all()), "an entry is neither dropped nor scaled by 1 / (1 - p)"
        assert abs(dropped.double().mean().item() - p) < 0.04, dropped.double().mean().item()
        masks.append(dropped)
        # Eq. 6 with the dropped C U
        lam = torch.sigmoid(plain @ module.gate_input[i].detach() + d @ module.gate_context[i].detach())
        torch.testing.assert_close(gates[..., i].double(), lam)
    for untouched in set(outputs) - set(module.targets):
        plain, got = outputs[untouched]
        assert torch.equal(plain, got)
    if len(masks) == 2:
        assert not torch.equal(masks[0], masks[1])  # Q's and K's C U dropped independently


def test_context_dropout_of_a_global_context_drops_one_vector_per_sentence():
    """A global context is one C U per sentence (broadcast over its positions), so a dropped
    entry is dropped at every position of that sentence."""
    torch.manual_seed(1)
    module = dropping(0.5, 2, 0, init="gate_half")
    q, k, global_ctx, _ = _contexts()
    q_hat, _, gates = module(q, k, global_ctx, None)
    d = _dropped_context(q, q_hat, gates[..., 0].double())  # every gate 0.5 (V = 0)
    torch.testing.assert_close(d, d[:1].expand_as(d))
    cu = global_ctx @ fused_block(module.global_proj.weight, 0)
    assert bool((d[0].abs() < 1e-9).any()) and bool(((d[0] - 2 * cu[0]).abs() < 1e-9).any())


def test_context_dropout_is_the_identity_in_eval_mode():
    torch.manual_seed(2)
    plain = ContextualQueryKey(D, 2, 3).double().eval()
    dropped = dropping(0.5, 2, 3).eval()
    dropped.load_state_dict(plain.state_dict())
    for got, expected in zip(dropped(*_contexts()), plain(*_contexts())):
        assert torch.equal(got, expected)


def test_context_dropout_never_draws_from_the_global_generator():
    """Controlled training noise: with the option the global RNG ends a training forward where it
    started, so every stock dropout mask of the model is the one it would be without it."""
    module = dropping(0.5, 2, 3)
    torch.manual_seed(11)
    before = torch.get_rng_state()
    module(*_contexts())
    assert torch.equal(torch.get_rng_state(), before)


def test_context_dropout_masks_are_reproducible_and_differ_between_calls_and_modules():
    """The mask depends on (the global generator's last seed, the module's stream, the calls
    since that seed was set): the same in a fresh module (a resumed run: fairseq reseeds with
    --seed + the update number before each update), new on the next call and after the next
    update's seed, other for another module."""
    def mask_of(module):
        q, k, global_ctx, deep_ctx = _contexts()
        q_hat, _, gates = module(q, k, global_ctx, deep_ctx)
        return _dropped_context(q, q_hat.detach(), gates[..., 0].double()).abs() < 1e-9

    def twin(stream="layer"):
        module = dropping(0.5, 2, 3)
        module.dropout_stream = stream
        module.load_state_dict(first.state_dict())
        return module

    first = dropping(0.5, 2, 3)
    torch.manual_seed(3)
    a1, a2 = mask_of(first), mask_of(first)
    torch.manual_seed(4)
    next_update = mask_of(first)
    torch.manual_seed(3)
    assert torch.equal(mask_of(twin()), a1)
    torch.manual_seed(4)  # a module that saw update 3 first (two calls) and one resumed at update 4
    assert torch.equal(mask_of(twin()), next_update)
    torch.manual_seed(3)
    other_module = mask_of(twin("another layer"))
    assert not torch.equal(a1, a2) and not torch.equal(a1, next_update) and not torch.equal(a1, other_module)


def test_retain_dropout_keeps_the_context_dropout_on_in_inference():
    """fairseq's --retain-dropout calls make_generation_fast_(retain_dropout=True, ...) on every
    module that has it; by default, or when this class is named, the context dropout stays on."""
    for modules, on in ((None, True), (["ContextualQueryKey"], True), (["FairseqDropout"], False)):
        module = dropping(0.5, 2, 3).eval()
        module.make_generation_fast_(name="encoder.layers.1.self_attn.contextualizer",
                                     retain_dropout=True, retain_dropout_modules=modules)
        outputs = [module(*_contexts())[0] for _ in range(2)]
        assert (not torch.equal(*outputs)) == on, modules
    module = dropping(0.5, 2, 3).eval()
    module.make_generation_fast_(name="x", retain_dropout=False)
    assert torch.equal(module(*_contexts())[0], module(*_contexts())[0])


@pytest.mark.parametrize("value", [-0.1, 1.0, float("nan")])
def test_context_dropout_must_be_a_probability_below_one(value):
    with pytest.raises(ValueError, match=r"context_dropout must be in \[0, 1\)"):
        ContextualQueryKey(D, 1, 0, context_dropout=value, dropout_stream="layer")


def test_context_dropout_needs_a_stream_name():
    with pytest.raises(ValueError, match="context_dropout needs a dropout_stream"):
        ContextualQueryKey(D, 1, 0, context_dropout=0.1)


@pytest.mark.parametrize("init", CONTEXT_INITS)
def test_context_dropout_adds_no_parameter_and_no_draw_at_build_time(init):
    torch.manual_seed(5)
    plain = ContextualQueryKey(D, 2, 3, init=init)
    plain_rng = torch.get_rng_state()
    torch.manual_seed(5)
    dropped = ContextualQueryKey(D, 2, 3, init=init, context_dropout=0.3, dropout_stream="layer")
    assert torch.equal(torch.get_rng_state(), plain_rng)
    assert list(dropped.state_dict()) == list(plain.state_dict())
    for (name, value), (_, other) in zip(plain.named_parameters(), dropped.named_parameters()):
        assert torch.equal(value, other), name


def _gradients(module, q, k, global_ctx, deep_ctx):
    """d(sum of a fixed weighting of Q^, K^) / d(every input and parameter)."""
    inputs = [t.clone().requires_grad_(True) for t in (q, k, global_ctx, deep_ctx)]
    module.zero_grad()
    q_hat, k_hat, _ = module(*inputs)
    weights = torch.linspace(-1, 1, q_hat.numel(), dtype=q_hat.dtype).view_as(q_hat)
    ((q_hat * weights).sum() + (k_hat * weights.flip(0)).sum()).backward()
    outputs = (q_hat.detach(), k_hat.detach())
    return outputs, [t.grad for t in inputs], {n: p.grad.clone() for n, p in module.named_parameters()}


def test_stop_context_gradient_keeps_the_forward_and_every_other_gradient_and_sends_none_through_c():
    """Not in the paper (init study arm 25): C of Eq. 5-6 enters as a constant. Q^ and K^ are as
    without it; the gradients of Q, K, U and V are as without it (U's is C^T dL/d(C U), C's value
    unchanged); the global and the deep context receive none (without the option, both do)."""
    module = ContextualQueryKey(D, 2, 3).double()  # glorot: U and V non-zero
    contexts = _contexts()
    plain_out, plain_inputs, plain_params = _gradients(module, *contexts)
    module.stop_context_gradient = True
    stopped_out, stopped_inputs, stopped_params = _gradients(module, *contexts)
    assert all(torch.equal(a, b) for a, b in zip(plain_out, stopped_out))
    for name in plain_params:
        torch.testing.assert_close(stopped_params[name], plain_params[name], rtol=0, atol=0)
    for i in (0, 1):  # Q, K
        torch.testing.assert_close(stopped_inputs[i], plain_inputs[i], rtol=0, atol=0)
    for i in (2, 3):  # global, deep context
        assert plain_inputs[i].abs().max() > 1e-3
        assert stopped_inputs[i] is None
