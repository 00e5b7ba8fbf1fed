"""Extra hidden units for a position-wise feed-forward network, pure torch: the capacity
control of the initialisation study (issue 15), not a mechanism of the four papers.

The stock FFN of a transformer layer is FFN(x) = W2 act(W1 x + b1) + b2 with F hidden
units (W1: F x d, b1: F, W2: d x F). With N extra units it becomes a FFN of F + N units,

    FFN+(x) = [W2, E2] act([W1; E1] x + [b1; c1]) + b2
            = W2 act(W1 x + b1) + b2 + E2 act(E1 x + c1),

whose extra weights E1 (N x d), c1 (N) and E2 (d x N) are parameters of their own, beside
the stock ones (same names and shapes as in the stock layer: ``weight`` and ``bias`` of fc1
and fc2). A model with them therefore shares every stock parameter with the stock model,
and its runs pair with the stock model's at one seed (``fairseq_ctx.models._controlled_init``).

E1 and c1 start as ``nn.Linear`` starts the stock rows (uniform in +-1/sqrt(d)); E2 starts at
0, so FFN+ starts as the stock FFN (up to the summation order of the wider matmuls): the model
starts as the stock model, its outputs and the gradients to the stock parameters equal at the
first step, and the extra units grow in from there (E2's gradient is not 0 at the start; E1's
is until E2 moves). What it controls
for: the number of added parameters of an architecture, without its mechanism.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class _ExtraUnitsLinear(nn.Linear):
    """A stock ``nn.Linear`` (same draws, same order) that knows its ``extra_units``."""

    def __init__(self, in_features: int, out_features: int, extra_units: int):
        super().__init__(in_features, out_features)
        if extra_units < 1:
            raise ValueError(f"extra_units must be >= 1, got {extra_units}")
        self.extra_units = extra_units

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, extra_units={self.extra_units}"


class ExtraUnitsInput(_ExtraUnitsLinear):
    """fc1 with ``extra_units`` more output rows: x -> [W1; E1] x + [b1; c1].

    ``weight`` / ``bias`` are the stock fc1's, initialised by ``nn.Linear`` with the same
    draws in the same order; ``extra_weight`` / ``extra_bias`` are left uninitialised
    until ``reset_extra_parameters`` (so the caller chooses the random stream)."""

    def __init__(self, in_features: int, out_features: int, extra_units: int):
        super().__init__(in_features, out_features, extra_units)
        self.extra_weight = nn.Parameter(torch.empty(extra_units, in_features))
        self.extra_bias = nn.Parameter(torch.empty(extra_units))

    def reset_extra_parameters(self) -> None:
        # nn.Linear.reset_parameters for the extra rows: kaiming_uniform(a=sqrt(5)) is
        # uniform in +-1/sqrt(fan_in), as is the bias
        nn.init.kaiming_uniform_(self.extra_weight, a=math.sqrt(5))
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.extra_bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one matmul over the F + N rows (concatenating the weights, not the activations)
        return F.linear(x, torch.cat([self.weight, self.extra_weight], 0), torch.cat([self.bias, self.extra_bias], 0))


class ExtraUnitsOutput(_ExtraUnitsLinear):
    """fc2 reading ``extra_units`` more inputs: h -> [W2, E2] h + b2, E2 starting at 0."""

    def __init__(self, in_features: int, out_features: int, extra_units: int):
        super().__init__(in_features, out_features, extra_units)
        self.extra_weight = nn.Parameter(torch.zeros(out_features, extra_units))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, torch.cat([self.weight, self.extra_weight], 1), self.bias)
