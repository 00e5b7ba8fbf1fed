"""transformer_sentential: Wang et al. (2019), "Exploiting Sentential Context for NMT".

fairseq glue around ``fairseq_ctx.modules.sentential_context``:
- the encoder computes the sentential context g (shallow, Eq. 3-7; deep RNN, Eq. 8-9)
  or the layer vectors G (deep TAM, Eq. 8) and returns them in ``encoder_out``
  (``sentential_context`` / ``sentential_layers``), reordered for beam search;
- every decoder layer l first reads D^ = FFN_l([D^{l-1}; g]) (Eq. 1-2), inside the
  layer's usual residual + LayerNorm structure (post-norm by default: LN(D + FFN_l));
- TAM (Eq. 10-11) runs in the decoder: one attention ATT_g shared by all layers,
  queried by each layer's input at each target position.

``--sentential-g0 no_dropout`` (initialisation study, issue 15; not in the paper): g0 =
MAX(H^0) (Eq. 7) is taken from the embedding output before the encoder's dropout, not from
fairseq's ``encoder_states[0]`` (after it). Only g0 changes; in eval mode both are equal.
"""
import argparse
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
    base_architecture,
    transformer_vaswani_wmt_en_de_big,
)
from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from ._controlled_init import added_parameters, next_layer_name
from ..modules.sentential_context import (
    DEEP_CHOICES,
    G0_CHOICES,
    GLOBAL_CHOICES,
    SententialContext,
    SententialFeedForward,
    TransparentAttention,
)


# incremental-state keys of TransparentAttention.project_layers' outputs, in order
TAM_PROJECTIONS = ("tam_query_keys", "tam_key_offsets", "tam_out_values")


class LayerSententialContext(NamedTuple):
    """What one decoder layer reads for one forward call: either the precomputed
    sentence-level bias W1_g g + b1 (shallow / RNN), or TAM with its projections
    of G (``TransparentAttention.project_layers``, shared by all layers)."""

    sentence_bias: Optional[Tensor] = None
    transparent_attention: Optional[TransparentAttention] = None
    layer_projections: Optional[Tuple[Tensor, Tensor, Tensor]] = None


class SententialTransformerEncoder(TransformerEncoderBase):
    """Transformer encoder that also returns the sentential context.

    H^0 is the input of the first layer (scaled word embeddings + positions, the
    encoder's ``encoder_states[0]``), H^l the output of layer l; H^L is the final
    encoder output (after the final LayerNorm in pre-norm models).

    g0 = MAX(H^0) (Eq. 7), the query of GLOBAL_ATT, reads ``encoder_states[0]``, which
    fairseq takes after the embedding dropout (``--sentential-g0 dropout``, the default).
    With ``no_dropout`` it reads the same tensor before that dropout (``forward_embedding``
    keeps it); the layers still get the dropped-out H^0, and every H^l is unchanged.
    """

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.g0_without_dropout = getattr(cfg, "sentential_g0", "dropout") == "no_dropout"
        # set by forward_embedding for the current forward call (no_dropout only)
        self._embedding_before_dropout: Optional[Tensor] = None
        # its own stream (_controlled_init): the decoder, built next, starts as stock
        with added_parameters("encoder.sentential_context"):
            self.sentential_context = SententialContext(
                cfg.encoder.embed_dim,
                cfg.encoder.attention_heads,
                cfg.encoder.layers,
                global_type=cfg.sentential_global,
                deep_type=cfg.sentential_deep,
                attention_dropout=cfg.attention_dropout,
            )

    def forward_embedding(self, src_tokens, token_embedding: Optional[Tensor] = None):
        """fairseq's forward_embedding; with ``--sentential-g0 no_dropout`` it also keeps
        its result before ``self.dropout_module`` (scaled embeddings + positions [+
        layernorm_embedding]), read by a pre-hook on that module during this call only."""
        if not self.g0_without_dropout:
            return super().forward_embedding(src_tokens, token_embedding)
        kept: List[Tensor] = []
        handle = self.dropout_module.register_forward_pre_hook(
            lambda module, inputs: kept.append(inputs[0])
        )
        try:
            x, embed = super().forward_embedding(src_tokens, token_embedding)
        finally:
            handle.remove()
        if len(kept) != 1:
            raise RuntimeError(f"expected one call of the embedding dropout, got {len(kept)}")
        self._embedding_before_dropout = kept[0]  # (B, S, C)
        return x, embed

    def forward(
        self,
        src_tokens,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
    ):
        # fairseq-generate never asks for all hiddens, but g0 = MAX(H^0) and the deep
        # context need them: always collect them, hand them out only when asked.
        try:
            encoder_out = self.forward_scriptable(src_tokens, src_lengths, True, token_embeddings)
            states = encoder_out["encoder_states"]
            g0_states = states[0]  # H^0 after the embedding dropout: fairseq's encoder_states[0]
            if self.g0_without_dropout:
                g0_states = self._embedding_before_dropout.transpose(0, 1)  # H^0 before it
        finally:
            self._embedding_before_dropout = None
        layer_states = states[1:-1] + encoder_out["encoder_out"]
        g, layer_contexts = self.sentential_context(
            g0_states, layer_states, encoder_out["encoder_padding_mask"][0]
        )
        encoder_out["sentential_context"] = [] if g is None else [g]  # (B, C)
        encoder_out["sentential_layers"] = [] if layer_contexts is None else [layer_contexts]  # (B, L, C)
        if not return_all_hiddens:
            encoder_out["encoder_states"] = []
            encoder_out["fc_results"] = []
        return encoder_out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order):
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        for key in ("sentential_context", "sentential_layers"):
            reordered[key] = [t.index_select(0, new_order) for t in encoder_out.get(key, [])]
        return reordered


