"""transformer_cross_agg end to end against Cao, Zhao, Yu, "Cross Aggregation of
Multi-Head Attention for NMT", written from the paper's equations.

The fairseq model's logits ``model(src_tokens, src_lengths, prev_output_tokens)`` must
equal a float64 reference that recomputes the whole network from the state dict's
weights with plain tensor operations (tests/equation_reference.py for the stock
Transformer), where every routed self-attention layer attends with
softmax(E + Omega^v + Omega^h) (Eq. 9), E the masked logits (Eq. 4-5; scaled by
1/sqrt(d_head) as the stock attention does, where Eq. 4 writes sqrt(d): docs/notes) and:

- Algorithm 1 (simple routing, T iterations) with the softmax over the INPUT capsules
  (line 4), S_n = sum_i C_{i->n} V_{i->n} (Eq. 8), Omega_n = squash(S_n) (Eq. 7),
  B_{i->n} += Omega_n . V_{i->n} (line 6), the votes being the logit vectors themselves
  (masked keys zeroed: design notes);
- vertical (Eq. 10-13): input capsules the heads h, output capsules the queries l,
  V_{h->l} = e_{l,h}; Omega^v = [lambda_1 Omega~, ..., lambda_H Omega~] with
  lambda = softmax(W^v [sum_l B_{h->l}]_h), B after the last iteration, the sum over
  the real queries (on the decoder side over the prefix t <= l: docs/notes);
- horizontal, positional (Eq. 14): for query l, input capsules the real queries t <= l,
  output capsules the heads, V_{t->h} = e_{t,h}; B initialised to zero or to the
  logits alpha^h_{l,t} (Eq. 15).

Train mode (dropout 0) and eval mode; a left-padded source batch and a right-padded
target batch.

Mutations of the glue this test was checked against (each introduced by hand in
fairseq_ctx/models/transformer_cross_agg.py, the test run, the change reverted):
  (1) routing along the wrong axis (the logits handed over with queries and
      keys swapped, the routed term swapped back)                          -> caught
  (2) the routed term skipped in encoder layer 2                           -> caught
  (3) no padding mask for the capsules (padding queries become inputs)     -> caught
  (4) decoder layers built non-causal (Eq. 13's sum over all queries)      -> caught
tests/equation_mutations.py re-runs them.
"""
import pytest
import torch

import fairseq_ctx.models  # noqa: F401  (registers transformer_cross_agg)
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


def squash(s):
    """Eq. 7: |S|^2 / (1 + |S|^2) * S / |S| (0 for S = 0)."""
    norm2 = (s * s).sum()
    if norm2 == 0:
        return torch.zeros_like(s)
    return norm2 / (1 + norm2) * s / torch.sqrt(norm2)


def simple_routing(votes, iterations, init=None):
    """Algorithm 1. votes[i][n] = V_{i->n} (M-vectors) for I inputs and N outputs;
    init: B_{i->n} (I x N) or None (zero, line 2). Returns (Omega (N, M), final B)."""
    I, N = len(votes), len(votes[0])
    B = torch.zeros(I, N, dtype=torch.float64) if init is None else init.clone()
    for _ in range(iterations):
        C = R.softmax(B, dim=0)  # line 4: softmax(B_{* -> n}), over the inputs
        omega = []
        for n in range(N):
            s = sum(C[i, n] * votes[i][n] for i in range(I))  # Eq. 8
            omega.append(squash(s))  # Eq. 7
        for i in range(I):
            for n in range(N):
                B[i, n] = B[i, n] + torch.dot(omega[n], votes[i][n])  # line 6
    return torch.stack(omega), B


