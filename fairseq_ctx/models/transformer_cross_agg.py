"""fairseq glue for Cross Aggregation of Multi-Head Attention (Cao, Zhao, Yu).

The mechanism lives in ``fairseq_ctx.modules.cross_aggregation``; here the stock
transformer's self-attention layers (encoder, decoder or both) get a
``MultiheadAttention`` subclass that adds the routed term to the logits before the
softmax (Eq. 9). Everything else is fairseq's transformer.

Initialisation-study options (issue 15; not in the paper, off by default):
``--routing-ramp-updates N`` ramps the routed term in, E^ = E + r(u)(Omega^v + Omega^h)
with r(u) = min(1, u/N) after u updates (Eq. 9 exactly from update N on);
``--routing-stop-gradient`` (diagnostic) routes detached logits, so Q / K get no gradient
through the routing; ``--routing-stop-gradient-updates N`` does so for the first N updates
only. All live in ``CrossAggregation``; see docs/notes/transformer_cross_agg.md.
"""
import argparse
import logging
from typing import Dict, Optional, Tuple

from torch import Tensor

from fairseq import utils
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
)
from fairseq.models.transformer.transformer_legacy import (
    base_architecture,
    transformer_vaswani_wmt_en_de_big,
)
from fairseq.modules import MultiheadAttention
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from fairseq_ctx.models._controlled_init import added_parameters, next_layer_name
from fairseq_ctx.modules.cross_aggregation import (
    ROUTING_INITS,
    STATE_HEAD_AGREEMENT,
    STATE_VOTES,
    CrossAggregation,
)

ROUTING_SIDES = ("encoder", "decoder", "both")

logger = logging.getLogger(__name__)


