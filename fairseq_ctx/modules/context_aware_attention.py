"""Context-aware self-attention (Yang et al., AAAI 2019), pure torch.

The queries and keys of a self-attention layer are contextualised with a context
matrix C (Eq. 5), weighted per position by a gating scalar (Eq. 6):

    Q^ = (1 - lq) Q + lq (C Uq)         lq = sigmoid(Q Vq_H + (C Uq) Vq_C)
    K^ = (1 - lk) K + lk (C Uk)         lk = sigmoid(K Vk_H + (C Uk) Vk_C)

C is built from the layer's own input H^l and from the inputs of the layers below:
  global           c^l = mean(H^l)                          (Eq. 8)
  deep             C = [H^1, ..., H^{l-1}]                  (Eq. 9)
  deep_global      c = [c^1, ..., c^l]                      (Eq. 10)
  deep_global+deep both, each with its own projection, summed, one gate.

Not in the paper: an optional learned bias b inside the sigmoid of Eq. 6 (``gate_bias``),
lq = sigmoid(Q Vq_H + (C Uq) Vq_C + b_q), a diagnostic arm of the initialisation study. Eq. 6
has no term that starts every gate near 0: with V = 0 each gate is exactly 0.5, with random V
they scatter around 0.5, so the stock logits Q K^T start scaled by (1 - lq)(1 - lk) (0.25 at
V = 0). With V = 0 and b = -4 every gate starts at sigmoid(-4) ~ 0.018: (almost) the stock
attention. Never the default.

Not in the paper either: optional dropout on the projected context C U (``context_dropout``),
noise on the added term of Eq. 5: the same dropped C U enters Eq. 5 and Eq. 6. It is aimed at
the added projections (U, V^C) but, through Q^ and K^ and the gradients, reaches W_Q, W_K and
the layers below (C's sources) too. When C U is one vector per sentence (an encoder ``global``
or ``deep_global`` context without ``deep``) the mask is one per sentence, shared by its
positions; otherwise one per position. Training only (and under fairseq's --retain-dropout);
0 (the default) is the paper. Its masks come from a private generator, so the global RNG, and
with it every stock dropout mask, stays as without the option: at one seed a run with it and
one without see the same stock dropout noise.

Tensors are time-first (T x B x C) as in fairseq; padding masks are B x T with True
at padding positions. Nothing here imports fairseq.
"""
import hashlib
import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

CONTEXT_TYPES = ("none", "global", "deep", "deep_global", "deep_global+deep")
CONTEXT_TARGETS = ("query", "key", "both")
# Initialisations of U and V (the paper states none; the equations are the same for all):
#   glorot        U and V Glorot-uniform (gain 1), as a plain nn.Linear user would.
#   gate_half     V^H = V^C = 0: every gate starts at lambda = sigmoid(0) = 0.5 exactly.
#   matched       U Glorot with the gain that gives rms(C U) = rms(Q) at the start when the
#                 context entries have the variance of the layer input (Q = H W_Q with
#                 fairseq's gain 1/sqrt(2); the projections of global and deep context, which
#                 are summed, share that variance); V Glorot. Real contexts are not i.i.d.:
#                 measured in d=256 encoders, rms(C U) / rms(Q) starts at 0.51-0.95 with
#                 the mean-over-positions (deep_global) contexts and 1.06-1.21 with deep
#                 ones, against ~2 for glorot.
#   zero_context  U = 0: C U = 0 at the start, so Q^ = (1 - lambda) Q; V Glorot.
#   gate_half_matched  both gate_half's V = 0 and matched's U: with glorot, gate_half and
#                 matched the fourth cell of a 2 x 2 over the two factors of the glorot
#                 start (random gates, C U at twice Q's size).
#   gate_half_zero_context  V = 0 and U = 0: every gate 0.5 and C U = 0, so each contextualised
#                 target starts halved with no context in it (both: Q / 2 and K / 2, the
#                 stock logits times 1/4; query or key alone: times 1/2); U learns from the
#                 first update (dQ^/dU = lambda C), V^H too, V^C only once U has moved (its
#                 first gradient is C U = 0). gate_half's shrinkage without its context
#                 term, a diagnostic arm of the study.
# Which of them learns best is what the initialisation study measures (BENCHMARKS.md):
# the fairseq arch defaults to gate_half (glorot without gates). This module keeps glorot
# as its default: with V = 0 every gate is 0.5 and tests of the gate see nothing (the
# fairseq-level tests ask for glorot explicitly).
CONTEXT_INITS = ("glorot", "gate_half", "matched", "zero_context", "gate_half_matched", "gate_half_zero_context")
GATE_HALF_INITS = ("gate_half", "gate_half_matched", "gate_half_zero_context")  # V = 0


