"""Sentential context for NMT (Wang et al., 2019, "Exploiting Sentential Context for
Neural Machine Translation"). Pure torch: no fairseq import.

Tensor layouts follow fairseq: encoder states are time-major ``(S, B, C)``, padding
masks are ``(B, S)`` with ``True`` at padding, decoder states are ``(T, B, C)``.

Pieces, by equation:
- ``masked_mean`` / ``masked_max``: GLOBAL_MEAN / GLOBAL_MAX (Eq. 4-5), padding excluded.
- ``AttentivePooling``: GLOBAL_ATT(g0, H) (Eq. 6) with the query g0 = MAX(H^0) (Eq. 7);
  ``num_pools`` independent attentions evaluated as one batched computation, one per
  encoder layer for the deep context (Eq. 8).
- ``RecurrentLayerAggregation``: DEEP_RNN, last GRU state over g^1..g^L (Eq. 9).
- ``TransparentAttention``: DEEP_TAM, sum_l beta_{i,l} g^l with beta = ATT_g(query, G)
  (Eq. 10-11).
- ``SententialFeedForward``: FFN_l([D^{l-1}; g]) read by decoder layer l (Eq. 1-2).
- ``SententialContext``: g(X) on the encoder side, shallow (Eq. 3) or deep (Eq. 8).
"""
import math
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

GLOBAL_CHOICES = ("mean", "max", "attention")
DEEP_CHOICES = ("none", "rnn", "tam")
# where g0 = MAX(H^0) (Eq. 7) reads H^0: after (fairseq's encoder_states[0]) or before the
# encoder's embedding dropout; the choice is made by the encoder (transformer_sentential)
G0_CHOICES = ("dropout", "no_dropout")


def _keep_mask(padding_mask: Optional[Tensor], states: Tensor) -> Optional[Tensor]:
    """(B, S) padding mask -> (S, B, 1) boolean mask of real tokens, broadcastable to states."""
    if padding_mask is None:
        return None
    return (~padding_mask).transpose(0, 1).unsqueeze(-1).to(states.device)