class CrossAggregationMultiheadAttention(MultiheadAttention):
    """Self-attention whose logits E become E + Omega^v + Omega^h before the softmax (Eq. 9).

    ``name``: the module's path in the model (``encoder.layers.0.self_attn``); the stock
    projections draw from the global RNG exactly as fairseq's ``MultiheadAttention``
    does, the routing's own parameters from the stream derived from ``name`` and the
    run's seed (``_controlled_init``), so the layers built after it start as stock.
    """

    def __init__(self, embed_dim, num_heads, *, routing: Dict, name: str = "self_attn", **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if not self.self_attention:
            raise ValueError("cross aggregation routes self-attention logits only")
        with added_parameters(f"{name}.cross_aggregation"):
            self.cross_aggregation = CrossAggregation(num_heads, **routing)
        # fairseq's fused path (F.multi_head_attention_forward) never exposes the logits;
        # this flag makes MultiheadAttention.forward take its explicit path, the one that
        # honours before_softmax=True (its only other effect is skipping a shape assert).
        self._set_skip_embed_dim_check()

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if need_head_weights:
            need_weights = True
        tgt_len, bsz, _ = query.size()
        # E with fairseq's masks applied (-inf at padded / future keys); also updates
        # the key/value cache in incremental decoding.
        logits, v = super().forward(
            query, key, value,
            key_padding_mask=key_padding_mask,
            incremental_state=incremental_state,
            need_weights=False,
            static_kv=static_kv,
            attn_mask=attn_mask,
            before_softmax=True,
        )
        src_len = logits.size(-1)
        if incremental_state is not None:
            saved_state = self._get_input_buffer(incremental_state)
            # the key padding mask of every position so far = the query padding mask
            capsule_padding_mask = saved_state.get("prev_key_padding_mask")
            routing_state = {
                name: saved_state[name]
                for name in (STATE_VOTES, STATE_HEAD_AGREEMENT)
                if saved_state.get(name) is not None
            }
        else:
            capsule_padding_mask = key_padding_mask
            routing_state = None
        routed, new_routing_state = self.cross_aggregation(
            logits.view(bsz, self.num_heads, tgt_len, src_len), capsule_padding_mask, routing_state
        )
        if incremental_state is not None:
            saved_state.update(new_routing_state)
            self._set_input_buffer(incremental_state, saved_state)
        logits = logits + routed.view_as(logits).to(logits.dtype)  # Eq. 9: E^ = E + Omega^v + Omega^h
        if before_softmax:
            return logits, v

        # the rest is MultiheadAttention's own tail: softmax, dropout, weighted values
        attn_weights_float = utils.softmax(logits, dim=-1, onnx_trace=self.onnx_trace)
        attn_probs = self.dropout_module(attn_weights_float.type_as(logits))
        attn = attn_probs.bmm(v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, self.embed_dim)
        attn = self.out_proj(attn)
        attn_weights: Optional[Tensor] = None
        if need_weights:
            attn_weights = attn_weights_float.view(bsz, self.num_heads, tgt_len, src_len).transpose(1, 0)
            if not need_head_weights:
                attn_weights = attn_weights.mean(dim=0)
        return attn, attn_weights


def routing_options(cfg, causal: bool) -> Dict:
    return dict(
        vertical=cfg.routing_vertical,
        horizontal=cfg.routing_horizontal,
        init=cfg.routing_init,
        iters=cfg.routing_iters,
        causal=causal,
        ramp_updates=cfg.routing_ramp_updates,
        stop_gradient=cfg.routing_stop_gradient,
        stop_gradient_updates=cfg.routing_stop_gradient_updates,
    )


def wrap_layer(layer, cfg):
    """Activation checkpointing / FSDP wrapping, as TransformerEncoderBase.build_encoder_layer does."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


class CrossAggEncoderLayer(TransformerEncoderLayerBase):
    def __init__(self, cfg, return_fc=False, *, name: str = "encoder.layers.0"):
        # set before the base constructor, which calls build_self_attention
        self.layer_name = name
        super().__init__(cfg, return_fc=return_fc)

    def build_self_attention(self, embed_dim, cfg):
        return CrossAggregationMultiheadAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            dropout=cfg.attention_dropout,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            routing=routing_options(cfg, causal=False),
            name=f"{self.layer_name}.self_attn",
        )


class CrossAggDecoderLayer(TransformerDecoderLayerBase):
    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False, *,
                 name: str = "decoder.layers.0"):
        # set before the base constructor, which calls build_self_attention
        self.layer_name = name
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return CrossAggregationMultiheadAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            dropout=cfg.attention_dropout,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            routing=routing_options(cfg, causal=True),
            name=f"{self.layer_name}.self_attn",
        )


class CrossAggEncoder(TransformerEncoderBase):
    def build_encoder_layer(self, cfg):
        layer = CrossAggEncoderLayer(cfg, return_fc=self.return_fc, name=next_layer_name(self, "encoder"))
        return wrap_layer(layer, cfg)


class CrossAggDecoder(TransformerDecoderBase):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = CrossAggDecoderLayer(cfg, no_encoder_attn, name=next_layer_name(self, "decoder"))
        return wrap_layer(layer, cfg)


def validate_routing_args(args) -> None:
    """One clear error for a bad option combination, at build time."""
    if args.routing_side not in ROUTING_SIDES:
        raise ValueError(f"--routing-side must be one of {ROUTING_SIDES}, got {args.routing_side!r}")
    if args.routing_init not in ROUTING_INITS:
        raise ValueError(f"--routing-init must be one of {ROUTING_INITS}, got {args.routing_init!r}")
    if args.routing_iters < 1:
        raise ValueError(f"--routing-iters must be >= 1, got {args.routing_iters}")
    if args.routing_ramp_updates < 0:
        raise ValueError(
            f"--routing-ramp-updates must be >= 0 (0 = no ramp, Eq. 9 as written), got {args.routing_ramp_updates}"
        )
    if args.routing_stop_gradient_updates < 0:
        raise ValueError(
            f"--routing-stop-gradient-updates must be >= 0 (0 = off), got {args.routing_stop_gradient_updates}"
        )
    max_update = getattr(args, "max_update", 0) or 0
    if args.routing_stop_gradient_updates and 0 < max_update <= args.routing_stop_gradient_updates:
        # a warning, not an error: a run continued past N later (or a curve point trained to
        # u <= N on its own) is a legitimate part of a longer run
        logger.warning(
            f"--routing-stop-gradient-updates {args.routing_stop_gradient_updates} stops the gradient through the "
            f"routing for every one of this run's --max-update {max_update} updates: up to there it trains as "
            "--routing-stop-gradient does"
        )
    if args.routing_stop_gradient and args.routing_stop_gradient_updates:
        raise ValueError(
            "--routing-stop-gradient stops the gradient through the routing for the whole run, "
            "--routing-stop-gradient-updates N for the first N updates only; give one of them"
        )
    if not (args.routing_vertical or args.routing_horizontal):
        raise ValueError(
            "--no-routing-vertical together with --no-routing-horizontal leaves nothing to route; "
            "use --arch transformer for the baseline"
        )
    if args.routing_init == "self" and not args.routing_horizontal:
        raise ValueError(
            "--routing-init self initialises the horizontal routing (Eq. 15) and needs --routing-horizontal"
        )
    routes_decoder = args.routing_side in ("decoder", "both")
    if routes_decoder and getattr(args, "cross_self_attention", False):
        # keys = [encoder states; target prefix] differ from the queries: Eq. 15's
        # B^init = alpha_{l,t} and the positional capsule order are undefined there.
        raise ValueError(
            f"--routing-side {args.routing_side} routes decoder self-attention, whose queries and "
            "keys must be the same positions; it cannot be combined with --cross-self-attention"
        )
    for side in ("encoder", "decoder"):
        if args.routing_side in (side, "both") and getattr(args, f"{side}_xformers_att_config", None):
            raise ValueError(
                f"--{side}-xformers-att-config hides the attention logits that --routing-side "
                f"{args.routing_side} routes; drop one of them"
            )


@register_model("transformer_cross_agg")
class TransformerCrossAggModel(TransformerModel):
    """Transformer with cross aggregation (vertical + positional horizontal routing) of
    self-attention logits, Cao, Zhao, Yu.

    Initialisation-study options (not in the paper, off by default):
    ``--routing-ramp-updates N``: Eq. 9 with the routed term scaled by min(1, u/N) after u
    updates (fairseq's ``set_num_updates``; u is kept in the state dict);
    ``--routing-stop-gradient``: diagnostic, the routing reads detached logits;
    ``--routing-stop-gradient-updates N``: the same for the first N updates only."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument(
            "--routing-vertical", action=argparse.BooleanOptionalAction,
            help="vertical capsules: route over heads for each query (Eq. 10-13)",
        )
        parser.add_argument(
            "--routing-horizontal", action=argparse.BooleanOptionalAction,
            help="horizontal capsules with positional routing over queries t <= l (Eq. 14)",
        )
        parser.add_argument(
            "--routing-init", choices=ROUTING_INITS,
            help="initial routing logits of the horizontal routing: zero, or self = the "
            "attention logit itself (Eq. 15)",
        )
        parser.add_argument("--routing-iters", type=int, metavar="T", help="routing iterations T")
        parser.add_argument(
            "--routing-side", choices=ROUTING_SIDES,
            help="which self-attention layers route (the paper: encoder)",
        )
        parser.add_argument(
            "--routing-ramp-updates", type=int, metavar="N",
            help="initialisation study (not in the paper): ramp the routed term in, "
            "E^ = E + min(1, u/N) (Omega^v + Omega^h) after u updates; 0 (default) = Eq. 9 "
            "as written from the start",
        )
        parser.add_argument(
            "--routing-stop-gradient", action="store_true", default=None,
            help="diagnostic (not in the paper): the routing reads the logits detached, so "
            "Q / K get no gradient through Omega^v + Omega^h; forward values unchanged",
        )
        parser.add_argument(
            "--routing-stop-gradient-updates", type=int, metavar="N",
            help="diagnostic (not in the paper): as --routing-stop-gradient for the first N "
            "updates only, then the gradient flows through the routing as in Eq. 9; 0 (default) = off",
        )

    @classmethod
    def build_model(cls, args, task):
        cross_agg_defaults(args)
        validate_routing_args(args)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        if cfg.routing_side not in ("encoder", "both"):
            return super().build_encoder(cfg, src_dict, embed_tokens)
        return CrossAggEncoder(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        if cfg.routing_side not in ("decoder", "both"):
            return super().build_decoder(cfg, tgt_dict, embed_tokens)
        return CrossAggDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)


def cross_agg_defaults(args):
    """Table 1 row 4 (the paper's best): vertical + horizontal, zero init, T = 3, encoder."""
    for name, default in (
        ("routing_vertical", True),
        ("routing_horizontal", True),
        ("routing_init", "zero"),
        ("routing_iters", 3),
        ("routing_side", "encoder"),
        # initialisation-study options, off (also for checkpoints written before them)
        ("routing_ramp_updates", 0),
        ("routing_stop_gradient", False),
        ("routing_stop_gradient_updates", 0),
    ):
        if getattr(args, name, None) is None:
            setattr(args, name, default)


@register_model_architecture("transformer_cross_agg", "transformer_cross_agg")
def transformer_cross_agg(args):
    cross_agg_defaults(args)
    base_architecture(args)


@register_model_architecture("transformer_cross_agg", "transformer_cross_agg_big")
def transformer_cross_agg_big(args):
    cross_agg_defaults(args)
    transformer_vaswani_wmt_en_de_big(args)