def _wide(x: Tensor) -> Tensor:
    """``x`` in at least fp32 (fp16 / bf16 are widened; fp64 stays fp64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def context_units(context_type: str, layer_index: int) -> Tuple[int, int]:
    """How many d-wide blocks the context of 1-based layer ``layer_index`` holds.

    Returns ``(global_blocks, deep_blocks)``: the width of the global part of C
    (Eq. 8 / Eq. 10) and of the deep part (Eq. 9), in units of the model dimension.
    Layer 1 has nothing below it, so it has no deep context (Table 1's parameter
    counts confirm: deep adds sum_l (l-1) * 2 d^2).
    """
    if context_type not in CONTEXT_TYPES:
        raise ValueError(f"unknown context type {context_type!r}; expected one of {CONTEXT_TYPES}")
    if layer_index < 1:
        raise ValueError(f"layer_index is 1-based, got {layer_index}")
    uses_global = context_type in ("global", "deep_global", "deep_global+deep")
    global_blocks = 0
    if uses_global:
        global_blocks = 1 if context_type == "global" else layer_index
    deep_blocks = layer_index - 1 if context_type in ("deep", "deep_global+deep") else 0
    return global_blocks, deep_blocks


def masked_mean(x: Tensor, padding_mask: Optional[Tensor] = None) -> Tensor:
    """Eq. 8: mean of ``x`` (T x B x C) over the non-padding positions -> B x C.

    Summed in fp32 so that long fp16 / bf16 sequences do not lose precision; padding
    positions are zeroed with ``masked_fill`` (not a multiply) so NaN/inf there cannot
    leak into the mean.
    """
    xf = _wide(x)
    if padding_mask is None:
        return xf.mean(dim=0).to(x.dtype)
    pad = padding_mask.t().to(torch.bool).unsqueeze(-1)  # T x B x 1
    total = xf.masked_fill(pad, 0.0).sum(dim=0)
    count = (~pad).sum(dim=0).clamp(min=1).to(total.dtype)
    return (total / count).to(x.dtype)


def prefix_mean(
    x: Tensor,
    padding_mask: Optional[Tensor] = None,
    running_sum: Optional[Tensor] = None,
    running_count: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Causal global context for the decoder (footnote 2): at position i the mean of
    the non-padding positions <= i.

    ``running_sum`` (B x C, fp32) and ``running_count`` (B x 1, fp32) carry the sums of
    earlier positions, so incremental decoding keeps two small tensors instead of the
    history, and a full pass (no running state) computes exactly the same numbers.
    Returns ``(means T x B x C in x's dtype, new_sum, new_count)``.
    """
    xf = _wide(x)
    if padding_mask is not None:
        keep = ~padding_mask.t().to(torch.bool).unsqueeze(-1)  # T x B x 1
        xf = xf.masked_fill(~keep, 0.0)
        steps = keep.to(xf.dtype)
    else:
        steps = xf.new_ones(x.size(0), x.size(1), 1)
    sums = xf.cumsum(dim=0)
    counts = steps.cumsum(dim=0)
    if running_sum is not None:
        sums = sums + running_sum.unsqueeze(0)
        counts = counts + running_count.unsqueeze(0)
    means = sums / counts.clamp(min=1.0)
    return means.to(x.dtype), sums[-1], counts[-1]


class ContextHistory:
    """What the layers of one encoder or decoder stack leave for the layers above
    during ONE forward pass: their self-attention inputs H^j (deep context, Eq. 9)
    and their global contexts c^j (deep-global context, Eq. 10).

    The owning encoder/decoder clears it before and after each pass; each layer
    checks that exactly the layers below it have reported, so a layer that was
    skipped or run twice fails loudly instead of silently mixing layers.
    """

    def __init__(self) -> None:
        self.layer_inputs: List[Tensor] = []
        self.global_contexts: List[Tensor] = []

    def clear(self) -> None:
        self.layer_inputs = []
        self.global_contexts = []