def routed_logits(E, query_padding, head_weight, vertical, horizontal, init, iterations, causal):
    """E^ = E + Omega^v + Omega^h (Eq. 9) for one self-attention call.
    E (B, H, L, M) masked logits (-inf at masked keys); query_padding (B, L)."""
    Bsz, H, L, M = E.shape
    votes = E.masked_fill(torch.isneginf(E), 0.0)  # masked keys vote nothing
    routed = torch.zeros_like(votes)
    for b in range(Bsz):
        real = [l for l in range(L) if not query_padding[b, l]]
        if vertical:  # Eq. 10-13
            vertical_votes = [[votes[b, h, l] for l in range(L)] for h in range(H)]  # V_{h->l} = e_{l,h}
            omega, agreement = simple_routing(vertical_votes, iterations)  # Eq. 11: (L, M), B (H, L)
            for l in range(L):
                summed = [t for t in real if t <= l] if causal else real
                b_h = torch.stack([sum(agreement[h, t] for t in summed) for h in range(H)])
                lam = R.softmax(torch.matmul(head_weight, b_h), dim=0)  # Eq. 13
                for h in range(H):
                    routed[b, h, l] += lam[h] * omega[l]  # Eq. 12
        if horizontal:  # Eq. 14-15
            for l in range(L):
                inputs = [t for t in real if t <= l]
                if not inputs:
                    continue  # a query with no input capsule: Omega = 0
                horizontal_votes = [[votes[b, h, t] for h in range(H)] for t in inputs]  # V_{t->h} = e_{t,h}
                start = None
                if init == "self":  # Eq. 15: B^init_{t->h} = alpha^h_{l,t}
                    start = torch.stack([torch.stack([E[b, h, l, t] for h in range(H)]) for t in inputs])
                omega, _ = simple_routing(horizontal_votes, iterations, start)  # (H, M)
                for h in range(H):
                    routed[b, h, l] += omega[h]
    return E + routed  # -inf stays -inf at masked keys


def routing_hook(p, stack, options, causal, heads):
    def hook(l, h, padding_mask):
        weight = p.get(f"{stack}.layers.{l - 1}.self_attn.cross_aggregation.head_weight.weight")
        # Eq. 13: W^v maps the H head sums to H weights, H this stack's heads
        assert weight is None or tuple(weight.shape) == (heads, heads), f"{stack} W^v {tuple(weight.shape)}, H = {heads}"
        return {"logit_hook": lambda E: routed_logits(E, padding_mask, weight, causal=causal, **options)}

    return hook


def reference_logits(p, src_tokens, prev_tokens, side, options, pre_norm, heads=(HEADS, HEADS)):
    """``heads``: (encoder, decoder) heads; the decoder's encoder attention has the decoder's."""
    encoder_hook = routing_hook(p, "encoder", options, False, heads[0]) if side in ("encoder", "both") else None
    decoder_hook = routing_hook(p, "decoder", options, True, heads[1]) if side in ("decoder", "both") else None
    encoder = R.transformer_encoder(p, src_tokens, PAD, heads[0], pre_norm, self_attention_hook=encoder_hook)
    return R.transformer_decoder(p, prev_tokens, encoder, PAD, heads[1], pre_norm, self_attention_hook=decoder_hook)


CASES = [
    # side, vertical, horizontal, init, T, pre-norm
    ("encoder", True, True, "zero", 3, False),  # the default arch: Table 1 row 4
    ("both", True, True, "self", 3, False),  # row 5, both sides
    ("both", False, True, "zero", 3, False),  # row 2
    ("decoder", False, True, "self", 2, False),  # row 3, decoder only
    ("both", True, False, "zero", 2, False),  # vertical only
    ("both", True, True, "zero", 3, True),  # pre-norm
]


@pytest.mark.parametrize("side, vertical, horizontal, init, iterations, pre_norm, sizes",
                         [(*case, "equal") for case in CASES] + [("both", True, True, "self", 2, False, "unequal")])
def test_logits_equal_the_papers_equations(side, vertical, horizontal, init, iterations, pre_norm, sizes):
    heads = R.UNEQUAL_HEADS if sizes == "unequal" else (HEADS, HEADS)
    args = ["--arch", "transformer_cross_agg", "--routing-side", side, "--routing-init", init,
            "--routing-iters", str(iterations), *(R.UNEQUAL_SIZES if sizes == "unequal" else TINY),
            "--routing-vertical" if vertical else "--no-routing-vertical",
            "--routing-horizontal" if horizontal else "--no-routing-horizontal",
            *(PRE_NORM if pre_norm else [])]  # fmt: skip
    model = build_model(args, vocab_size=40)[0].double()
    R.randomize_parameters(model, seed=5)
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 5, 3), (4, 6, 2))
    assert src_tokens.eq(PAD).any() and prev.eq(PAD).any()
    options = dict(vertical=vertical, horizontal=horizontal, init=init, iterations=iterations)
    expected = reference_logits(R.state_params(model), src_tokens, prev, side, options, pre_norm, heads)
    for train in (True, False):
        model.train(train)
        with torch.no_grad():
            with R.float64_throughout():
                logits = model(src_tokens, src_lengths, prev)[0]
            shipped = model(src_tokens, src_lengths, prev)[0]  # with the float32 routing
        torch.testing.assert_close(logits, expected, atol=1e-9, rtol=0, msg=lambda m: f"train={train}: {m}")
        torch.testing.assert_close(shipped, expected, atol=1e-5, rtol=0, msg=lambda m: f"train={train}: {m}")
