"""fairseq glue for the capacity control of the initialisation study: ``transformer_extra_ffn``.

Not one of the four papers' models. A stock fairseq ``transformer`` whose encoder FFNs have
``--encoder-extra-ffn-units`` N more hidden units (``fairseq_ctx.modules.extra_ffn_units``):
about the number of parameters an architecture's mechanism adds, without the mechanism.
With N = 384 at the study's dims (d = 128, 3 encoder layers) it adds 3 x 384 x (128 + 1 + 128)
= 296,064 parameters, against 296,448 of ``transformer_context_aware``'s encoder context
(``init_study/02``, ``deep_global+deep``, queries and keys). What it can say is limited: if it
shows the context-aware model's deficit too, adding that many encoder parameters in this form
costs as much (a parameter count is not a capacity); if it does not, the deficit may still come
from the context-aware model's start (its gates halve Q and K at the start; this control starts
as a no-op) rather than from the context. Read it as differences with intervals: ``02`` - ``16``
and the no-op-start context-aware arm ``12`` (gate bias) - ``16``, trained in one call per seed,
and with about as many seeds as the remainder needs (about 10 for 0.015 in valid loss).

Why not a wider ``--encoder-ffn-embed-dim``: it changes the shape of every fc1 / fc2 and
redraws every parameter built after them, so its runs do not start from the stock model's
weights and do not pair with its runs at one seed. Here the stock fc1 / fc2 keep their names,
shapes and values (the extra rows and columns are parameters of their own, drawn from their
own stream, ``_controlled_init.added_parameters``), and E2 starts at 0: the model starts as
the stock model (its outputs up to the summation order of the wider matmuls: bitwise equal on
the CPU in the tests). Unlike the context-aware starts (whose gates halve Q and K at the start),
it starts as a no-op, like the gate-bias arm ``init_study/12``.

What is paired with the stock run at one seed: the starting weights, the data order and, with
``--activation-dropout`` and ``--relu-dropout`` at 0 (fairseq's defaults, the study's setting),
every dropout mask. Not the trajectory: from the first update the extra units change the
gradients, and with them the gradient norm that ``--clip-norm`` divides by (as every
architecture's additions do). With activation / relu dropout > 0 the mask after the activation
covers F + N units and draws more random numbers, so every later dropout mask of the model
differs from the stock run's (a warning says so at build time).

``fc1.out_features`` / ``fc2.in_features`` report the stock F (the extra units are
``extra_units``). fairseq's FFN pruning helpers (``_get_fc_rank`` / ``_prune_fc_layer``, reached
from RoBERTa-style encoders only) would drop the extra units: they raise here.
"""
import logging

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

from fairseq_ctx.models._controlled_init import added_parameters, next_layer_name
from fairseq_ctx.modules.extra_ffn_units import ExtraUnitsInput, ExtraUnitsOutput

logger = logging.getLogger(__name__)


class ExtraFfnEncoderLayer(TransformerEncoderLayerBase):
    """The stock encoder layer with fc1 / fc2 that carry the extra units."""

    def __init__(self, cfg, extra_units: int, name: str, return_fc: bool = False):
        self._extra_units = extra_units  # read by build_fc1 / build_fc2 inside super().__init__
        self._name = name  # its state-dict path, for the extra units' random stream
        super().__init__(cfg, return_fc=return_fc)

    def build_fc1(self, input_dim, output_dim, q_noise, qn_block_size):
        fc1 = ExtraUnitsInput(input_dim, output_dim, self._extra_units)  # the stock rows: stock draws
        with added_parameters(f"{self._name}.fc1.extra"):
            fc1.reset_extra_parameters()
        return fc1

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        return ExtraUnitsOutput(input_dim, output_dim, self._extra_units)  # extra columns 0: no draws

    def _get_fc_rank(self, remove_num):
        raise NotImplementedError("transformer_extra_ffn: FFN pruning would leave the extra units out")

    def _prune_fc_layer(self, remove_index):
        raise NotImplementedError("transformer_extra_ffn: FFN pruning would leave the extra units out")


class ExtraFfnTransformerEncoder(TransformerEncoderBase):
    def build_encoder_layer(self, cfg):
        # the stock build_encoder_layer with our layer class
        layer = ExtraFfnEncoderLayer(
            cfg, cfg.encoder_extra_ffn_units, name=next_layer_name(self, "encoder"), return_fc=self.return_fc
        )
        checkpoint = cfg.checkpoint_activations
        if checkpoint:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


@register_model("transformer_extra_ffn")
class ExtraFfnTransformerModel(TransformerModel):
    """Transformer with extra encoder FFN units that start as a no-op (a capacity control,
    not from a paper)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument(
            "--encoder-extra-ffn-units", type=int, metavar="N",
            help="capacity control (not from a paper): N more hidden units in every encoder FFN, "
                 "parameters of their own (the stock fc1 / fc2 keep their shapes and values), their "
                 "output weights starting at 0 (the model starts as the stock transformer). Required",
        )

    @classmethod
    def build_model(cls, args, task):
        transformer_extra_ffn(args)  # defaults when built outside the CLI
        check_extra_ffn_args(args)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return ExtraFfnTransformerEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens)


def check_extra_ffn_args(args) -> None:
    """Reject unusable options with one clear error, before building."""
    problems = []
    units = getattr(args, "encoder_extra_ffn_units", None)
    if units is None:
        problems.append("--encoder-extra-ffn-units N is required (N >= 1 extra hidden units per encoder FFN)")
    elif isinstance(units, bool) or not isinstance(units, int) or units < 1:
        problems.append(f"--encoder-extra-ffn-units must be an integer >= 1 (0 is the stock transformer: "
                        f"use --arch transformer), got {units!r}")
    if getattr(args, "quant_noise_pq", 0) > 0:
        problems.append("--quant-noise-pq is not supported: fairseq's quant-noise hooks would leave the extra "
                        "units' weights out")
    if getattr(args, "quant_noise_scalar", 0) > 0:
        problems.append("--quant-noise-scalar is not supported: fairseq's scalar quantizer does not know the "
                        "extra units' layers")
    if problems:
        raise ValueError("transformer_extra_ffn: " + "; ".join(problems))
    hidden_dropout = max(getattr(args, "activation_dropout", 0) or 0, getattr(args, "relu_dropout", 0) or 0)
    if hidden_dropout > 0:
        logger.warning(
            "transformer_extra_ffn: with --activation-dropout / --relu-dropout %s the dropout after the FFN "
            "activation draws a mask over the extra units too, so every later dropout mask differs from a stock "
            "transformer run's at the same seed (the starting weights stay paired)", hidden_dropout)


@register_model_architecture("transformer_extra_ffn", "transformer_extra_ffn")
def transformer_extra_ffn(args):
    """Transformer-Base with the extra encoder FFN units (N has no default)."""
    args.encoder_extra_ffn_units = getattr(args, "encoder_extra_ffn_units", None)
    base_architecture(args)