class SententialDecoderLayer(TransformerDecoderLayerBase):
    """Decoder layer l that first fuses the sentential context into its input (Eq. 2),
    then runs the stock layer (Eq. 1). The fusion sublayer follows the layer's own
    residual/normalisation scheme: post-norm LN(D + FFN_l([D; g])), pre-norm
    D + FFN_l([LN(D); g]).

    ``name``: the layer's path in the model (``decoder.layers.0``); the stock sublayers
    draw from the global RNG as fairseq's layer does, the fusion sublayer from the
    stream derived from ``name`` and the run's seed (``_controlled_init``), so the
    layers and the output projection built after it start as stock."""

    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False, *,
                 name: str = "decoder.layers.0"):
        super().__init__(cfg, no_encoder_attn, add_bias_kv, add_zero_attn)
        with added_parameters(f"{name}.sentential_ffn"):
            self.sentential_ffn = SententialFeedForward(
                self.embed_dim,
                cfg.encoder.embed_dim,
                cfg.decoder.ffn_embed_dim,
                activation=self.activation_fn,
                activation_dropout=self.activation_dropout_module.p,
            )
            self.sentential_layer_norm = LayerNorm(self.embed_dim, export=cfg.export)
        # set by SententialTransformerDecoder before each forward call
        self.sentential_context: Optional[LayerSententialContext] = None
        self.checkpoint_activations = cfg.checkpoint_activations

    def fuse_sentential_context(self, x: Tensor) -> Tensor:
        context = self.sentential_context
        if context is None:
            raise RuntimeError(
                "SententialDecoderLayer has no sentential context: "
                "call it through SententialTransformerDecoder"
            )
        residual = x
        if self.normalize_before:
            x = self.sentential_layer_norm(x)
        if context.transparent_attention is not None:
            # Eq. 10-11: the paper's query d^l_{i-1} read as this layer's input at
            # target position i (a function of y_<i only), so training stays parallel
            # and incremental decoding needs no extra state.
            g = context.transparent_attention(x, *context.layer_projections)
            x = self.sentential_ffn(x, context=g)  # Eq. 2
        else:
            x = self.sentential_ffn(x, sentence_bias=context.sentence_bias)  # Eq. 2
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.sentential_layer_norm(x)
        return x

    def fused_forward(self, x, *args, **kwargs):
        return super().forward(self.fuse_sentential_context(x), *args, **kwargs)  # Eq. 1

    def forward(self, x, *args, **kwargs):
        if self.checkpoint_activations and torch.is_grad_enabled():
            # non-reentrant checkpointing: the context (set as an attribute, not passed
            # as an argument) stays part of the ordinary autograd graph
            return checkpoint(self.fused_forward, x, *args, use_reentrant=False, **kwargs)
        return self.fused_forward(x, *args, **kwargs)


