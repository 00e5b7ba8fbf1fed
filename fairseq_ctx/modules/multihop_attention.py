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

Speed: the extra hops are linear in the first-hop contexts (up to the scalars beta),
so their U_b/U_c projections can be applied to the encoder states once per source
(``prepare_source``) instead of to the contexts at every decoder step. Measured on CPU
this pays off in incremental decoding (the projections are cached and reused by every
step and beam) but not in training, where the per-step gradients of the large
prepared tensor cost more than the per-step matrix products they replace. So
``forward`` takes either H (hops applied per step) or the prepared tensor; the fairseq
decoder passes the prepared tensor only when decoding incrementally.
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
        """One hop applied to step contexts: s^(k), c^(k) (bsz, N, D) -> c'^(k), beta (bsz, N, 1).

        ``MultiHopAttention`` uses the equivalent precomputed form (``prepare_source``)."""
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
        """One hop applied to step contexts (``MultiHopAttention`` uses ``prepare_source``)."""
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

    @property
    def uses_prepared_source(self) -> bool:
        """True when ``prepare_source`` precomputes per-head projections (K > 1)."""
        return len(self.hops) > 0

    def prepare_source(self, source_hids: Tensor) -> Tensor:
        """Per-sentence projections of the encoder states, computed once per source.

        Every extra hop is linear in the first-hop context c^(k) = p^(k) H up to the
        scalars beta (Eq. 9), so U_b^(j,k) and U_c^(j,k) can be applied to H (all source
        positions at once) instead of to c^(k) at every decoder step:
            C_0 = H,  B_j^(k) = U_b^(j,k) C_{j-1}^(k),  C_j^(k) = U_c^(j,k) C_{j-1}^(k),
        and at a step  U_b^(j,k) c^(j-1,k) = (beta^(1..j-1) products) p^(k) B_j^(k).
        Same values as Eq. 7-9/19; the per-step cost drops from O(D^2) to O(srclen D)
        per head and hop, and the projections run as large matrix products.

        Returns a (srclen, bsz, N, W) view of batch-major memory holding, per head,
        [H | B_1 .. B_{K-1} | C_{K-1}] (dependent) or [H | C_{K-1}] (independent).
        ``srclen`` stays first so fairseq's LSTM decoder can carry it as ``encoder_outs``.
        """
        if not self.uses_prepared_source:
            return source_hids
        srclen, bsz, dim = source_hids.shape
        N = self.num_heads
        flat = source_hids.transpose(0, 1).reshape(bsz * srclen, dim)
        parts = [flat.unsqueeze(1).expand(-1, N, -1)]
        contexts = None  # C_{j-1}, per head: (bsz*srclen, N, D)
        for hop in self.hops:
            width = hop.context_proj.size(-1)
            if contexts is None:  # C_0 = H is shared by the heads: one GEMM for all of them
                weight = hop.context_proj.permute(1, 0, 2).reshape(dim, N * width)
                projected = torch.matmul(flat, weight).view(-1, N, width)
            else:
                projected = head_matmul(contexts, hop.context_proj)
            if self.hop_mode == "dependent":
                parts.append(projected[..., :dim])  # B_j = U_b^(j) C_{j-1}
                contexts = projected[..., dim:]  # C_j = U_c^(j) C_{j-1}
            else:
                contexts = projected  # C_j = U_c^(j) C_{j-1} (Eq. 19)
        parts.append(contexts)
        values = torch.cat(parts, dim=-1).view(bsz, srclen, N, -1).transpose(1, 2).contiguous()
        return values.permute(2, 0, 1, 3)  # (srclen, bsz, N, W) view of (bsz, N, srclen, W)

    def forward(
        self, query: Tensor, source_hids: Tensor, encoder_padding_mask: Optional[Tensor]
    ) -> Tuple[Tensor, Tensor]:
        """
        Args:
            query: d_i, (bsz, query_dim).
            source_hids: H, (srclen, bsz, D) (fairseq's LSTM encoder layout): the hops
                are applied to the step's contexts; or the output of ``prepare_source``
                (4-D): the hops use the per-sentence projections (same values).
            encoder_padding_mask: (srclen, bsz), True at padding, or None.
        Returns:
            o_i (bsz, output_dim) and the first-hop attention averaged over heads
            (srclen, bsz), the shape fairseq's LSTM decoder stores for alignment.
        """
        prepared = source_hids.dim() == 4
        bsz, srclen, N, D = query.size(0), source_hids.size(0), self.num_heads, self.source_dim
        queries = self.input_proj(query).view(bsz, N, D)  # Eq. 1
        if prepared:
            per_head = source_hids.permute(1, 2, 0, 3).reshape(bsz * N, srclen, -1)  # a view
            keys, values = per_head[..., :D], per_head[..., D:]
            scores = torch.bmm(queries.view(bsz * N, 1, D), keys.transpose(1, 2)).view(bsz, N, srclen)
        else:
            keys = source_hids.transpose(0, 1)  # (bsz, srclen, D), a view: bmm takes the strides
            scores = torch.bmm(queries, keys.transpose(1, 2))  # (bsz, N, srclen)
        # Eq. 2: softmax(s^(k) H^T) H; scores and softmax in fp32
        scores = scores.float()
        if encoder_padding_mask is not None:
            scores = scores.masked_fill(encoder_padding_mask.t().unsqueeze(1), float("-inf"))
        probs = F.softmax(scores, dim=-1)
        if not prepared:
            contexts = torch.bmm(probs.to(keys.dtype), keys)  # c^(k): (bsz, N, D)
            for hop in self.hops:  # Eq. 7-9 or Eq. 19, each hop on the previous hop's output
                contexts, _ = hop(queries, contexts)
        else:
            # p^(k) [B_1 .. B_{K-1} | C_{K-1}] for all heads in one bmm
            gathered = torch.bmm(probs.view(bsz * N, 1, srclen).to(values.dtype), values).view(bsz, N, -1)
            contexts = self.apply_hops(queries, gathered)
        # Eq. 16: o = tanh(W_o [c'_1; ...; c'_N; d])
        out = torch.tanh(self.output_proj(torch.cat((contexts.reshape(bsz, -1), query), dim=1)))
        attn = (probs[:, 0] if N == 1 else probs.mean(dim=1)).t().to(query.dtype)
        return out, attn

    def apply_hops(self, queries: Tensor, gathered: Tensor) -> Tensor:
        """Eq. 7-9 (or 19) for every extra hop, from p^(k) times the prepared projections."""
        D = self.source_dim
        if self.hop_mode == "independent":
            return gathered  # p^(k) C_{K-1}^(k) = U_c^(K-1,k) ... U_c^(1,k) c^(k) (Eq. 19)
        scale = None  # product of the previous hops' beta^(k), (bsz, N, 1)
        for j, hop in enumerate(self.hops):
            u_b_c = gathered[..., j * D : (j + 1) * D]  # U_b^(j,k) c^(j-1,k) before scaling
            if scale is not None:
                u_b_c = scale * u_b_c
            beta = hop.head_weights(queries, u_b_c)  # Eq. 7-8
            scale = beta if scale is None else scale * beta
        return scale * gathered[..., -D:]  # Eq. 9: c'^(k) = beta^(k) U_c^(k) c^(k), chained
