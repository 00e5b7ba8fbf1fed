"""transformer_sentential end to end against Wang et al. (2019), "Exploiting Sentential
Context for NMT", written from the paper's equations.

The fairseq model's logits ``model(src_tokens, src_lengths, prev_output_tokens)`` must
equal a float64 reference that recomputes the whole network from the state dict's
weights with plain tensor operations (tests/equation_reference.py for the stock
Transformer): the encoder's H^0..H^L, the sentential context g (Eq. 3-9) or G
(Eq. 8, 10-11), and every decoder layer l reading D^ = FFN_l([D^{l-1}; g]) BEFORE its
usual computation (Eq. 1-2), with the layer's own residual + LayerNorm around FFN_l
(docs/notes/transformer_sentential.md, interpretation 2). Train mode (dropout 0) and
eval mode; a left-padded source batch and a right-padded target batch.

Mutations of the glue this test was checked against (each introduced by hand in
fairseq_ctx/models/transformer_sentential.py, the test run, the change reverted):
  (a) FFN_l applied after the decoder layer instead of before      -> caught
  (b) deep context over H^0..H^{L-1} instead of H^1..H^L           -> caught
  (c) g0 = MAX(H^1) instead of MAX(H^0) (Eq. 7)                    -> caught
  (d) no residual around FFN_l                                     -> caught
  (e) every decoder layer given layer 1's W1_g g + b1              -> caught
  (f) TAM queried by the layer input before its pre-norm LN        -> caught
  (g) H^L taken before the encoder's final LN (pre-norm)           -> caught
tests/equation_mutations.py re-runs them (and the other families').
"""
import math

import pytest
import torch

import fairseq_ctx.models  # noqa: F401  (registers transformer_sentential)
from tests import equation_reference as R
from tests.model_checks import build_model, random_batch

PAD = 1
HEADS = 2
TINY = [
    "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-layers", "2",
    "--encoder-attention-heads", str(HEADS), "--decoder-embed-dim", "16",
    "--decoder-ffn-embed-dim", "32", "--decoder-layers", "2",
    "--decoder-attention-heads", str(HEADS),
    "--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0",
]  # fmt: skip
PRE_NORM = ["--encoder-normalize-before", "--decoder-normalize-before"]


# ------------------------------------------------------------------ the paper's equations
def masked_max(states, padding_mask):
    """MAX over the non-padding positions (Eq. 5, Eq. 7): (S, B, C) -> (B, C)."""
    return states.masked_fill(padding_mask.t().unsqueeze(-1), float("-inf")).amax(dim=0)


def attentive_global(p, pool, g0, states, padding_mask, heads=HEADS):
    """GLOBAL_ATT = ATT(g0, H) (Eq. 6): multi-head attention of the single query g0 over
    the states H (S, B, C), pool ``pool`` of the stacked parameters (one per encoder layer
    in the deep model). q = W_q g0 + b_q, k_s = W_k h_s (the code has no key bias:
    softmax cancels it), v_s = W_v h_s + b_v; per head softmax(q_h . k_hs / sqrt(d_h))
    over the real tokens; heads concatenated; W_o, b_o."""
    pre = "encoder.sentential_context.attentive_pooling."
    S, B, C = states.shape
    Dh = C // heads  # an encoder-side module: the encoder's heads
    q = R.linear(g0, p[pre + "q_weight"][pool], p[pre + "q_bias"][pool]).view(B, heads, Dh)
    k = R.linear(states, p[pre + "k_weight"][pool]).view(S, B, heads, Dh)
    v = R.linear(states, p[pre + "v_weight"][pool], p[pre + "v_bias"][pool]).view(S, B, heads, Dh)
    scores = torch.einsum("bhd,sbhd->bhs", q, k) / math.sqrt(Dh)
    scores = scores.masked_fill(padding_mask.unsqueeze(1), float("-inf"))
    weights = R.softmax(scores, dim=-1)
    heads = torch.einsum("bhs,sbhd->bhd", weights, v).reshape(B, C)
    return R.linear(heads, p[pre + "out_weight"][pool], p[pre + "out_bias"][pool])


