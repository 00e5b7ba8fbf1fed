"""Cross aggregation of multi-head attention (Cao, Zhao, Yu): routing-by-agreement over
the attention logits of a self-attention layer.

Pure torch (no fairseq import). ``CrossAggregation`` takes the masked attention logits
E of one self-attention call, shape ``(bsz, H, L, M)`` with ``-inf`` at masked keys
(padding, causal future), and returns the routed term ``Omega_vertical +
Omega_horizontal`` that Eq. 9 adds to E before the softmax.

Notation (paper -> code):
    e_{l,h}  (Eq. 5)         votes[:, h, l, :]     logits of query l on head h, over M keys
    B, C     (Alg. 1)        routing logits / coupling coefficients
    Omega~^v (Eq. 10-11)     vertical_routing      input capsules: heads h, outputs: queries l
    W^v      (Eq. 13)        head_weight           H x H, no bias, one per layer
    Omega^h  (Eq. 14)        positional_horizontal_routing: for query l the input capsules
                             are the queries t <= l, the outputs are the H heads
    B^init   (Eq. 15)        "self" init: B_{t->h} = alpha_{l,t}^h (the logit itself)

Everything is a masked batched computation over (bsz, H, L, M) / (bsz, H, L, L): the
positional routing over all prefixes is two attention-shaped matmuls per iteration, not a
loop over positions. Routing runs in fp32 with autocast disabled.

Interpretations (see docs/notes/transformer_cross_agg.md):
* Votes are the layer's own scaled logits q k^T / sqrt(d_head) (fairseq's scaling; the
  paper's Eq. 4 writes sqrt(d)). Masked keys (-inf) are zeroed before routing, so they
  contribute nothing to any vote, agreement or output capsule; E^ stays -inf there.
* Algorithm 1 line 4 takes the softmax over the INPUT capsules (B_{* -> n}), the reverse
  of Sabour et al.; we follow the paper.
* Padding queries are not input capsules of the horizontal routing (they would make a
  sentence's result depend on how much left padding it got), and their final vertical
  agreements are left out of Eq. 13's sum over l.
* Eq. 13's lambda uses the agreements B after the last iteration (Algorithm 1's final B);
  W^v is zero-initialised (lambda starts uniform; the paper gives no initialisation).
  On the decoder side the sum over l runs over the prefix t <= l only (a sum over all l
  would leak future target tokens into training and break incremental decoding).

Initialisation-study options (issue 15; the paper has neither):
* ``ramp_updates`` N > 0: the returned term is r(u) (Omega^v + Omega^h), r(u) = min(1, u/N)
  for u updates so far (``set_num_updates``, fairseq's per-update hook), so Eq. 9 becomes
  E^ = E + r(u)(Omega^v + Omega^h): the routed term starts at zero and reaches the paper's
  Eq. 9 exactly after N updates. u is a buffer (in the state dict) so a reloaded model
  routes with the factor it was trained with last (see ``set_num_updates``).
* ``stop_gradient``: the routing reads the logits detached. Forward values are unchanged;
  the gradient reaches Q / K through E only, not through the routed term (diagnostic).
* ``stop_gradient_updates`` N > 0: the same, for the first N updates only (u < N, u from
  ``set_num_updates``: optimizer updates, so with --update-freq k or k GPUs N updates are k
  times the batches); from update N on the gradient flows as in Eq. 9 as written. A
  diagnostic of the early cost alone: ``stop_gradient`` changes the whole run. u is 0 until
  ``set_num_updates`` is called, so a training loop of one's own that never calls it trains
  with the gradient stopped throughout; a fairseq run restarted with --reset-optimizer (or
  --finetune-from-model) counts u from 0 again and so stops it for N more updates (as the
  ramp restarts). Combines with ``ramp_updates`` (each follows u).
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ROUTING_INITS = ("zero", "self")

# Keys of the incremental (decoder-side) routing state; batch is dim 0 of every tensor,
# so fairseq's MultiheadAttention.reorder_incremental_state reorders them for beam search.
STATE_VOTES = "routing_votes"  # (bsz, H, P, P): votes e_{t,h} of the P earlier queries
STATE_HEAD_AGREEMENT = "routing_head_agreement"  # (bsz, H): running sum_t B_{h->t}


def squash(s: Tensor, dim: int = -1) -> Tensor:
    """Eq. 7: |s|^2 / (1 + |s|^2) * s / |s|, written as s * |s| / (1 + |s|^2).

    No division by |s|, so a zero vector maps to zero; the clamp keeps the gradient of
    |s| finite at zero (it is multiplied by s = 0 there anyway).
    """
    squared_norm = (s * s).sum(dim, keepdim=True)
    norm = squared_norm.clamp_min(torch.finfo(s.dtype).tiny).sqrt()
    return s * (norm / (1.0 + squared_norm))


def vertical_routing(votes: Tensor, iters: int) -> Tuple[Tensor, Tensor]:
    """Simple routing over the vertical capsules (Eq. 10-11, Algorithm 1).

    votes: (bsz, H, L, M), V_{h->l} = e_{l,h}; for every query l the H heads are the
    input capsules of output capsule l.
    Returns Omega~ (bsz, L, M) and the final agreements B (bsz, H, L).
    """
    if iters < 1:
        raise ValueError(f"iters (routing iterations T) must be >= 1, got {iters}")
    agreement = None  # Alg. 1 line 2: B = 0
    for _ in range(iters):
        # elementwise products + reductions: as einsums these become bmm's over bsz*L
        # tiny matrices, which are slow on CPU
        if agreement is None:  # B = 0: the coupling is uniform, S the mean over heads
            omega = squash(votes.mean(dim=1))  # Eq. 8, Eq. 7
        else:
            coupling = agreement.softmax(dim=1)  # line 4: softmax over input capsules (heads)
            omega = squash((coupling.unsqueeze(-1) * votes).sum(dim=1))  # Eq. 8, Eq. 7
        update = (votes * omega.unsqueeze(1)).sum(dim=-1)  # line 6
        agreement = update if agreement is None else agreement + update
    return omega, agreement


def positional_horizontal_routing(
    votes: Tensor,
    capsule_padding_mask: Tensor,
    num_queries: int,
    iters: int,
    init_agreement: Optional[Tensor] = None,
) -> Tensor:
    """Positional simple routing over the horizontal capsules (Eq. 14, Algorithm 1).

    votes: (bsz, H, T, M): e_{t,h} of the T capsule positions (queries) seen so far.
    capsule_padding_mask: (bsz, T) bool, True at padding; padding is never an input capsule.
    num_queries: Lq; the queries are the last Lq capsule positions, and query l routes over
        the non-padding capsules t <= l. A query without any input gets Omega = 0.
    init_agreement: (bsz, H, Lq, T) B^init (Eq. 15), or None for zero initialisation.
    Returns Omega^h (bsz, H, Lq, M): output capsule h of query l in [:, h, l].
    """
    bsz, heads, num_capsules, _ = votes.shape
    first_query = num_capsules - num_queries
    query_position = torch.arange(first_query, num_capsules, device=votes.device)
    capsule_position = torch.arange(num_capsules, device=votes.device)
    allowed = (capsule_position[None, :] <= query_position[:, None]).unsqueeze(0)
    allowed = (allowed & ~capsule_padding_mask.unsqueeze(1)).unsqueeze(1)  # (bsz, 1, Lq, T)
    # Disallowed inputs get a large finite negative score, ADDED (no masked_fill, nothing
    # saved for backward): softmax gives them exactly 0 where a row has an input; a row
    # without any (a padding query) stays finite and its Omega is zeroed at the end.
    # -1e30, not finfo.min: agreements added to it must not overflow to -inf.
    score_mask = torch.zeros(allowed.shape, dtype=votes.dtype, device=votes.device)
    score_mask = score_mask.masked_fill(~allowed, -1e30)
    has_input = allowed.any(dim=-1, keepdim=True)  # (bsz, 1, Lq, 1)
    agreement = init_agreement  # None: zero initialisation
    omega = votes.new_zeros(bsz, heads, num_queries, votes.size(-1))
    for step in range(iters):
        if agreement is None:
            # zero init, first iteration: the coupling is uniform over the inputs, so S is
            # the mean vote of the non-padding prefix: a cumsum instead of a masked
            # softmax and an (Lq x T) @ (T x M) matmul
            valid = (~capsule_padding_mask).to(votes.dtype)  # (bsz, T)
            prefix_sum = (votes * valid[:, None, :, None]).cumsum(dim=2)[:, :, first_query:]
            prefix_count = valid.cumsum(dim=1)[:, first_query:].clamp_min(1.0)
            s = prefix_sum / prefix_count[:, None, :, None]
        else:
            # line 4: softmax over the input capsules t <= l of each output capsule
            coupling = (agreement + score_mask).softmax(dim=-1)
            s = torch.matmul(coupling, votes)  # Eq. 8 (sum over t)
        omega = squash(s)  # Eq. 7
        if step + 1 < iters:  # the last agreement update is never read
            update = torch.matmul(omega, votes.transpose(-1, -2))  # line 6
            agreement = update if agreement is None else agreement + update
    return omega * has_input


class CrossAggregation(nn.Module):
    """Routed logits Omega^v + Omega^h of one self-attention layer (Eq. 9-15).

    Args:
        num_heads: H.
        vertical: route over heads for each query (Eq. 10-13).
        horizontal: positional routing over the queries t <= l (Eq. 14).
        init: "zero" or "self" (Eq. 15) initialisation of the horizontal routing.
        iters: T, routing iterations.
        causal: decoder side: Eq. 13's sum over queries runs over the prefix only, and
            ``forward`` accepts / returns an incremental state.
        ramp_updates: N; 0 = off (Eq. 9 as written). N > 0: the routed term is scaled by
            r(u) = min(1, u/N), u = the updates so far (``set_num_updates``).
        stop_gradient: route detached logits (no gradient through the routing into E).
        stop_gradient_updates: N; 0 = off. N > 0: route detached logits while u < N
            (``set_num_updates``), then as Eq. 9 (gradient through the routing).
    """

    def __init__(
        self,
        num_heads: int,
        vertical: bool = True,
        horizontal: bool = True,
        init: str = "zero",
        iters: int = 3,
        causal: bool = False,
        ramp_updates: int = 0,
        stop_gradient: bool = False,
        stop_gradient_updates: int = 0,
    ):
        super().__init__()
        if init not in ROUTING_INITS:
            raise ValueError(f"init must be one of {ROUTING_INITS}, got {init!r}")
        if iters < 1:
            raise ValueError(f"iters (routing iterations T) must be >= 1, got {iters}")
        if not (vertical or horizontal):
            raise ValueError("at least one of vertical / horizontal routing must be on")
        if init == "self" and not horizontal:
            raise ValueError("init='self' (Eq. 15) initialises the horizontal routing; it needs horizontal=True")
        if ramp_updates < 0:
            raise ValueError(f"ramp_updates must be >= 0 (0 = no ramp), got {ramp_updates}")
        if stop_gradient_updates < 0:
            raise ValueError(f"stop_gradient_updates must be >= 0 (0 = off), got {stop_gradient_updates}")
        if stop_gradient and stop_gradient_updates:
            raise ValueError("stop_gradient stops the gradient for the whole run; stop_gradient_updates "
                             "for the first N updates only: give one of them")
        self.num_heads = num_heads
        self.vertical = vertical
        self.horizontal = horizontal
        self.init = init
        self.iters = iters
        self.causal = causal
        self.ramp_updates = ramp_updates
        self.stop_gradient = stop_gradient
        self.stop_gradient_updates = stop_gradient_updates
        # whether this update's forward routes detached logits: u = 0 until set_num_updates
        self._detach_logits = stop_gradient or stop_gradient_updates > 0
        # r(u) of the ramp, a Python float derived from the buffer ``num_updates`` (u): it is
        # read at every forward, and reading a GPU buffer would synchronise the device.
        self._ramp_factor = 1.0
        if ramp_updates > 0:
            # u is persisted (only when the ramp is on: other models' state dicts are
            # unchanged) so that a model loaded by load_state_dict alone, without fairseq's
            # set_num_updates, also routes with the factor it was trained with.
            self.register_buffer("num_updates", torch.zeros((), dtype=torch.long))
            self._ramp_factor = 0.0
        # W^v of Eq. 13: mixes the H per-head agreements into the H head weights lambda.
        # Zero init (the paper gives none): lambda starts uniform (1/H); the summed
        # agreements grow with the sentence length, so a random W^v would start with a
        # saturated softmax (one head taking all of Omega~, vanishing gradients).
        self.head_weight = None
        if vertical:
            self.head_weight = nn.Linear(num_heads, num_heads, bias=False)
            nn.init.zeros_(self.head_weight.weight)

    def extra_repr(self) -> str:
        text = (
            f"heads={self.num_heads}, vertical={self.vertical}, horizontal={self.horizontal}, "
            f"init={self.init}, iters={self.iters}, causal={self.causal}"
        )
        if self.ramp_updates:
            text += f", ramp_updates={self.ramp_updates}"
        if self.stop_gradient:
            text += ", stop_gradient=True"
        if self.stop_gradient_updates:
            text += f", stop_gradient_updates={self.stop_gradient_updates}"
        return text

    @property
    def ramp_factor(self) -> float:
        """r(u) = min(1, u/N) of the ramp (1.0 without one)."""
        return self._ramp_factor

    def _update_ramp_factor(self, num_updates: int) -> None:
        self._ramp_factor = min(1.0, max(0, num_updates) / self.ramp_updates)

    def set_num_updates(self, num_updates: int) -> None:
        """fairseq's hook (``BaseFairseqModel.set_num_updates`` calls it on every module
        that has it): fairseq's ``train_step`` calls it before each update with the number
        of updates done so far, and its checkpoint loaders (trainer restore,
        fairseq-generate / -interactive / hub) call it with the checkpoint's count before
        ``load_state_dict``, which then restores the persisted u. A checkpoint saved after
        U updates holds u = U - 1, the count its last training step used, so a reloaded
        model computes exactly the function the trainer saved (and validated); past
        N + 1 updates that is r = 1, the paper's Eq. 9.

        With ``stop_gradient_updates`` N, the update with u updates done before it routes
        detached logits while u < N (forward values are the same either way, so a reloaded
        model needs no persisted u for this)."""
        if self.stop_gradient_updates > 0:
            self._detach_logits = int(num_updates) < self.stop_gradient_updates
        if self.ramp_updates > 0:
            self.num_updates.fill_(int(num_updates))
            self._update_ramp_factor(int(num_updates))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if self.ramp_updates > 0 and prefix + "num_updates" in state_dict:
            # the cached factor follows the loaded u (read from the loaded tensor, on CPU
            # when fairseq loads a checkpoint)
            self._update_ramp_factor(int(state_dict[prefix + "num_updates"]))

    def forward(
        self,
        logits: Tensor,
        capsule_padding_mask: Optional[Tensor] = None,
        state: Optional[Dict[str, Tensor]] = None,
    ) -> Tuple[Tensor, Dict[str, Tensor]]:
        """
        Args:
            logits: (bsz, H, Lq, M) masked logits of the Lq newest queries (-inf = masked key).
            capsule_padding_mask: (bsz, T) True at padding, over all T query positions so
                far (T = P + Lq where P queries came in earlier incremental calls); None =
                no padding.
            state: incremental routing state from the previous call (causal only), or None.
        Returns:
            the fp32 term to add to ``logits`` (bsz, H, Lq, M), zero at masked keys, and
            the new incremental state (empty unless causal).
        """
        if state and not self.causal:
            raise ValueError("an incremental routing state needs causal=True")
        bsz, heads, num_queries, num_keys = logits.shape
        if self._detach_logits:
            # diagnostic: the routing sees E as a constant, so Q / K get their gradient
            # through E in Eq. 9 only, not through Omega^v + Omega^h (same forward values)
            logits = logits.detach()
        with torch.autocast(device_type=logits.device.type, enabled=False):
            votes = logits.float().masked_fill(torch.isneginf(logits), 0.0)
            state = state or {}
            prev_votes = state.get(STATE_VOTES)
            num_prev = prev_votes.size(2) if prev_votes is not None else 0
            if prev_votes is None and self.causal and self.horizontal and STATE_HEAD_AGREEMENT in state:
                raise ValueError("incremental state lacks the cached votes")
            num_capsules = num_prev + num_queries
            if capsule_padding_mask is None:
                capsule_padding_mask = logits.new_zeros(bsz, num_capsules, dtype=torch.bool)
            capsule_padding_mask = capsule_padding_mask.bool()
            if capsule_padding_mask.shape != (bsz, num_capsules):
                raise ValueError(
                    f"capsule_padding_mask must be (bsz, {num_capsules}), got {tuple(capsule_padding_mask.shape)}"
                )
            routed = votes.new_zeros(votes.shape)
            new_state: Dict[str, Tensor] = {}

            if self.vertical:
                omega, agreement = vertical_routing(votes, self.iters)  # Eq. 10-11
                query_valid = (~capsule_padding_mask[:, num_prev:]).unsqueeze(1)  # (bsz, 1, Lq)
                agreement = agreement * query_valid
                weight = self.head_weight.weight.float()
                if self.causal:
                    # prefix sum over t <= l (see module docstring), carried across calls
                    head_agreement = agreement.cumsum(dim=-1)
                    if STATE_HEAD_AGREEMENT in state:
                        head_agreement = head_agreement + state[STATE_HEAD_AGREEMENT].float().unsqueeze(-1)
                    new_state[STATE_HEAD_AGREEMENT] = head_agreement[:, :, -1]
                else:
                    head_agreement = agreement.sum(dim=-1, keepdim=True)  # sum over l, Eq. 13
                # Eq. 13: Lambda = softmax(W^v [sum_l B_{1->l}, ..., sum_l B_{H->l}])
                head_scale = torch.einsum("gh,bhl->bgl", weight, head_agreement).softmax(dim=1)
                routed = routed + head_scale.unsqueeze(-1) * omega.unsqueeze(1)  # Eq. 12

            if self.horizontal:
                if prev_votes is not None:
                    # earlier queries' votes are zero on keys they could not see (causal)
                    prev_votes = F.pad(prev_votes.float(), (0, num_keys - prev_votes.size(-1)))
                    capsule_votes = torch.cat([prev_votes, votes], dim=2)
                else:
                    capsule_votes = votes
                if self.causal:
                    new_state[STATE_VOTES] = capsule_votes
                init_agreement = None
                if self.init == "self":
                    if num_keys != num_capsules:
                        raise ValueError(
                            "init='self' (Eq. 15) needs the keys to be the queries themselves "
                            f"(self-attention without extra keys); got {num_keys} keys for "
                            f"{num_capsules} query positions"
                        )
                    init_agreement = votes  # B^init_{t->h} = alpha_{l,t}^h, Eq. 15
                routed = routed + positional_horizontal_routing(
                    capsule_votes, capsule_padding_mask, num_queries, self.iters, init_agreement
                )  # Eq. 14
            if self._ramp_factor != 1.0:
                # the ramp: Eq. 9 with r(u) (Omega^v + Omega^h). Applied here, to the term
                # every call returns, so the full pass and each incremental step scale it
                # alike; the cached votes / agreements (the routing itself) are unscaled.
                routed = routed * self._ramp_factor
        return routed, new_state