class SententialTransformerDecoder(TransformerDecoderBase):
    """Transformer decoder whose layers read the sentential context from ``encoder_out``.

    Everything that depends only on the source (the sentence bias W1_g g + b1 of
    every layer, or TAM's projections of G) is computed once per sentence: once per
    forward in training, once per sentence in incremental decoding (kept in the
    incremental state and reordered with the beams).
    """

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(
            cfg,
            dictionary,
            embed_tokens,
            no_encoder_attn=no_encoder_attn,
            output_projection=output_projection,
        )
        self.transparent_attention = None
        if cfg.sentential_deep == "tam":
            with added_parameters("decoder.transparent_attention"):
                self.transparent_attention = TransparentAttention(
                    cfg.decoder.embed_dim,
                    cfg.encoder.embed_dim,
                    cfg.decoder.attention_heads,
                    dropout=cfg.attention_dropout,
                )

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        # --checkpoint-activations is handled inside the layer (fairseq's reentrant
        # checkpoint_wrapper would cut the gradient path to the sentential context)
        layer = SententialDecoderLayer(cfg, no_encoder_attn, name=next_layer_name(self, "decoder"))
        min_params_to_wrap = cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0
        return fsdp_wrap(layer, min_num_params=min_params_to_wrap)

    def sentential_layers(self) -> List[SententialDecoderLayer]:
        # index, not iterate: LayerDropModuleList's iterator drops layers at random
        return [self.layers[i] for i in range(len(self.layers))]

    def source_side_context(
        self,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]],
    ) -> Dict[str, Optional[Tensor]]:
        cached = self.get_incremental_state(incremental_state, "sentential")
        if cached is not None:
            return cached
        if encoder_out is None:
            raise ValueError("transformer_sentential's decoder needs encoder_out")
        if self.transparent_attention is not None:
            projections = self.transparent_attention.project_layers(
                encoder_out["sentential_layers"][0]
            )
            context: Dict[str, Optional[Tensor]] = dict(zip(TAM_PROJECTIONS, projections))
        else:
            g = encoder_out["sentential_context"][0]
            context = {
                f"sentence_bias_{i}": layer.sentential_ffn.sentence_bias(g)
                for i, layer in enumerate(self.sentential_layers())
            }
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "sentential", context)
        return context

    def extract_features_scriptable(
        self,
        prev_output_tokens,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        context = self.source_side_context(encoder_out, incremental_state)
        layers = self.sentential_layers()
        if self.transparent_attention is not None:  # one TAM, shared by every layer
            shared = LayerSententialContext(
                transparent_attention=self.transparent_attention,
                layer_projections=tuple(context[key] for key in TAM_PROJECTIONS),
            )
            for layer in layers:
                layer.sentential_context = shared
        else:
            for i, layer in enumerate(layers):
                layer.sentential_context = LayerSententialContext(
                    sentence_bias=context[f"sentence_bias_{i}"]
                )
        try:
            return super().extract_features_scriptable(
                prev_output_tokens,
                encoder_out,
                incremental_state,
                full_context_alignment,
                alignment_layer,
                alignment_heads,
            )
        finally:
            # drop references to this call's tensors (and their graph), except when
            # --checkpoint-activations re-runs the layers during backward: they must
            # find the same context then (the next forward replaces it)
            if not (self.training and self.cfg.checkpoint_activations):
                for layer in layers:
                    layer.sentential_context = None

    def reorder_incremental_state(
        self,
        incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
        new_order: Tensor,
    ):
        cached = self.get_incremental_state(incremental_state, "sentential")
        if cached is not None:
            reordered = {
                key: None if value is None else value.index_select(0, new_order)
                for key, value in cached.items()
            }
            self.set_incremental_state(incremental_state, "sentential", reordered)


def check_sentential_args(args):
    """Reject unusable option combinations with one clear error, before building."""
    if args.sentential_global not in GLOBAL_CHOICES:
        raise ValueError(
            f"--sentential-global must be one of {', '.join(GLOBAL_CHOICES)}; "
            f"got {args.sentential_global!r}"
        )
    if args.sentential_deep not in DEEP_CHOICES:
        raise ValueError(
            f"--sentential-deep must be one of {', '.join(DEEP_CHOICES)}; "
            f"got {args.sentential_deep!r}"
        )
    if args.sentential_g0 not in G0_CHOICES:
        raise ValueError(
            f"--sentential-g0 must be one of {', '.join(G0_CHOICES)}; got {args.sentential_g0!r}"
        )
    if args.sentential_g0 == "no_dropout" and args.sentential_global != "attention":
        raise ValueError(
            f"--sentential-g0 no_dropout changes g0 = MAX(H^0), the query of the attention "
            f"GLOBAL (Eq. 6-7); --sentential-global {args.sentential_global} has no g0"
        )
    if args.sentential_g0 == "no_dropout" and getattr(args, "quant_noise_pq", 0) > 0:
        raise ValueError(
            "--sentential-g0 no_dropout cannot be combined with --quant-noise-pq: fairseq "
            "projects the embedding output after its dropout (a quant-noise layer), so there "
            "is no H^0 before dropout in the layers' space"
        )
    if args.sentential_deep != "none" and getattr(args, "encoder_layerdrop", 0) > 0:
        raise ValueError(
            f"--sentential-deep {args.sentential_deep} needs every encoder layer's output "
            f"(Eq. 8): it cannot be combined with --encoder-layerdrop "
            f"{args.encoder_layerdrop}"
        )
    if getattr(args, "offload_activations", False):
        raise ValueError(
            "--offload-activations is not supported by transformer_sentential "
            "(use --checkpoint-activations)"
        )
    if getattr(args, "base_layers", 0) > 0:
        raise ValueError("--base-layers is not supported by transformer_sentential")
    if args.sentential_global == "attention" and (
        args.encoder_embed_dim % args.encoder_attention_heads != 0
    ):
        raise ValueError(
            f"--sentential-global attention: --encoder-embed-dim ({args.encoder_embed_dim}) "
            f"must be divisible by --encoder-attention-heads ({args.encoder_attention_heads})"
        )
    if args.sentential_deep == "tam" and args.encoder_embed_dim % args.decoder_attention_heads != 0:
        raise ValueError(
            f"--sentential-deep tam: --encoder-embed-dim ({args.encoder_embed_dim}) "
            f"must be divisible by --decoder-attention-heads ({args.decoder_attention_heads})"
        )


@register_model("transformer_sentential")
class SententialTransformerModel(TransformerModel):
    """Transformer with a shallow or deep sentential context of the source fed to
    every decoder layer (Wang et al., 2019).

    ``--sentential-g0 {dropout,no_dropout}`` (initialisation study, not in the paper):
    g0 = MAX(H^0) of Eq. 7 over H^0 after (default, fairseq's ``encoder_states[0]``) or
    before the encoder's embedding dropout; see docs/notes/transformer_sentential.md."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument(
            "--sentential-global",
            choices=GLOBAL_CHOICES,
            help="GLOBAL(.) that summarises an encoder layer: masked mean (Eq. 4), "
            "masked max (Eq. 5) or attention queried by the max of the embeddings "
            "(Eq. 6-7)",
        )
        parser.add_argument(
            "--sentential-deep",
            choices=DEEP_CHOICES,
            help="none: shallow context from the top encoder layer (Eq. 3); rnn: GRU "
            "over every layer's GLOBAL (Eq. 8-9); tam: transparent attention over them "
            "per target position (Eq. 10-11)",
        )
        parser.add_argument(
            "--sentential-g0",
            choices=G0_CHOICES,
            help="initialisation study (not in the paper): where g0 = MAX(H^0) (Eq. 7), "
            "the query of the attention GLOBAL, reads H^0: dropout (default) = fairseq's "
            "encoder_states[0], after the embedding dropout; no_dropout = the embedding "
            "output before that dropout (identical in eval mode)",
        )

    @classmethod
    def build_model(cls, args, task):
        transformer_sentential(args)  # defaults when built outside the CLI
        check_sentential_args(args)
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return SententialTransformerEncoder(
            TransformerConfig.from_namespace(args), src_dict, embed_tokens
        )

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return SententialTransformerDecoder(
            cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention
        )


def sentential_study_defaults(args: argparse.Namespace):
    """Initialisation-study options off (also for checkpoints written before them)."""
    if getattr(args, "sentential_g0", None) is None:
        args.sentential_g0 = "dropout"


@register_model_architecture("transformer_sentential", "transformer_sentential")
def transformer_sentential(args: argparse.Namespace):
    """Base model with the best base configuration: attention GLOBAL + deep RNN (Table 1 row 6)."""
    args.sentential_global = getattr(args, "sentential_global", "attention")
    args.sentential_deep = getattr(args, "sentential_deep", "rnn")
    sentential_study_defaults(args)
    base_architecture(args)


@register_model_architecture("transformer_sentential", "transformer_sentential_big")
def transformer_sentential_big(args: argparse.Namespace):
    """Big model (1024/4096/16 heads) with deep TAM, the best big model in Table 2."""
    args.sentential_global = getattr(args, "sentential_global", "attention")
    args.sentential_deep = getattr(args, "sentential_deep", "tam")
    sentential_study_defaults(args)
    transformer_vaswani_wmt_en_de_big(args)
