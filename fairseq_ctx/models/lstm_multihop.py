"""fairseq glue for the multi-hop attention RNN of Iida et al. (2019): ``lstm_multihop``.

The model is fairseq's own ``lstm`` model (bidirectional LSTM encoder, LSTM decoder
with input feeding) whose source-target attention layer is ``MultiHopAttention``.
The decoder's time loop, its recurrent state, its incremental state and its beam
reordering are fairseq's: the attention layer keeps no state of its own.
"""
import torch

from fairseq import utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.lstm import LSTMDecoder, LSTMModel
from fairseq.models.lstm import base_architecture as lstm_base_architecture

from fairseq_ctx.models._controlled_init import added_parameters
from fairseq_ctx.modules.multihop_attention import HOP_MODES, MultiHopAttention


@register_model("lstm_multihop")
class LSTMMultiHopModel(LSTMModel):
    """fairseq ``lstm`` with N-head, K-hop source-target attention (Iida et al., 2019)."""

    @staticmethod
    def add_args(parser):
        LSTMModel.add_args(parser)
        # fmt: off
        parser.add_argument('--attention-heads', type=int, metavar='N',
                            help='number of attention heads N, each with its own W_a (Eq. 1-2)')
        parser.add_argument('--attention-hops', type=int, metavar='K',
                            help='number of attention hops K; K=1 is multi-head attention only')
        parser.add_argument('--hop-mode', choices=HOP_MODES,
                            help='extra hops: dependent (Eq. 7-9, softmax over heads) '
                                 'or independent (Eq. 19, U_c per head only)')
        parser.add_argument('--hop-learned-score-vector', action='store_true',
                            help='make v_b of Eq. 7 trainable (+D parameters per dependent hop; '
                                 'Table 5 of the paper counts none, so it is fixed by default)')
        # fmt: on

    @classmethod
    def build_model(cls, args, task):
        lstm_multihop(args)
        validate_multihop_args(args)
        # fairseq builds the embeddings (shared / pretrained / frozen), the encoder and
        # a stock decoder from the global RNG, exactly as for --arch lstm; the decoder is
        # then rebuilt as the subclass around the same embedding, from its own stream
        # (_controlled_init: the global RNG is left where the stock build left it), and
        # takes the stock decoder's values for every tensor of the same name and shape
        # (all but the multi-head W_a / W_o and the hops), so at the same seed the model
        # starts where the stock lstm starts, plus its additions.
        model = super().build_model(args, task)
        stock = model.decoder
        with added_parameters("decoder"):
            model.decoder = MultiHopLSTMDecoder(
                dictionary=task.target_dictionary,
                embed_dim=args.decoder_embed_dim,
                hidden_size=args.decoder_hidden_size,
                out_embed_dim=args.decoder_out_embed_dim,
                num_layers=args.decoder_layers,
                dropout_in=args.decoder_dropout_in,
                dropout_out=args.decoder_dropout_out,
                encoder_output_units=model.encoder.output_units,
                pretrained_embed=stock.embed_tokens,
                share_input_output_embed=args.share_decoder_input_output_embed,
                max_target_positions=stock.max_target_positions,
                num_heads=args.attention_heads,
                num_hops=args.attention_hops,
                hop_mode=args.hop_mode,
                learned_score_vector=args.hop_learned_score_vector,
            )
        copy_shared_tensors(stock, model.decoder)
        return model


@torch.no_grad()
def copy_shared_tensors(source: torch.nn.Module, target: torch.nn.Module) -> None:
    """Copy every parameter / buffer of ``source`` into the ``target`` tensor of the same
    state-dict name and shape (``requires_grad`` and sharing of ``target`` unchanged)."""
    target_state = target.state_dict(keep_vars=True)
    for name, value in source.state_dict(keep_vars=True).items():
        tensor = target_state.get(name)
        if tensor is not None and tensor.shape == value.shape and tensor is not value:
            tensor.copy_(value)


class MultiHopLSTMDecoder(LSTMDecoder):
    """fairseq's LSTM decoder with ``MultiHopAttention`` as its attention layer."""

    def __init__(self, *args, num_heads=2, num_hops=2, hop_mode="dependent", learned_score_vector=False, **kwargs):
        super().__init__(*args, attention=False, **kwargs)
        # Same sizes as the stock AttentionLayer(hidden, encoder_output_units, hidden).
        self.attention = MultiHopAttention(
            query_dim=self.hidden_size,
            source_dim=self.encoder_output_units,
            output_dim=self.hidden_size,
            num_heads=num_heads,
            num_hops=num_hops,
            hop_mode=hop_mode,
            learned_score_vector=learned_score_vector,
        )


def validate_multihop_args(args):
    """Reject option combinations that cannot build the paper's model, naming the option."""
    if args.attention_heads < 1:
        raise ValueError(f"--attention-heads must be >= 1, got {args.attention_heads}")
    if args.attention_hops < 1:
        raise ValueError(f"--attention-hops must be >= 1, got {args.attention_hops}")
    if args.hop_mode not in HOP_MODES:
        raise ValueError(f"--hop-mode must be one of {HOP_MODES}, got {args.hop_mode!r}")
    if not utils.eval_bool(args.decoder_attention):
        raise ValueError("--decoder-attention must be true for lstm_multihop (the multi-hop attention is the model)")
    if args.adaptive_softmax_cutoff is not None and getattr(args, "criterion", None) == "adaptive_loss":
        # fairseq's LSTM decoder skips its output layers with adaptive softmax; the
        # multi-hop output o_i (Eq. 16-17) would then not feed the softmax as the paper says
        raise ValueError("--criterion adaptive_loss (adaptive softmax) is not supported by lstm_multihop")


@register_model_architecture("lstm_multihop", "lstm_multihop")
def lstm_multihop(args):
    """The paper's setup (Section 4.2): embeddings 512, one-layer bidirectional encoder
    (512 per direction), one-layer decoder with hidden size 1024 and input feeding,
    output embedding 512; 2 heads x 2 dependent hops (the paper's main model)."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 512)
    args.encoder_hidden_size = getattr(args, "encoder_hidden_size", 512)
    args.encoder_layers = getattr(args, "encoder_layers", 1)
    args.encoder_bidirectional = getattr(args, "encoder_bidirectional", True)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 512)
    args.decoder_hidden_size = getattr(args, "decoder_hidden_size", 1024)
    args.decoder_layers = getattr(args, "decoder_layers", 1)
    args.decoder_out_embed_dim = getattr(args, "decoder_out_embed_dim", 512)
    args.attention_heads = getattr(args, "attention_heads", 2)
    args.attention_hops = getattr(args, "attention_hops", 2)
    args.hop_mode = getattr(args, "hop_mode", "dependent")
    args.hop_learned_score_vector = getattr(args, "hop_learned_score_vector", False)
    lstm_base_architecture(args)
