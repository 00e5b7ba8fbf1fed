"""Wang et al. (2019) sentential context: the pure-torch modules against reference
computations written directly from the paper's equations (loops over sentences,
heads and positions; no shared code with the modules)."""
import math

import pytest
import torch
import torch.nn.functional as F

from fairseq_ctx.modules.sentential_context import (
    AttentivePooling,
    RecurrentLayerAggregation,
    SententialContext,
    SententialFeedForward,
    TransparentAttention,
    masked_max,
    masked_mean,
)

C, HEADS = 8, 2


def _left_padded_states(lengths, S, B_dim=C, layers=None, seed=0):
    """Random time-major states (S, B, C) (or (L, S, B, C)) and a left-padding mask."""
    gen = torch.Generator().manual_seed(seed)
    shape = (S, len(lengths), B_dim) if layers is None else (layers, S, len(lengths), B_dim)
    states = torch.randn(shape, generator=gen, dtype=torch.float64)
    mask = torch.zeros(len(lengths), S, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, : S - n] = True
        # garbage at padding must not leak into any result
        states[..., : S - n, b, :] = 1e3
    return states, mask


def _reference_attention(query, keys_values, wq, bq, wk, wv, bv, wo, bo, heads):
    """Multi-head scaled dot-product attention for one query vector over one sentence."""
    d = query.numel()
    dh = d // heads
    q = wq @ query + bq
    k = keys_values @ wk.T
    v = keys_values @ wv.T + bv
    out = []
    for h in range(heads):
        sl = slice(h * dh, (h + 1) * dh)
        a = torch.softmax(k[:, sl] @ q[sl] / math.sqrt(dh), dim=0)
        out.append(a @ v[:, sl])
    return wo @ torch.cat(out) + bo


def test_masked_mean_equals_mean_of_real_tokens():  # Eq. 4
    lengths = [5, 2, 3]
    states, mask = _left_padded_states(lengths, S=5)
    got = masked_mean(states, mask)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(got[b], states[5 - n :, b].mean(0))


def test_masked_max_equals_max_of_real_tokens():  # Eq. 5
    lengths = [5, 2, 3]
    states, mask = _left_padded_states(lengths, S=5)
    # real values negative, padding garbage (+1e3) positive: an unmasked max would pick it
    states = torch.where(mask.T.unsqueeze(-1), states, -states.abs())
    got = masked_max(states, mask)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(got[b], states[5 - n :, b].amax(0))


def test_masked_pooling_over_stacked_layers_is_per_layer():
    states, mask = _left_padded_states([4, 1], S=4, layers=3)
    for pool in (masked_mean, masked_max):
        stacked = pool(states, mask)
        for layer in range(3):
            torch.testing.assert_close(stacked[layer], pool(states[layer], mask))


def test_attentive_pooling_matches_multihead_attention_reference():  # Eq. 6
    torch.manual_seed(0)
    lengths = [4, 2, 3]
    pools = 3
    states, mask = _left_padded_states(lengths, S=4, layers=pools)
    query = torch.randn(len(lengths), C, dtype=torch.float64)
    module = AttentivePooling(C, HEADS, num_pools=pools).double().eval()
    with torch.no_grad():  # non-zero biases so every term is exercised
        for bias in (module.q_bias, module.v_bias, module.out_bias):
            bias.normal_()
    got = module(query, states, mask)
    for p in range(pools):
        for b, n in enumerate(lengths):
            expected = _reference_attention(
                query[b], states[p, 4 - n :, b],
                module.q_weight[p], module.q_bias[p], module.k_weight[p],
                module.v_weight[p], module.v_bias[p], module.out_weight[p],
                module.out_bias[p], HEADS,
            )
            torch.testing.assert_close(got[p, b], expected)


def test_recurrent_layer_aggregation_is_last_gru_state():  # Eq. 9
    torch.manual_seed(0)
    module = RecurrentLayerAggregation(C).double()
    layer_contexts = torch.randn(2, 4, C, dtype=torch.float64)
    got = module(layer_contexts)
    rnn = module.rnn
    w_ir, w_iz, w_in = rnn.weight_ih_l0.chunk(3)
    w_hr, w_hz, w_hn = rnn.weight_hh_l0.chunk(3)
    b_ir, b_iz, b_in = rnn.bias_ih_l0.chunk(3)
    b_hr, b_hz, b_hn = rnn.bias_hh_l0.chunk(3)
    for b in range(2):
        h = torch.zeros(C, dtype=torch.float64)
        for x in layer_contexts[b]:  # r_l = GRU(g^l, r_{l-1})
            r = torch.sigmoid(w_ir @ x + b_ir + w_hr @ h + b_hr)
            z = torch.sigmoid(w_iz @ x + b_iz + w_hz @ h + b_hz)
            cand = torch.tanh(w_in @ x + b_in + r * (w_hn @ h + b_hn))
            h = (1 - z) * cand + z * h
        torch.testing.assert_close(got[b], h)