class GateStatistics:
    """Running average of the gating scalars lq / lk over non-padding positions
    (the quantity plotted in Figures 2 and 3 of the paper)."""

    def __init__(self, targets: Tuple[str, ...]) -> None:
        self.targets = targets
        self.total: Optional[Tensor] = None
        self.count = 0

    @torch.no_grad()
    def update(self, gates: Tensor, padding_mask: Optional[Tensor] = None) -> None:
        """gates: T x B x n_targets; padding_mask: B x T (True = padding)."""
        flat = gates.double()
        if padding_mask is not None:
            keep = ~padding_mask.t().to(torch.bool)
            flat = flat[keep]
        else:
            flat = flat.reshape(-1, flat.size(-1))
        total = flat.sum(dim=0)
        self.total = total if self.total is None else self.total + total
        self.count += flat.size(0)

    def means(self) -> Dict[str, float]:
        if self.total is None or self.count == 0:
            return {}
        values = (self.total / self.count).tolist()
        return {f"lambda_{name[0]}": value for name, value in zip(self.targets, values)}


class ContextualQueryKey(nn.Module):
    """Eq. 5-6: contextualise the projected queries and/or keys of one layer.

    Args:
        embed_dim: d, the width of Q, K and of each context block.
        global_blocks: width of the global / deep-global context in units of d.
        deep_blocks: width of the deep context in units of d.
        apply_to: "query", "key" or "both" (Table 3).
        gated: use the gating scalar of Eq. 6; without it (footnote 1 ablation)
            the context projection is simply added: Q^ = Q + C Uq.
        init: the starting values of U and V (``CONTEXT_INITS``).
        gate_bias: None (default) is Eq. 6 as written, with no extra parameter. A finite
            float b0 adds a learned bias inside the sigmoid of Eq. 6, one scalar per gate
            (``self.gate_bias``, shape (n_targets,), starting at b0): NOT in the paper, a
            diagnostic start for the initialisation study (with ``init="gate_half"`` and
            b0 = -4 every gate starts at sigmoid(-4) ~ 0.018, near the stock attention).
        context_dropout: NOT in the paper: the probability of dropping an entry of C U in
            training (inverted dropout, no parameter, no draw at build time); 0 (default)
            is Eq. 5-6 as written.
        dropout_stream: the name the dropout masks are drawn under (needed with
            context_dropout > 0; the glue passes the module's path in the model).

    With both kinds of context ("deep_global+deep") each has its own bias-free
    projection and the two are summed into one C U (one gate), as in the authors'
    released code. U for Q and for K are stored fused in one matrix so one matmul
    serves both.
    """

    def __init__(
        self,
        embed_dim: int,
        global_blocks: int,
        deep_blocks: int,
        apply_to: str = "both",
        gated: bool = True,
        init: str = "glorot",
        gate_bias: Optional[float] = None,
        context_dropout: float = 0.0,
        dropout_stream: Optional[str] = None,
    ) -> None:
        super().__init__()
        if apply_to not in CONTEXT_TARGETS:
            raise ValueError(f"apply_to must be one of {CONTEXT_TARGETS}, got {apply_to!r}")
        if init not in CONTEXT_INITS:
            raise ValueError(f"init must be one of {CONTEXT_INITS}, got {init!r}")
        if init in GATE_HALF_INITS and not gated:
            raise ValueError(f"init {init!r} sets the gate vectors V (to 0), which gated=False removes")
        if gate_bias is not None:
            if not gated:
                raise ValueError("gate_bias is a bias inside the gate of Eq. 6, which gated=False removes")
            if not math.isfinite(gate_bias):
                raise ValueError(f"gate_bias must be finite, got {gate_bias!r}")
            gate_bias = float(gate_bias)
        if not (math.isfinite(context_dropout) and 0.0 <= context_dropout < 1.0):
            raise ValueError(f"context_dropout must be in [0, 1), got {context_dropout!r}")
        if context_dropout > 0 and not dropout_stream:
            # unnamed, two layers with C U of one shape would draw the same masks
            raise ValueError("context_dropout needs a dropout_stream: a name unique to this module "
                             "(e.g. its path in the model), which its masks are drawn from")
        self.context_dropout = float(context_dropout)
        self.dropout_stream = dropout_stream
        # NOT in the paper (a diagnostic arm of the initialisation study): C enters Eq. 5-6 as a
        # constant: for the same gradient from above, U's, V's, Q's and K's are as without it, and
        # none flows back through C into the layers (and embeddings) it is read from; the forward
        # is unchanged
        self.stop_context_gradient = False
        self.apply_dropout_during_inference = False  # fairseq's --retain-dropout (make_generation_fast_)
        self._dropout_run_seed: Optional[int] = None
        self._dropout_calls = 0
        self.init = init
        self.initial_gate_bias = gate_bias
        if global_blocks == 0 and deep_blocks == 0:
            raise ValueError("ContextualQueryKey needs a non-empty context")
        self.embed_dim = embed_dim
        self.apply_to = apply_to
        self.targets: Tuple[str, ...] = ("query", "key") if apply_to == "both" else (apply_to,)
        self.gated = gated
        width = len(self.targets) * embed_dim
        # Eq. 5 U_Q / U_K, bias-free; rows [0:d] act on Q, [d:2d] on K.
        self.global_proj = (
            nn.Linear(global_blocks * embed_dim, width, bias=False) if global_blocks else None
        )
        self.deep_proj = nn.Linear(deep_blocks * embed_dim, width, bias=False) if deep_blocks else None
        if gated:
            # Eq. 6 V^H (acts on Q / K) and V^C (acts on C U), one row per target.
            self.gate_input = nn.Parameter(torch.empty(len(self.targets), embed_dim))
            self.gate_context = nn.Parameter(torch.empty(len(self.targets), embed_dim))
        else:
            self.register_parameter("gate_input", None)
            self.register_parameter("gate_context", None)
        if gate_bias is not None:
            # not in the paper: b_Q / b_K inside Eq. 6's sigmoid (None: no parameter, so
            # the state dict, and checkpoints written without it, stay as they were)
            self.gate_bias = nn.Parameter(torch.empty(len(self.targets)))
        else:
            self.register_parameter("gate_bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Glorot per target block (fan_in = width of C, fan_out = d), as a separate
        # U_Q and U_K would be initialised. Every init option draws the same numbers in
        # the same order (zeroing or rescaling afterwards), so the options differ only
        # in the choice, never in what the other parameters start from.
        projections = [proj for proj in (self.global_proj, self.deep_proj) if proj is not None]
        for proj in projections:
            fan_in = proj.in_features
            for block in proj.weight.split(self.embed_dim, dim=0):
                nn.init.xavier_uniform_(block)
                if self.init in ("matched", "gate_half_matched"):
                    # Var(w) = 1 / (2 n fan_in) for n summed projections: Var(C U) =
                    # Var(c) / 2 = Var(Q) (fairseq: Var(W_Q) = gain^2 / d = 1 / (2 d)).
                    glorot_var = 2.0 / (fan_in + self.embed_dim)
                    target_var = 1.0 / (2 * len(projections) * fan_in)
                    with torch.no_grad():
                        block.mul_((target_var / glorot_var) ** 0.5)
                elif self.init in ("zero_context", "gate_half_zero_context"):
                    with torch.no_grad():
                        block.zero_()
        if self.gated:
            for vectors in (self.gate_input, self.gate_context):
                for row in vectors.split(1, dim=0):
                    nn.init.xavier_uniform_(row)  # a d x 1 column vector
                if self.init in GATE_HALF_INITS:
                    with torch.no_grad():
                        vectors.zero_()
        if self.gate_bias is not None:
            # a constant, no random draw: every other parameter starts exactly as without it
            nn.init.constant_(self.gate_bias, self.initial_gate_bias)

    def gate_parameters(self) -> List[nn.Parameter]:
        """What sets the gates of Eq. 6: V^H, V^C and (not in the paper) the gate bias."""
        return [p for p in (self.gate_input, self.gate_context, self.gate_bias) if p is not None]

    def projection_parameters(self) -> List[nn.Parameter]:
        """What sets C U in Eq. 5-6: U of the global and of the deep context."""
        return [proj.weight for proj in (self.global_proj, self.deep_proj) if proj is not None]

    def project_context(
        self, global_context: Optional[Tensor], deep_context: Optional[Tensor]
    ) -> Tensor:
        """C U for all targets: (..., n_targets * d). The global part is usually
        1 x B x (g d) (one vector per sentence) and broadcasts over positions."""
        projected: Optional[Tensor] = None
        if self.stop_context_gradient:  # not in the paper: see __init__
            global_context = None if global_context is None else global_context.detach()
            deep_context = None if deep_context is None else deep_context.detach()
        if self.global_proj is not None:
            if global_context is None:
                raise ValueError("this layer needs a global context")
            projected = self.global_proj(global_context)
        if self.deep_proj is not None:
            if deep_context is None:
                raise ValueError("this layer needs a deep context")
            deep = self.deep_proj(deep_context)
            projected = deep if projected is None else deep + projected
        assert projected is not None
        return projected

    def _mask_seed(self) -> int:
        """A seed for this call's mask from (the global generator's last seed, this module's
        stream, the calls since that seed was set). fairseq seeds the global generator with
        --seed + the update number before every update, so the masks are reproducible (and
        the same after a resume) and differ between micro-batches, updates and modules,
        while the global generator is never drawn from. (Setting the same seed value twice in
        one process does not restart the count: only a new value is seen.)"""
        run_seed = torch.initial_seed()
        if run_seed != self._dropout_run_seed:
            self._dropout_run_seed, self._dropout_calls = run_seed, 0
        self._dropout_calls += 1
        text = f"fairseq_ctx/context_dropout/{run_seed}/{self.dropout_stream}/{self._dropout_calls}"
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & ((1 << 63) - 1)

    def drop_context(self, projected: Tensor) -> Tensor:
        """Inverted dropout of C U (each entry kept with probability 1 - p and scaled by
        1 / (1 - p)), its mask from a private generator on C U's device."""
        generator = torch.Generator(device=projected.device)
        generator.manual_seed(self._mask_seed())
        keep = torch.empty_like(projected).bernoulli_(1.0 - self.context_dropout, generator=generator)
        return projected * keep * (1.0 / (1.0 - self.context_dropout))

    def make_generation_fast_(self, name: Optional[str] = None, retain_dropout: bool = False,
                              retain_dropout_modules: Optional[List[str]] = None, **kwargs) -> None:
        """fairseq's --retain-dropout / --retain-dropout-modules (called by the model's
        ``make_generation_fast_``, as for fairseq's own dropout modules): keep the context
        dropout on in inference when asked for, by this class's name."""
        if retain_dropout and self.context_dropout > 0:
            if retain_dropout_modules is None or type(self).__name__ in retain_dropout_modules:
                self.apply_dropout_during_inference = True

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        global_context: Optional[Tensor] = None,
        deep_context: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """query, key: T x B x d projections (Q = H W_Q, K = H W_K).

        Returns ``(Q^, K^, gates)``; gates is T x B x n_targets (fp32) or None when
        ungated. A target that is not contextualised is returned unchanged.
        """
        projected = self.project_context(global_context, deep_context)
        if self.context_dropout > 0 and (self.training or self.apply_dropout_during_inference):
            # not in the paper: one dropped C U for both Eq. 5 and Eq. 6
            projected = self.drop_context(projected)
        context_parts = projected.split(self.embed_dim, dim=-1)
        inputs = {"query": query, "key": key}
        outputs = dict(inputs)
        gates: List[Tensor] = []
        for index, target in enumerate(self.targets):
            plain = inputs[target]
            context = context_parts[index].to(plain.dtype)
            if not self.gated:
                outputs[target] = plain + context  # footnote 1: no lambda
                continue
            # Eq. 6, the sigmoid in fp32 (logits of low-precision inputs).
            logit = _wide(F.linear(plain, self.gate_input[index : index + 1].to(plain.dtype)))
            logit = logit + _wide(F.linear(context, self.gate_context[index : index + 1].to(plain.dtype)))
            if self.gate_bias is not None:
                logit = logit + self.gate_bias[index : index + 1].to(logit.dtype)  # not in the paper
            gate = torch.sigmoid(logit)
            gates.append(gate)
            # Eq. 5: (1 - lambda) Q + lambda (C U_Q)
            outputs[target] = torch.lerp(plain, context.expand_as(plain), gate.to(plain.dtype))
        gate_tensor = torch.cat(gates, dim=-1) if gates else None
        return outputs["query"], outputs["key"], gate_tensor
