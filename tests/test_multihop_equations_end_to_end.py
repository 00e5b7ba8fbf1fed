"""lstm_multihop end to end against Iida et al. (2019), "A Multi-Hop Attention for RNN
based Neural Machine Translation", written from the paper's equations.

The fairseq model's logits ``model(src_tokens, src_lengths, prev_output_tokens)`` must
equal a float64 reference that recomputes the whole network from the state dict's
weights with plain tensor operations: fairseq's ``lstm`` (bidirectional encoder, decoder
with input feeding; tests/equation_reference.py) whose attention step is, for the
decoder state d_i, heads k = 1..N and encoder states H,

    s^(k) = W_a^(k) d_i                                                  (Eq. 1)
    c^(k) = softmax(s^(k) H^T) H     (over the real source tokens)       (Eq. 2)
    per extra hop, dependent:
      e^(k) = v_b^T tanh(W_b s^(k) + U_b^(k) c^(k))                      (Eq. 7)
      beta^(k) = exp(e^(k)) / sum_n exp(e^(n))                           (Eq. 8)
      c'^(k) = beta^(k) U_c^(k) c^(k)                                    (Eq. 9)
    or independent: c'^(k) = U_c^(k) c^(k)                               (Eq. 19)
    (a third hop re-applies them to the previous hop's c', with the first hop's s^(k):
    design notes)
    o_i = tanh(W_o [d_i; c'^(1); ...; c'^(N)])                           (Eq. 16)

v_b is the fixed vector 1/sqrt(D) unless --hop-learned-score-vector (docs/notes). The
code stores W_o's columns in the order [c'^(1); ...; c'^(N); d_i] (a permutation of
Eq. 16's); the reference reads them so. o_i then goes through fairseq's output layers.
Train mode (dropout 0) and eval mode; a left-padded source batch and a right-padded
target batch.

Mutations of the glue this test was checked against (each introduced by hand, the
test run, the change reverted):
  (1) every extra hop fed the first hop's contexts c instead of the
      previous hop's c' (modules/multihop_attention.py)                   -> caught
  (2) the source padding mask dropped (modules/multihop_attention.py)     -> caught
  (3) --hop-mode not passed on by the glue (always dependent;
      models/lstm_multihop.py)                                            -> caught (the
      hop parameters no longer have Eq. 19's shapes)
  (4) Eq. 8's softmax over the batch axis instead of the heads
      (modules/multihop_attention.py)                                     -> caught
tests/equation_mutations.py re-runs them.
"""
import math

import pytest
import torch

import fairseq_ctx.models  # noqa: F401  (registers lstm_multihop)
from tests import equation_reference as R
from tests.model_checks import build_model, random_batch

PAD = 1
TINY = [
    "--encoder-embed-dim", "16", "--encoder-hidden-size", "8", "--encoder-bidirectional",
    "--decoder-embed-dim", "16", "--decoder-hidden-size", "12", "--decoder-out-embed-dim", "16",
    "--dropout", "0",
]  # fmt: skip


def multihop_attention(p, num_heads, num_hops, hop_mode, learned_score_vector):
    """The attention step o_i = f(d_i, H) of Eq. 1-2, 7-9 / 19, 16."""
    pre = "decoder.attention."
    N = num_heads

    def attend(d, H, padding_mask):
        D = H.size(-1)
        W_a = p[pre + "input_proj.weight"]
        s = [R.linear(d, W_a[k * D : (k + 1) * D]) for k in range(N)]  # Eq. 1
        c = []
        for k in range(N):  # Eq. 2
            scores = torch.einsum("bd,sbd->bs", s[k], H).masked_fill(padding_mask.t(), float("-inf"))
            c.append(torch.einsum("bs,sbd->bd", R.softmax(scores, dim=-1), H))
        for hop in range(num_hops - 1):
            hp = f"{pre}hops.{hop}."
            U = p[hp + "context_proj"]  # per head: c U[k] = [U_b^(k) c ; U_c^(k) c] (dependent)
            width = D if hop_mode == "independent" else 2 * D  # U_c (Eq. 19) or [U_b, U_c] (Eq. 7-9)
            assert U.shape == (N, D, width), f"hop {hop + 1}: {tuple(U.shape)} is not ({N}, {D}, {width})"
            if hop_mode == "independent":
                c = [torch.matmul(c[k], U[k]) for k in range(N)]  # Eq. 19
                continue
            U_b = [U[k][:, :D].t() for k in range(N)]
            U_c = [U[k][:, D:].t() for k in range(N)]
            if learned_score_vector:
                v_b = p[hp + "score_vector"]
            else:
                v_b = torch.full((D,), 1 / math.sqrt(D), dtype=torch.float64)
            W_b = p[hp + "query_proj.weight"]
            e = torch.stack(
                [torch.tanh(R.linear(s[k], W_b) + R.linear(c[k], U_b[k])) @ v_b for k in range(N)], dim=-1
            )  # Eq. 7: (B, N)
            beta = R.softmax(e, dim=-1)  # Eq. 8, over the heads
            c = [beta[:, k : k + 1] * R.linear(c[k], U_c[k]) for k in range(N)]  # Eq. 9
        W_o = p[pre + "output_proj.weight"]  # columns [c'_1 .. c'_N | d]
        mixed = R.linear(d, W_o[:, N * D :])
        mixed = mixed + sum(R.linear(c[k], W_o[:, k * D : (k + 1) * D]) for k in range(N))
        return torch.tanh(mixed)  # Eq. 16

    return attend


CASES = [
    # heads, hops, mode, learned v_b
    (2, 2, "dependent", False),  # the default arch (the paper's main model)
    (3, 3, "dependent", True),  # Table 2 3x3, v_b trained
    (2, 3, "independent", False),  # Eq. 19
    (3, 1, "dependent", False),  # multi-head, single hop (Eq. 1-2 only)
]


@pytest.mark.parametrize("num_heads, num_hops, hop_mode, learned", CASES)
def test_logits_equal_the_papers_equations(num_heads, num_hops, hop_mode, learned):
    args = ["--arch", "lstm_multihop", "--attention-heads", str(num_heads), "--attention-hops", str(num_hops),
            "--hop-mode", hop_mode, *TINY, *(["--hop-learned-score-vector"] if learned else [])]  # fmt: skip
    model = build_model(args, vocab_size=40)[0].double()
    R.randomize_parameters(model, seed=3, scale=2.0)
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 5, 3), (4, 6, 2))
    assert src_tokens.eq(PAD).any() and prev.eq(PAD).any()
    p = R.state_params(model)
    encoder = R.bidirectional_lstm_encoder(p, src_tokens, PAD)
    expected = R.lstm_decoder(p, prev, encoder, multihop_attention(p, num_heads, num_hops, hop_mode, learned))
    for train in (True, False):
        model.train(train)
        with torch.no_grad():
            with R.float64_throughout():
                logits = model(src_tokens, src_lengths, prev)[0]
            shipped = model(src_tokens, src_lengths, prev)[0]  # with the float32 attention scores
        torch.testing.assert_close(logits, expected, atol=1e-9, rtol=0, msg=lambda m: f"train={train}: {m}")
        torch.testing.assert_close(shipped, expected, atol=1e-5, rtol=0, msg=lambda m: f"train={train}: {m}")