def global_context(p, global_type, pool, g0, states, padding_mask, heads=HEADS):
    """GLOBAL(H): Eq. 4 (mean), Eq. 5 (max) or Eq. 6 (attention queried by g0)."""
    if global_type == "mean":
        return R.masked_mean(states, padding_mask)
    if global_type == "max":
        return masked_max(states, padding_mask)
    return attentive_global(p, pool, g0, states, padding_mask, heads)


def gru_last_state(p, inputs):
    """DEEP_RNN (Eq. 9): a GRU (Cho et al., 2014) over g^1..g^L, g = r_L (h_0 = 0):
    r = sigma(W_ir x + b_ir + W_hr h + b_hr), z = sigma(W_iz x + b_iz + W_hz h + b_hz),
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) n + z h."""
    pre = "encoder.sentential_context.layer_aggregation.rnn."
    w_ih, w_hh = p[pre + "weight_ih_l0"], p[pre + "weight_hh_l0"]
    b_ih, b_hh = p[pre + "bias_ih_l0"], p[pre + "bias_hh_l0"]
    h = torch.zeros_like(inputs[0])
    for x in inputs:
        xr, xz, xn = R.linear(x, w_ih, b_ih).chunk(3, dim=-1)
        hr, hz, hn = R.linear(h, w_hh, b_hh).chunk(3, dim=-1)
        r, z = R.sigmoid(xr + hr), R.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
    return h


def transparent_attention(p, query, layer_contexts, heads=HEADS):
    """DEEP_TAM (Eq. 10-11): g_i = sum_l beta_{i,l} g^l with beta_i = ATT_g(query_i, G), ATT_g
    a multi-head attention with its own parameters (q/k/v/out; no key bias), shared by
    all decoder layers, over the L layer vectors G (B, L, C); query (T, B, C)."""
    pre = "decoder.transparent_attention."
    T, B, _ = query.shape
    L, C = layer_contexts.shape[1:]
    Dh = C // heads  # a decoder-side module: the decoder's heads
    q = R.linear(query, p[pre + "q_proj.weight"], p[pre + "q_proj.bias"]).view(T, B, heads, Dh)
    k = R.linear(layer_contexts, p[pre + "k_proj.weight"]).view(B, L, heads, Dh)
    v = R.linear(layer_contexts, p[pre + "v_proj.weight"], p[pre + "v_proj.bias"]).view(B, L, heads, Dh)
    beta = R.softmax(torch.einsum("tbhd,blhd->tbhl", q, k) / math.sqrt(Dh), dim=-1)  # Eq. 11
    mixed = torch.einsum("tbhl,blhd->tbhd", beta, v).reshape(T, B, C)  # Eq. 10
    return R.linear(mixed, p[pre + "out_proj.weight"], p[pre + "out_proj.bias"])


def ffn_l(p, l, x, g):
    """FFN_l([D^{l-1}; g]) (Eq. 2): W_2 relu(W_1 [D; g] + b_1) + b_2, with W_1 the
    concatenation of its D and g column blocks as the code stores them."""
    pre = f"decoder.layers.{l - 1}.sentential_ffn."
    w1 = torch.cat([p[pre + "input_proj.weight"], p[pre + "context_proj.weight"]], dim=1)
    if g.dim() == 2:  # one g per sentence, the same at every target position
        g = g.unsqueeze(0).expand(x.size(0), -1, -1)
    hidden = torch.relu(R.linear(torch.cat([x, g], dim=-1), w1, p[pre + "input_proj.bias"]))
    return R.linear(hidden, p[pre + "fc2.weight"], p[pre + "fc2.bias"])


