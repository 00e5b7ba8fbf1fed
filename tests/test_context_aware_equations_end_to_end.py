"""transformer_context_aware end to end against Yang et al. (2019), "Context-Aware
Self-Attention Networks", written from the paper's equations.

The fairseq model's logits ``model(src_tokens, src_lengths, prev_output_tokens)`` must
equal a float64 reference that recomputes the whole network from the state dict's
weights with plain tensor operations (tests/equation_reference.py for the stock
Transformer), where every contextualised self-attention layer l of a stack uses

    Q^ = (1 - l_Q) Q + l_Q (C U_Q),  K^ = (1 - l_K) K + l_K (C U_K)          (Eq. 5)
    l_Q = sigmoid(Q V^H_Q + (C U_Q) V^C_Q),  l_K likewise                     (Eq. 6)
    O = ATT(Q^, K^) V                                                         (Eq. 7)

with Q = H^l W_Q (+ b_Q), H^l the layer's self-attention input (in pre-norm models
LN of the layer's input, which is what the code reads; the paper is post-norm), and C:
global c^l = mean of H^l over the real tokens (Eq. 8; on the decoder side the mean of
the positions <= i, footnote 2), deep C = [H^1, ..., H^{l-1}] (Eq. 9; none in layer 1),
deep-global c = [c^1, ..., c^l] (Eq. 10), deep-global + deep = both, each with its own
U, summed under one gate (design notes). Train mode (dropout 0) and eval mode; a
left-padded source batch and a right-padded target batch. One case adds the gate bias
(--context-gate-bias, NOT in the paper: a diagnostic start of the initialisation study),
l_Q = sigmoid(Q V^H_Q + (C U_Q) V^C_Q + b_Q), one learned scalar per gate and layer.

Mutations of the glue this test was checked against (each introduced by hand in
fairseq_ctx/models/transformer_context_aware.py, the test run, the change reverted):
  (1) the context of Q given to K and vice versa (contextualizer(k, q))     -> caught
  (2) deep context from the layers' outputs [H^2..H^l] instead of their
      inputs [H^1..H^{l-1}]                                                   -> caught
  (3) global context averaged over padding too                              -> caught
  (4) decoder global context over the whole target (not the prefix <= i)    -> caught
  (5) contexts built from V = H^l W_V instead of H^l                        -> caught
  (6) the gate bias dropped from the logit of Eq. 6 (module)                -> caught
tests/equation_mutations.py re-runs them.
"""
import pytest
import torch

import fairseq_ctx.models  # noqa: F401  (registers transformer_context_aware)
from tests import equation_reference as R
from tests.model_checks import build_model, random_batch

PAD = 1
HEADS = 2
D = 16
TINY = [
    "--encoder-embed-dim", str(D), "--encoder-ffn-embed-dim", "32", "--encoder-layers", "2",
    "--encoder-attention-heads", str(HEADS), "--decoder-embed-dim", str(D),
    "--decoder-ffn-embed-dim", "32", "--decoder-layers", "2",
    "--decoder-attention-heads", str(HEADS),
    "--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0",
]  # fmt: skip
PRE_NORM = ["--encoder-normalize-before", "--decoder-normalize-before"]


def prefix_mean(h, padding_mask):
    """Footnote 2: at position i the mean of the real positions <= i. (T, B, C)."""
    keep = (~padding_mask).t().unsqueeze(-1).double()
    return torch.cumsum(h * keep, dim=0) / torch.cumsum(keep, dim=0).clamp(min=1.0)


def context_hook(p, stack, context_type, apply_to, gated, causal, gate_bias=False):
    """The self_attention_hook of one stack: Eq. 5-10 for its layers, called for
    layers 1..L in order with each layer's self-attention input H^l. ``gate_bias``: the
    gates have the (non-paper) bias b inside Eq. 6's sigmoid."""
    inputs, global_contexts = [], []
    targets = ("query", "key") if apply_to == "both" else (apply_to,)

    def hook(l, h, padding_mask):
        if context_type == "none":
            return None
        # Eq. 8 (the encoder: one vector per sentence, broadcast over the positions)
        c_l = prefix_mean(h, padding_mask) if causal else R.masked_mean(h, padding_mask).unsqueeze(0)
        below = list(inputs)  # H^1..H^{l-1}
        inputs.append(h)
        global_contexts.append(c_l)
        parts = []  # (projection, C)
        if context_type == "global":
            parts.append(("global_proj", c_l))
        if context_type in ("deep_global", "deep_global+deep"):
            parts.append(("global_proj", torch.cat(global_contexts, dim=-1)))  # Eq. 10
        if context_type in ("deep", "deep_global+deep") and l > 1:
            parts.append(("deep_proj", torch.cat(below, dim=-1)))  # Eq. 9
        if not parts:
            return None  # layer 1 with deep context only: nothing below it, plain attention
        pre = f"{stack}.layers.{l - 1}.self_attn.contextualizer."

        def q_k_hook(q, k):
            projected = {"query": q, "key": k}
            for index, target in enumerate(targets):
                rows = slice(index * D, (index + 1) * D)  # U_Q / U_K are the row blocks
                # C U (Eq. 5); deep-global + deep: the two projections summed
                cu = sum(R.linear(context, p[pre + name + ".weight"][rows]) for name, context in parts)
                x = projected[target]
                if gated:
                    logit = (  # Eq. 6: one scalar per position
                        R.linear(x, p[pre + "gate_input"][index : index + 1])
                        + R.linear(cu, p[pre + "gate_context"][index : index + 1])
                    )
                    if gate_bias:  # not in the paper: + b, this gate's own scalar
                        logit = logit + p[pre + "gate_bias"][index]
                    gate = R.sigmoid(logit)
                    projected[target] = (1 - gate) * x + gate * cu  # Eq. 5
                else:
                    projected[target] = x + cu  # footnote 1 ablation: no gate
            return projected["query"], projected["key"]

        return {"q_k_hook": q_k_hook}

    return hook