def masked_mean(states: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
    """GLOBAL_MEAN (Eq. 4): mean over the non-padding positions.

    states: ``(..., S, B, C)``; padding_mask: ``(B, S)`` or None. Returns ``(..., B, C)``.
    Accumulates in fp32 so long fp16 sentences do not lose precision.
    """
    keep = _keep_mask(padding_mask, states)
    if keep is None:
        return states.float().mean(dim=-3).to(states.dtype)
    total = (states.float() * keep).sum(dim=-3)
    count = keep.sum(dim=0).clamp(min=1)  # (B, 1)
    return (total / count).to(states.dtype)


def masked_max(states: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
    """GLOBAL_MAX (Eq. 5) and g0 = MAX(H^0) (Eq. 7): channel-wise max over non-padding positions.

    states: ``(..., S, B, C)``; padding_mask: ``(B, S)`` or None. Returns ``(..., B, C)``.
    """
    keep = _keep_mask(padding_mask, states)
    if keep is None:
        return states.amax(dim=-3)
    return states.masked_fill(~keep, float("-inf")).amax(dim=-3)


class AttentivePooling(nn.Module):
    """GLOBAL_ATT(g0, H) (Eq. 6): multi-head attention with ONE query per sentence (g0)
    over the states H, for ``num_pools`` independent attentions at once (one per encoder
    layer in the deep model, Eq. 8; each has its own parameters).

    Equal to a standard multi-head attention (q/k/v/out projections, scaled dot
    product) with query length 1. Because there is a single query, the key projection
    is folded into the query (score_s = (W_k,h^T q_h) . h_s) and the value projection
    is applied after pooling (sum_s a_s (W_v,h h_s + b_v,h) = W_v,h (sum_s a_s h_s) +
    b_v,h sum_s a_s): O(S*C) per head instead of projecting every position, O(S*C^2).
    sum_s a_s is 1 after the softmax, but not after attention dropout (which zeroes
    weights and rescales the rest): in training with dropout b_v,h is weighted by the
    dropped-out weights' sum, which keeps the rewrite exact; without dropout it is 1.
    The key bias is omitted: it adds the same score to every key
    of a query, which the softmax cancels, so it could never learn anything.
    """

    def __init__(self, embed_dim: int, num_heads: int, num_pools: int = 1, dropout: float = 0.0):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.num_pools = num_pools
        self.dropout = dropout
        shape = (num_pools, embed_dim, embed_dim)  # (pool, out, in) as nn.Linear
        self.q_weight = nn.Parameter(torch.empty(shape))
        self.q_bias = nn.Parameter(torch.empty(num_pools, embed_dim))
        self.k_weight = nn.Parameter(torch.empty(shape))
        self.v_weight = nn.Parameter(torch.empty(shape))
        self.v_bias = nn.Parameter(torch.empty(num_pools, embed_dim))
        self.out_weight = nn.Parameter(torch.empty(shape))
        self.out_bias = nn.Parameter(torch.empty(num_pools, embed_dim))
        self.reset_parameters()

    def reset_parameters(self):
        # as fairseq's MultiheadAttention: xavier (gain 1/sqrt 2 for q/k/v), zero biases
        for pool in range(self.num_pools):
            for weight in (self.q_weight, self.k_weight, self.v_weight):
                nn.init.xavier_uniform_(weight[pool], gain=1 / math.sqrt(2))
            nn.init.xavier_uniform_(self.out_weight[pool])
        for bias in (self.q_bias, self.v_bias, self.out_bias):
            nn.init.zeros_(bias)

    def forward(self, query: Tensor, states: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
        """query: ``(B, C)`` (g0); states: ``(P, S, B, C)``; padding_mask ``(B, S)`` or None.
        Returns ``(P, B, C)``: one sentence vector per pool."""
        P, S, B, C = states.shape
        H, Dh = self.num_heads, self.head_dim
        q = torch.einsum("bc,pdc->pbd", query, self.q_weight) + self.q_bias.unsqueeze(1)
        q = (q * Dh**-0.5).view(P, B, H, Dh)
        # W_k,h^T q_h: the query moved into the input space of the states
        q_in = torch.einsum("pbhe,phec->pbhc", q, self.k_weight.view(P, H, Dh, C))
        scores = torch.einsum("pbhc,psbc->pbhs", q_in, states).float()
        if padding_mask is not None:
            scores = scores.masked_fill(padding_mask.view(1, B, 1, S), float("-inf"))
        weights = F.softmax(scores, dim=-1)
        value_bias = self.v_bias.view(P, 1, H, Dh)
        if self.training and self.dropout > 0:
            weights = F.dropout(weights, p=self.dropout)
            # the dropped-out weights no longer sum to 1: b_v,h is weighted by their sum
            value_bias = value_bias * weights.sum(dim=-1, keepdim=True).to(states.dtype)
        weights = weights.to(states.dtype)
        pooled = torch.einsum("pbhs,psbc->pbhc", weights, states)
        heads = torch.einsum("pbhc,phec->pbhe", pooled, self.v_weight.view(P, H, Dh, C))
        heads = (heads + value_bias).reshape(P, B, C)
        return torch.einsum("pbc,pdc->pbd", heads, self.out_weight) + self.out_bias.unsqueeze(1)


class RecurrentLayerAggregation(nn.Module):
    """DEEP_RNN (Eq. 9): a GRU reads g^1..g^L; its last state is the sentential context.

    A GRU, not an LSTM: Table 1's +26.8M leaves room for 3*(2*C*C + 2*C) = 1.6M
    (C = 512), an LSTM would add 2.1M. It runs in fp32 under autocast (6 steps on a
    (B, C) batch: negligible cost) so the recurrence is numerically safe in fp16/bf16.
    """

    def __init__(self, embed_dim: int):
        super().__init__()
        self.rnn = nn.GRU(embed_dim, embed_dim, num_layers=1, batch_first=True)

    def forward(self, layer_contexts: Tensor) -> Tensor:
        """layer_contexts: ``(B, L, C)`` = G. Returns g = r_L, ``(B, C)``."""
        with torch.autocast(device_type=layer_contexts.device.type, enabled=False):
            weight_dtype = self.rnn.weight_hh_l0.dtype
            _, last = self.rnn(layer_contexts.to(weight_dtype))
        return last[-1].to(layer_contexts.dtype)


class TransparentAttention(nn.Module):
    """DEEP_TAM (Eq. 10-11): g_i = sum_l beta_{i,l} g^l with beta_i = ATT_g(query_i, G).

    ATT_g is a multi-head attention with its own parameters over the L layer vectors
    G = {g^1..g^L}. The query is the decoder state at position i (see the model for
    which state). With value/output projections Eq. 10 becomes
    sum_l beta_{i,l} W_o W_v g^l per head: a learned linear map of the paper's sum,
    which is what a standard attention with its own parameters computes.
    The key projection has no bias (softmax cancels it, see ``AttentivePooling``).

    Everything on the G side is folded once per sentence (``project_layers``; ATT_g is
    shared by every decoder layer and decoding step): the query projection into the
    keys, q_h . k_{h,l} = x . (W_q,h^T k_{h,l}) + b_q,h . k_{h,l}, and the output
    projection into the values, W_o [sum_l beta_{h,l} v_{h,l}]_h = sum_{h,l} beta_{h,l}
    (W_o,h v_{h,l}). Per target position that leaves two products with H*L vectors
    instead of two C x C projections (the same function, same parameters).
    """

    def __init__(self, query_dim: int, context_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        if context_dim % num_heads != 0:
            raise ValueError(
                f"context_dim ({context_dim}) must be divisible by num_heads ({num_heads})"
            )
        self.num_heads = num_heads
        self.head_dim = context_dim // num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(query_dim, context_dim)
        self.k_proj = nn.Linear(context_dim, context_dim, bias=False)
        self.v_proj = nn.Linear(context_dim, context_dim)
        self.out_proj = nn.Linear(context_dim, context_dim)
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.out_proj.weight)
        for proj in (self.q_proj, self.v_proj, self.out_proj):
            nn.init.zeros_(proj.bias)

    def project_layers(self, layer_contexts: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """G ``(B, L, C)`` -> query-space keys ``(B, Cq, H*L)``, their score offsets
        ``(B, 1, H*L)`` and output-space values ``(B, H*L, C)``, the scaling included;
        laid out so that a decoding step is two batched matmuls without copies."""
        B, L, C = layer_contexts.shape
        H, Dh = self.num_heads, self.head_dim
        keys = self.k_proj(layer_contexts).view(B, L, H, Dh) * Dh**-0.5
        values = self.v_proj(layer_contexts).view(B, L, H, Dh)
        q_weight = self.q_proj.weight.view(H, Dh, -1)  # W_q,h: (Dh, Cq) per head
        query_keys = torch.einsum("blhd,hdc->bchl", keys, q_weight).reshape(B, -1, H * L)
        key_offsets = torch.einsum("blhd,hd->bhl", keys, self.q_proj.bias.view(H, Dh))
        out_weight = self.out_proj.weight.view(C, H, Dh)  # W_o,h: (C, Dh) per head
        out_values = torch.einsum("blhd,chd->bhlc", values, out_weight).reshape(B, H * L, C)
        return query_keys, key_offsets.reshape(B, 1, H * L), out_values

    def forward(
        self, query: Tensor, query_keys: Tensor, key_offsets: Tensor, out_values: Tensor
    ) -> Tensor:
        """query ``(T, B, Cq)``; the rest from ``project_layers``. Returns ``(T, B, C)``."""
        T, B, _ = query.shape
        scores = torch.bmm(query.transpose(0, 1), query_keys.to(query.dtype))  # (B, T, H*L)
        scores = (scores.float() + key_offsets.float()).view(B, T, self.num_heads, -1)
        beta = F.softmax(scores, dim=-1)  # Eq. 11, over the L encoder layers
        beta = F.dropout(beta, p=self.dropout, training=self.training).to(query.dtype)
        mixed = torch.bmm(beta.view(B, T, -1), out_values.to(query.dtype))  # Eq. 10
        return mixed.transpose(0, 1) + self.out_proj.bias.to(query.dtype)


class SententialFeedForward(nn.Module):
    """FFN_l([D^{l-1}; g]) (Eq. 2): Linear(C_dec + C_g -> hidden) -> activation -> Linear(hidden -> C_dec).

    Table 1's +18.9M = 6 x (1024*2048 + 2048*512) (+ biases) fixes this shape (hidden
    2048 = the decoder FFN size). The first matrix W1 = [W1_D, W1_g] is stored as its
    two column blocks (``input_proj`` with b1, ``context_proj``): W1 [D; g] + b1 =
    W1_D D + W1_g g + b1 without concatenating inputs or slicing weights (slicing one
    matrix measured ~20% slower on CPU). With a sentence-level g (shallow, RNN)
    W1_g g + b1 is computed once per sentence (``sentence_bias``), not per position.
    """

    def __init__(
        self,
        input_dim: int,
        context_dim: int,
        hidden_dim: int,
        activation=F.relu,
        activation_dropout: float = 0.0,
    ):
        super().__init__()
        self.input_proj = nn.Linear(input_dim, hidden_dim)  # W1_D, b1
        self.context_proj = nn.Linear(context_dim, hidden_dim, bias=False)  # W1_g
        self.fc2 = nn.Linear(hidden_dim, input_dim)
        self.activation = activation
        self.activation_dropout = activation_dropout
        # the default init of ONE nn.Linear(input_dim + context_dim, hidden_dim)
        bound = 1 / math.sqrt(input_dim + context_dim)
        for param in (self.input_proj.weight, self.input_proj.bias, self.context_proj.weight):
            nn.init.uniform_(param, -bound, bound)

    def sentence_bias(self, context: Tensor) -> Tensor:
        """W1_g g + b1 for a sentence-level g ``(B, C_g)`` -> ``(B, hidden)``."""
        return F.linear(context, self.context_proj.weight, self.input_proj.bias)

    def forward(
        self,
        x: Tensor,
        context: Optional[Tensor] = None,
        sentence_bias: Optional[Tensor] = None,
    ) -> Tensor:
        """x ``(T, B, C_dec)``. Give either ``context``: g ``(B, C_g)`` or per position
        ``(T, B, C_g)``, or a precomputed ``sentence_bias`` ``(B, hidden)``."""
        if context is not None and context.dim() == x.dim():
            hidden = self.input_proj(x) + self.context_proj(context.to(x.dtype))
        else:
            if sentence_bias is None:
                if context is None:
                    raise ValueError("SententialFeedForward needs a context or a sentence_bias")
                sentence_bias = self.sentence_bias(context)
            if x.size(0) == 1:  # one decoding step: a single fused matmul + bias
                hidden = torch.addmm(
                    sentence_bias.to(x.dtype), x[0], self.input_proj.weight.t().to(x.dtype)
                ).unsqueeze(0)
            else:
                hidden = F.linear(x, self.input_proj.weight) + sentence_bias.to(x.dtype)
        hidden = self.activation(hidden)
        hidden = F.dropout(hidden, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden)


class SententialContext(nn.Module):
    """g(X) from the encoder: shallow GLOBAL(H^L) (Eq. 3) or deep g^l = GLOBAL(H^l) for
    every layer (Eq. 8), aggregated by an RNN (Eq. 9) or left as G for TAM (Eq. 10-11,
    which needs the decoder state and so runs in the decoder).

    forward(embeddings H^0, [H^1..H^L], padding_mask) returns ``(g, G)``:
    g ``(B, C)`` for shallow and RNN (None for TAM), G ``(B, L, C)`` for TAM (else None).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_layers: int,
        global_type: str = "attention",
        deep_type: str = "rnn",
        attention_dropout: float = 0.0,
    ):
        super().__init__()
        if global_type not in GLOBAL_CHOICES:
            raise ValueError(f"global_type must be one of {GLOBAL_CHOICES}, got {global_type!r}")
        if deep_type not in DEEP_CHOICES:
            raise ValueError(f"deep_type must be one of {DEEP_CHOICES}, got {deep_type!r}")
        self.global_type = global_type
        self.deep_type = deep_type
        self.num_layers = num_layers
        num_pools = num_layers if deep_type != "none" else 1
        self.attentive_pooling = (
            AttentivePooling(embed_dim, num_heads, num_pools, attention_dropout)
            if global_type == "attention"
            else None
        )
        self.layer_aggregation = (
            RecurrentLayerAggregation(embed_dim) if deep_type == "rnn" else None
        )

    def pool(self, embeddings: Tensor, states: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
        """GLOBAL over stacked states ``(P, S, B, C)`` -> ``(P, B, C)``."""
        if self.global_type == "mean":
            return masked_mean(states, padding_mask)
        if self.global_type == "max":
            return masked_max(states, padding_mask)
        query = masked_max(embeddings, padding_mask)  # g0 = MAX(H^0), Eq. 7
        return self.attentive_pooling(query, states, padding_mask)

    def forward(
        self,
        embeddings: Tensor,
        layer_states: List[Tensor],
        padding_mask: Optional[Tensor],
    ) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        if self.deep_type == "none":
            return self.pool(embeddings, layer_states[-1].unsqueeze(0), padding_mask)[0], None
        if len(layer_states) != self.num_layers:
            raise ValueError(
                f"deep sentential context expects {self.num_layers} layer states, "
                f"got {len(layer_states)}"
            )
        layer_contexts = self.pool(embeddings, torch.stack(layer_states), padding_mask)
        layer_contexts = layer_contexts.transpose(0, 1)  # G: (B, L, C)
        if self.deep_type == "rnn":
            return self.layer_aggregation(layer_contexts), None
        return None, layer_contexts
