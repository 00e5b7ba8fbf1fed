"""Multi-head, multi-hop source-target attention for RNN decoders (Iida et al., 2019).

Pure torch (no fairseq import). ``MultiHopAttention`` is a drop-in replacement for
fairseq's ``lstm.AttentionLayer``: same call ``(query, source_hids, padding_mask)``,
same return ``(output, attn)`` and, for one head and one hop, the same parameter
names, shapes and function (Eq. 1-2 with N=1 followed by Eq. 16 is exactly Luong
"general" attention with an output layer, which is what fairseq's LSTM decoder does).

Notation (paper -> code), per decoder step i:
    d_i                       query          (bsz, query_dim)       decoder LSTM output
    H                         source_hids    (srclen, bsz, D)       encoder states
    W_a^(k)   (Eq. 1)         input_proj     rows k*D:(k+1)*D       stacked over heads
    c_i^(k)   (Eq. 2)         first-hop context of head k
    W_b, U_b^(k), U_c^(k), v_b  (Eq. 7-9)   one ``DependentHop`` per extra hop
    U_c^(k)   (Eq. 19)        one ``IndependentHop`` per extra hop
    W_o       (Eq. 16)        output_proj    input [c'_1; ...; c'_N; d_i]

Interpretations (see docs/notes/lstm_multihop.md):
* Every extra hop has its own W_b, U_b^(k), U_c^(k) and re-applies Eq. 7-9 to the
  previous hop's contexts, with the first-hop queries s^(k); this is what Table 5's
  parameter differences ((2N+1) D^2 per extra dependent hop, N D^2 per independent
  hop) pin down.
* Eq. 8's numerator e^(N) is a typo for e^(k) (otherwise beta would not depend on k).
* v_b: Table 5 leaves no room for a trainable v_b, so by default it is a fixed
  vector 1/sqrt(D) (a scaled sum of the tanh features, keeping the head scores O(1)
  whatever D is); ``learned_score_vector=True`` makes it a parameter (+D per hop).
* W_o's input order is [c'; d] rather than Eq. 16's [d; c'] (a column permutation
  of W_o, so the same function) to stay weight-compatible with fairseq's layer.
* No biases: fairseq's attention has none and Table 5 counts none.

Speed: decoding and training both apply the hops to each step's contexts (batched
over heads). Applying U_b/U_c to the encoder states once per sentence instead (the hops
are linear in c^(k) up to the scalars beta) was measured slower end to end: fairseq's
sequence generator reorders every incremental-state tensor at every step, and the
prepared (srclen x N x 3D) tensor made that copy and the per-step reads 6x larger than
the encoder states (docs/notes/lstm_multihop.md, "Speed").
"""
import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

HOP_MODES = ("dependent", "independent")

# fairseq's LSTM code initialises every weight U(-0.1, 0.1); keep the same so that a
# multi-hop model starts from the same distribution as the stock baseline.
INIT_RANGE = 0.1


def _uniform_(tensor: Tensor) -> Tensor:
    return nn.init.uniform_(tensor, -INIT_RANGE, INIT_RANGE)


def head_matmul(x: Tensor, weight: Tensor) -> Tensor:
    """Apply a different matrix to every head: (bsz, N, D_in) x (N, D_in, D_out) -> (bsz, N, D_out)."""
    return torch.bmm(x.transpose(0, 1), weight).transpose(0, 1)


class DependentHop(nn.Module):
    """One extra dependent hop (Eq. 7-9): heads are re-weighted by a softmax over heads."""

    def __init__(self, num_heads: int, dim: int, learned_score_vector: bool = False):
        super().__init__()
        self.num_heads = num_heads
        # W_b: shared by all heads of this hop (Eq. 7)
        self.query_proj = nn.Linear(dim, dim, bias=False)
        # [U_b^(k) | U_c^(k)] stacked along the output so each head needs one matmul
        self.context_proj = nn.Parameter(torch.empty(num_heads, dim, 2 * dim))
        score_vector = torch.full((dim,), 1.0 / math.sqrt(dim))
        if learned_score_vector:
            self.score_vector = nn.Parameter(score_vector)  # v_b (Eq. 7), trainable
        else:
            self.register_buffer("score_vector", score_vector, persistent=False)
        _uniform_(self.query_proj.weight)
        _uniform_(self.context_proj)
        if learned_score_vector:
            _uniform_(self.score_vector.data)

    def head_weights(self, queries: Tensor, u_b_c: Tensor) -> Tensor:
        """beta^(k) (Eq. 7-8) from s^(k) and U_b^(k) c^(k), both (bsz, N, D) -> (bsz, N, 1)."""
        hidden = torch.tanh(self.query_proj(queries) + u_b_c)  # Eq. 7, inside v_b^T(.)
        scores = torch.matmul(hidden.float(), self.score_vector.float())  # Eq. 7: e^(k), fp32
        return F.softmax(scores, dim=-1).to(u_b_c.dtype).unsqueeze(-1)  # Eq. 8: over the N heads

    def forward(self, queries: Tensor, contexts: Tensor) -> Tuple[Tensor, Tensor]:
        """One hop applied to step contexts: s^(k), c^(k) (bsz, N, D) -> c'^(k), beta (bsz, N, 1)."""
        dim = contexts.size(-1)
        projected = head_matmul(contexts, self.context_proj)
        u_b_c, u_c_c = projected[..., :dim], projected[..., dim:]
        beta = self.head_weights(queries, u_b_c)
        return beta * u_c_c, beta  # Eq. 9