def test_transparent_attention_matches_reference_per_position():  # Eq. 10-11
    torch.manual_seed(0)
    T, B, L = 3, 2, 4
    module = TransparentAttention(C, C, HEADS).double().eval()
    with torch.no_grad():
        for proj in (module.q_proj, module.v_proj, module.out_proj):
            proj.bias.normal_()
    query = torch.randn(T, B, C, dtype=torch.float64)
    layer_contexts = torch.randn(B, L, C, dtype=torch.float64)
    got = module(query, *module.project_layers(layer_contexts))
    for t in range(T):
        for b in range(B):
            expected = _reference_attention(
                query[t, b], layer_contexts[b],
                module.q_proj.weight, module.q_proj.bias, module.k_proj.weight,
                module.v_proj.weight, module.v_proj.bias, module.out_proj.weight,
                module.out_proj.bias, HEADS,
            )
            torch.testing.assert_close(got[t, b], expected)


def test_transparent_attention_position_depends_only_on_its_own_query():
    """TAM with the layer input at position i as query: no mixing across positions,
    so a full pass equals position-by-position evaluation (incremental decoding)."""
    torch.manual_seed(0)
    module = TransparentAttention(C, C, HEADS).double().eval()
    query = torch.randn(5, 2, C, dtype=torch.float64)
    kv = module.project_layers(torch.randn(2, 3, C, dtype=torch.float64))
    full = module(query, *kv)
    steps = torch.cat([module(query[t : t + 1], *kv) for t in range(5)])
    torch.testing.assert_close(full, steps)


@pytest.mark.parametrize("T", [1, 4])
def test_sentential_ffn_matches_concatenated_input(T):  # Eq. 2
    torch.manual_seed(0)
    Cg, hidden = 6, 16
    module = SententialFeedForward(C, Cg, hidden).double().eval()
    x = torch.randn(T, 3, C, dtype=torch.float64)
    g = torch.randn(3, Cg, dtype=torch.float64)
    w1 = torch.cat([module.input_proj.weight, module.context_proj.weight], dim=1)  # W1 of Eq. 2
    b1 = module.input_proj.bias
    expected = torch.empty(T, 3, C, dtype=torch.float64)
    for t in range(T):
        for b in range(3):
            cat = torch.cat([x[t, b], g[b]])
            expected[t, b] = module.fc2.weight @ F.relu(w1 @ cat + b1) + module.fc2.bias
    torch.testing.assert_close(module(x, context=g), expected)
    torch.testing.assert_close(module(x, sentence_bias=module.sentence_bias(g)), expected)
    per_position = g.unsqueeze(0).expand(T, -1, -1)
    torch.testing.assert_close(module(x, context=per_position), expected)


@pytest.mark.parametrize("global_type", ["mean", "max", "attention"])
@pytest.mark.parametrize("deep_type", ["none", "rnn", "tam"])
def test_sentential_context_composes_global_and_deep(global_type, deep_type):  # Eq. 3, 7, 8
    torch.manual_seed(0)
    L, lengths = 3, [4, 2]
    module = SententialContext(C, HEADS, L, global_type, deep_type).double().eval()
    layers, mask = _left_padded_states(lengths, S=4, layers=L + 1)
    embeddings, layer_states = layers[0], list(layers[1:])
    g, G = module(embeddings, layer_states, mask)

    def global_of(layer_index, state):
        if global_type == "mean":
            return masked_mean(state, mask)
        if global_type == "max":
            return masked_max(state, mask)
        pool = module.attentive_pooling
        g0 = masked_max(embeddings, mask)  # Eq. 7
        p = layer_index if deep_type != "none" else 0
        out = torch.stack([
            _reference_attention(
                g0[b], state[4 - n :, b], pool.q_weight[p], pool.q_bias[p],
                pool.k_weight[p], pool.v_weight[p], pool.v_bias[p],
                pool.out_weight[p], pool.out_bias[p], HEADS,
            )
            for b, n in enumerate(lengths)
        ])
        return out

    if deep_type == "none":
        assert G is None
        torch.testing.assert_close(g, global_of(0, layer_states[-1]))  # Eq. 3: top layer only
        return
    expected_G = torch.stack([global_of(l, s) for l, s in enumerate(layer_states)], dim=1)
    if deep_type == "tam":
        assert g is None
        torch.testing.assert_close(G, expected_G)
    else:
        assert G is None
        torch.testing.assert_close(g, module.layer_aggregation(expected_G))


@pytest.mark.parametrize("global_type", ["mean", "max", "attention"])
def test_sentential_context_ignores_padding(global_type):
    """A sentence alone gives the same g / G as inside a left-padded batch."""
    torch.manual_seed(0)
    module = SententialContext(C, HEADS, 2, global_type, "tam").double().eval()
    layers, mask = _left_padded_states([5, 2], S=5, layers=3)
    _, G_batch = module(layers[0], list(layers[1:]), mask)
    alone = layers[:, 3:, 1:2]
    _, G_alone = module(alone[0], list(alone[1:]), None)
    torch.testing.assert_close(G_batch[1:2], G_alone)


def test_rnn_aggregation_finite_under_bf16_autocast():
    module = RecurrentLayerAggregation(C)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = module(torch.randn(2, 3, C).to(torch.bfloat16))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


def test_modules_reject_bad_options():
    with pytest.raises(ValueError, match="global_type"):
        SententialContext(C, HEADS, 2, "sum", "none")
    with pytest.raises(ValueError, match="deep_type"):
        SententialContext(C, HEADS, 2, "mean", "lstm")
    with pytest.raises(ValueError, match="divisible"):
        AttentivePooling(C, 3)