def reference_logits(p, src_tokens, prev_tokens, encoder_context, decoder_context, apply_to, gated, pre_norm,
                     gate_bias=False, heads=(HEADS, HEADS)):
    """``heads``: (encoder, decoder) heads; the decoder's encoder attention has the decoder's."""
    encoder = R.transformer_encoder(
        p, src_tokens, PAD, heads[0], pre_norm,
        self_attention_hook=context_hook(p, "encoder", encoder_context, apply_to, gated, False, gate_bias),
    )  # fmt: skip
    return R.transformer_decoder(
        p, prev_tokens, encoder, PAD, heads[1], pre_norm,
        self_attention_hook=context_hook(p, "decoder", decoder_context, apply_to, gated, True, gate_bias),
    )  # fmt: skip


CASES = [
    # encoder context, decoder context, apply to, gated, pre-norm, gate bias (not in the paper)
    ("deep_global+deep", "none", "both", True, False, None),  # the default arch (Table 1 row 5)
    ("deep_global+deep", "deep_global+deep", "both", True, False, None),  # row 8
    ("global", "global", "query", True, False, None),  # rows 2 / decoder global; Table 3 query only
    ("deep", "deep_global", "key", False, False, None),  # rows 4 / 6; Table 3 key only; no gate
    ("deep_global", "deep", "both", True, True, None),  # pre-norm
    ("deep_global+deep", "deep_global+deep", "both", True, False, "-4"),  # init_study 12's bias, both sides
]


@pytest.mark.parametrize("encoder_context, decoder_context, apply_to, gated, pre_norm, gate_bias, sizes",
                         [(*case, "equal") for case in CASES]
                         + [("deep_global+deep", "deep_global+deep", "both", True, False, None, "unequal")])
def test_logits_equal_the_papers_equations(encoder_context, decoder_context, apply_to, gated, pre_norm, gate_bias,
                                           sizes):
    heads = R.UNEQUAL_HEADS if sizes == "unequal" else (HEADS, HEADS)
    args = ["--arch", "transformer_context_aware", "--encoder-context", encoder_context,
            "--decoder-context", decoder_context, "--context-apply", apply_to,
            *(R.UNEQUAL_SIZES if sizes == "unequal" else TINY),
            *([] if gated else ["--no-context-gate"]), *(PRE_NORM if pre_norm else []),
            *([] if gate_bias is None else ["--context-gate-bias", gate_bias])]  # fmt: skip
    model = build_model(args, vocab_size=40)[0].double()
    R.randomize_parameters(model, seed=11)  # the biases too: a different value per gate and layer
    p = R.state_params(model)
    assert (gate_bias is not None) == any(name.endswith(".contextualizer.gate_bias") for name in p)
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 5, 3), (4, 6, 2))
    assert src_tokens.eq(PAD).any() and prev.eq(PAD).any()
    expected = reference_logits(
        p, src_tokens, prev, encoder_context, decoder_context, apply_to, gated, pre_norm, gate_bias is not None, heads
    )
    for train in (True, False):
        model.train(train)
        with torch.no_grad():
            with R.float64_throughout():
                logits = model(src_tokens, src_lengths, prev)[0]
            shipped = model(src_tokens, src_lengths, prev)[0]  # with fairseq's float32 softmax
        torch.testing.assert_close(logits, expected, atol=1e-9, rtol=0, msg=lambda m: f"train={train}: {m}")
        torch.testing.assert_close(shipped, expected, atol=1e-5, rtol=0, msg=lambda m: f"train={train}: {m}")
