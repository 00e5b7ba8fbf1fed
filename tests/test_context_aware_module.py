"""Pure-torch tests of fairseq_ctx/modules/context_aware_attention.py (no fairseq).

The reference computations are written straight from Eq. 5-10 of Yang et al. (2019),
position by position, with separate U_Q / U_K / V matrices sliced out of the module's
fused parameters.
"""
import pytest
import torch

from fairseq_ctx.modules.context_aware_attention import (
    ContextualQueryKey,
    GateStatistics,
    context_units,
    masked_mean,
    prefix_mean,
)

D = 6


def reference_contextualise(plain, context_matrix, U, v_input, v_context, gated=True):
    """Eq. 5-6 for one target (Q or K), one position at a time.

    plain: T x B x d (Q or K); context_matrix: T x B x d_c (C, already broadcast);
    U: d_c x d; v_input, v_context: d.
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
            lam = torch.sigmoid(q @ v_input + cu @ v_context)  # Eq. 6, one scalar
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