class IndependentHop(nn.Module):
    """One extra independent hop (Eq. 19): c'^(k) = U_c^(k) c^(k), heads do not interact."""

    def __init__(self, num_heads: int, dim: int):
        super().__init__()
        self.num_heads = num_heads
        self.context_proj = nn.Parameter(torch.empty(num_heads, dim, dim))  # U_c^(k)
        _uniform_(self.context_proj)

    def forward(self, queries: Tensor, contexts: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
        """One hop applied to step contexts: c^(k) (bsz, N, D) -> c'^(k)."""
        return head_matmul(contexts, self.context_proj), None  # Eq. 19


class MultiHopAttention(nn.Module):
    """N-head, K-hop attention of one decoder step over the encoder states.

    Args:
        query_dim: size of the decoder state d_i.
        source_dim: size D of the encoder states (and of every context vector).
        output_dim: size of o_i (Eq. 16).
        num_heads: N >= 1.
        num_hops: K >= 1 (K = 1: multi-head attention only, Eq. 1-2).
        hop_mode: "dependent" (Eq. 7-9) or "independent" (Eq. 19) extra hops.
        learned_score_vector: make v_b of Eq. 7 a parameter (not counted in Table 5).
    """

    def __init__(
        self,
        query_dim: int,
        source_dim: int,
        output_dim: int,
        num_heads: int = 2,
        num_hops: int = 2,
        hop_mode: str = "dependent",
        learned_score_vector: bool = False,
    ):
        super().__init__()
        if num_heads < 1:
            raise ValueError(f"num_heads (--attention-heads) must be >= 1, got {num_heads}")
        if num_hops < 1:
            raise ValueError(f"num_hops (--attention-hops) must be >= 1, got {num_hops}")
        if hop_mode not in HOP_MODES:
            raise ValueError(f"hop_mode (--hop-mode) must be one of {HOP_MODES}, got {hop_mode!r}")
        self.num_heads = num_heads
        self.num_hops = num_hops
        self.hop_mode = hop_mode
        self.source_dim = source_dim
        # W_a^(1..N) (Eq. 1), stacked: one matmul computes all heads' queries
        self.input_proj = nn.Linear(query_dim, num_heads * source_dim, bias=False)
        if hop_mode == "dependent":
            hops = [DependentHop(num_heads, source_dim, learned_score_vector) for _ in range(num_hops - 1)]
        else:
            hops = [IndependentHop(num_heads, source_dim) for _ in range(num_hops - 1)]
        self.hops = nn.ModuleList(hops)
        # W_o (Eq. 16), widened by D per head
        self.output_proj = nn.Linear(num_heads * source_dim + query_dim, output_dim, bias=False)
        _uniform_(self.input_proj.weight)
        _uniform_(self.output_proj.weight)

    def forward(
        self, query: Tensor, source_hids: Tensor, encoder_padding_mask: Optional[Tensor]
    ) -> Tuple[Tensor, Tensor]:
        """
        Args:
            query: d_i, (bsz, query_dim).
            source_hids: H, (srclen, bsz, D) (fairseq's LSTM encoder layout).
            encoder_padding_mask: (srclen, bsz), True at padding, or None.
        Returns:
            o_i (bsz, output_dim) and the first-hop attention averaged over heads
            (srclen, bsz), the shape fairseq's LSTM decoder stores for alignment.
        """
        bsz, N, D = query.size(0), self.num_heads, self.source_dim
        queries = self.input_proj(query).view(bsz, N, D)  # Eq. 1
        keys = source_hids.transpose(0, 1)  # (bsz, srclen, D), a view: bmm takes the strides
        # Eq. 2: softmax(s^(k) H^T) H; scores and softmax in fp32
        scores = torch.bmm(queries, keys.transpose(1, 2)).float()  # (bsz, N, srclen)
        if encoder_padding_mask is not None:
            scores = scores.masked_fill(encoder_padding_mask.t().unsqueeze(1), float("-inf"))
        probs = F.softmax(scores, dim=-1)
        contexts = torch.bmm(probs.to(keys.dtype), keys)  # c^(k): (bsz, N, D)
        for hop in self.hops:  # Eq. 7-9 or Eq. 19, each hop on the previous hop's output
            contexts, _ = hop(queries, contexts)
        # Eq. 16: o = tanh(W_o [c'_1; ...; c'_N; d])
        out = torch.tanh(self.output_proj(torch.cat((contexts.reshape(bsz, -1), query), dim=1)))
        attn = (probs[:, 0] if N == 1 else probs.mean(dim=1)).t().to(query.dtype)
        return out, attn