def reference_logits(p, src_tokens, prev_tokens, global_type, deep_type, pre_norm, heads=(HEADS, HEADS)):
    """``heads``: (encoder, decoder) heads."""
    encoder = R.transformer_encoder(p, src_tokens, PAD, heads[0], pre_norm)
    states, pad = encoder["states"], encoder["padding_mask"]
    # H^0: the embedding layer (Eq. 7); H^1..H^L the encoder layers, H^L the encoder's
    # final output (after its final LayerNorm in pre-norm models; notes, interpretation 3)
    h0, layers = states[0], states[1:-1] + [encoder["out"]]
    g0 = masked_max(h0, pad)  # Eq. 7
    g = layer_contexts = None
    if deep_type == "none":
        g = global_context(p, global_type, 0, g0, layers[-1], pad, heads[0])  # Eq. 3
    else:
        contexts = [global_context(p, global_type, l, g0, h, pad, heads[0]) for l, h in enumerate(layers)]  # Eq. 8
        if deep_type == "rnn":
            g = gru_last_state(p, contexts)  # Eq. 9
        else:
            layer_contexts = torch.stack(contexts, dim=1)  # G (B, L, C)

    def fuse(l, x):
        """Eq. 1-2: decoder layer l reads D^ = FFN_l([D^{l-1}; g]), as a residual
        sublayer with the layer's scheme: post-norm LN(D + FFN_l([D; g])),
        pre-norm D + FFN_l([LN(D); g])."""
        ln = f"decoder.layers.{l - 1}.sentential_layer_norm"

        def fusion(d):
            # TAM's query: the layer's input at position i (notes, interpretation 7)
            context = g if layer_contexts is None else transparent_attention(p, d, layer_contexts, heads[1])
            return ffn_l(p, l, d, context)

        return R.sublayer(p, ln, x, fusion, pre_norm)

    return R.transformer_decoder(p, prev_tokens, encoder, PAD, heads[1], pre_norm, layer_input_hook=fuse)


# ------------------------------------------------------------------ the tests
CASES = [
    ("attention", "rnn", False),  # the default arch (Table 1 row 6)
    ("attention", "tam", False),  # Table 1 row 7
    ("attention", "none", False),  # row 5
    ("mean", "none", False),  # row 3
    ("max", "none", False),  # row 4
    ("mean", "rnn", False),
    ("max", "tam", False),
    ("attention", "rnn", True),  # pre-norm
    ("attention", "tam", True),
]


def build(global_type, deep_type, pre_norm, sizes=TINY):
    args = ["--arch", "transformer_sentential", "--sentential-global", global_type,
            "--sentential-deep", deep_type, *sizes, *(PRE_NORM if pre_norm else [])]  # fmt: skip
    model = build_model(args, vocab_size=40)[0].double()
    R.randomize_parameters(model, seed=7)
    return model


@pytest.mark.parametrize("global_type, deep_type, pre_norm, sizes",
                         [(*case, "equal") for case in CASES]
                         + [("attention", "tam", False, "unequal"), ("attention", "rnn", False, "unequal")])
def test_logits_equal_the_papers_equations(global_type, deep_type, pre_norm, sizes):
    heads = R.UNEQUAL_HEADS if sizes == "unequal" else (HEADS, HEADS)
    # sentential also takes a decoder wider than the encoder (g is encoder-sized: Eq. 2's [D; g])
    wider_decoder = ["--decoder-embed-dim", "24", "--decoder-ffn-embed-dim", "40"]
    model = build(global_type, deep_type, pre_norm, R.UNEQUAL_SIZES + wider_decoder if sizes == "unequal" else TINY)
    if sizes == "unequal":  # FFN_l is a decoder sublayer of the decoder's FFN width (notes: 2d -> 2048 -> d),
        # its input [D; g] with D decoder-sized and g encoder-sized (Eq. 2)
        ffn = model.decoder.layers[0].sentential_ffn
        assert ffn.input_proj.weight.shape == (40, 24) and ffn.context_proj.weight.shape == (40, 16)
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 5, 3), (4, 6, 2))
    assert src_tokens.eq(PAD).any() and prev.eq(PAD).any()
    expected = reference_logits(R.state_params(model), src_tokens, prev, global_type, deep_type, pre_norm, heads)
    for train in (True, False):
        model.train(train)
        with torch.no_grad():
            with R.float64_throughout():
                logits = model(src_tokens, src_lengths, prev)[0]
            shipped = model(src_tokens, src_lengths, prev)[0]  # with the code's float32 islands
        torch.testing.assert_close(logits, expected, atol=1e-9, rtol=0, msg=lambda m: f"train={train}: {m}")
        torch.testing.assert_close(shipped, expected, atol=1e-5, rtol=0, msg=lambda m: f"train={train}: {m}")
