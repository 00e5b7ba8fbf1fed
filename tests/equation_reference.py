"""Float64 references of the stock networks the four papers build on, written from
the equations as plain tensor operations on the weights read out of a model's state
dict. Used by the end-to-end equation tests (tests/test_*_equations_end_to_end.py).
The reference functions call no fairseq or fairseq_ctx code; ``float64_throughout``
only changes the precision of the MODEL's run, not what it computes.

- the Transformer (Vaswani et al., 2017) with fairseq's conventions: sinusoidal
  positions (tensor2tensor layout, counted from padding_idx + 1 over the non-padding
  tokens), embeddings scaled by sqrt(d), padding positions of the encoder input zeroed,
  post-norm LN(x + Sublayer(x)) or pre-norm x + Sublayer(LN(x)) (then a final LN),
  scaled dot-product multi-head attention with biased q/k/v/out projections;
- the LSTM of fairseq's ``lstm`` model (Luong et al., 2015 with input feeding).

The families' additions hook in at the paper's positions (see each test file):
``q_k_hook`` (Yang Eq. 5-6) and ``logit_hook`` (Cao Eq. 9) on a self-attention,
``layer_input_hook`` (Wang Eq. 1-2) before a decoder layer, and the LSTM decoder's
``attention`` (Iida Eq. 1-2, 7-9, 16).
"""
import contextlib
import math
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

Params = Dict[str, Tensor]

# unequal sides (3 vs 2 layers, 2 vs 4 heads, FFN 32 vs 24; d = 16, dropout off): an encoder
# setting read where the decoder's is meant, or the reverse, passes every equal-sized case
UNEQUAL_SIZES = [
    "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-layers", "3",
    "--encoder-attention-heads", "2", "--decoder-embed-dim", "16",
    "--decoder-ffn-embed-dim", "24", "--decoder-layers", "2",
    "--decoder-attention-heads", "4",
    "--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0",
]  # fmt: skip
UNEQUAL_HEADS = (2, 4)  # encoder, decoder


@contextlib.contextmanager
def float64_throughout():
    """Run a float64 model without its float32 islands.

    Parts of the code compute in float32 on purpose, for fp16 / bf16 training:
    fairseq's explicit attention path takes its softmax with ``utils.softmax(...,
    dtype=float32)``, and fairseq_ctx's modules call ``.float()`` before softmaxes,
    pooling and routing (cross_aggregation, multihop_attention, sentential_context).
    In a float64 model those round to float32 (errors ~1e-7), which would hide
    everything below that in a comparison. Inside this context a ``.float()`` of a
    float64 tensor returns it unchanged and fairseq's softmax keeps float64; nothing
    changes for other dtypes, and the functions computed are the same. Each test
    also compares WITHOUT this context at a float32 tolerance.
    """
    import fairseq.utils

    original_float = torch.Tensor.float
    original_softmax = fairseq.utils.softmax

    def float_(self, *args, **kwargs):
        if self.dtype == torch.float64:
            return self
        return original_float(self, *args, **kwargs)

    def softmax_(x, dim: int, onnx_trace: bool = False):
        if x.dtype == torch.float64:
            return F.softmax(x, dim=dim)
        return original_softmax(x, dim, onnx_trace)

    torch.Tensor.float = float_
    fairseq.utils.softmax = softmax_
    try:
        yield
    finally:
        torch.Tensor.float = original_float
        fairseq.utils.softmax = original_softmax


def state_params(model) -> Params:
    """The model's weights (state dict), detached, in float64."""
    return {name: value.detach().double() for name, value in model.state_dict().items()
            if value.is_floating_point()}


def randomize_parameters(model, seed: int = 1234, scale: float = 1.0) -> None:
    """Overwrite every parameter with fixed random values (biases, gates and routing
    weights included, which their initialisers may leave at zero), so that every term
    of every equation is exercised; independent of how the model initialises itself."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            values = torch.randn(param.shape, generator=generator, dtype=torch.float64)
            if "layer_norm" in name and name.endswith(".weight"):
                values = 1.0 + 0.2 * values
            elif param.dim() >= 2:
                values = values * (scale / math.sqrt(param.shape[-1]))
            else:
                values = values * 0.2 * scale
            param.copy_(values.to(param.dtype))


# ----------------------------------------------------------------------------- primitives
def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """x W^T + b (weights stored (out, in), as nn.Linear)."""
    out = torch.matmul(x, weight.t())
    return out if bias is None else out + bias


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """Ba et al. (2016): (x - mean) / sqrt(var + eps) * gamma + beta over the last axis."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def sigmoid(x: Tensor) -> Tensor:
    return 1.0 / (1.0 + torch.exp(-x))


def softmax(x: Tensor, dim: int) -> Tensor:
    """exp(x) / sum exp(x); -inf entries get weight 0."""
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=dim, keepdim=True)


def sinusoidal_positions(tokens: Tensor, padding_idx: int, dim: int) -> Tensor:
    """Vaswani et al. Sec. 3.5 in the tensor2tensor layout fairseq uses:
    PE(p) = [sin(p w_0..w_{h-1}); cos(p w_0..w_{h-1})], w_i = 10000^(-i / (h - 1)),
    h = dim / 2, with p = padding_idx + 1, padding_idx + 2, ... over the non-padding
    tokens of each row and PE = 0 at padding. fairseq tabulates it in float32, so the
    reference evaluates it in float32 too (then widens): float64 sines would differ
    from the model's table by ~1e-7. (B, S) -> (B, S, dim) float64."""
    half = dim // 2
    rates = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000) / (half - 1)))
    keep = tokens.ne(padding_idx)
    positions = torch.cumsum(keep.long(), dim=1) * keep + padding_idx
    angles = positions.to(torch.float32).unsqueeze(-1) * rates
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
    if dim % 2 == 1:
        table = torch.cat([table, torch.zeros_like(table[..., :1])], dim=-1)
    return table.masked_fill(~keep.unsqueeze(-1), 0.0).double()


def masked_mean(x: Tensor, padding_mask: Tensor) -> Tensor:
    """Mean over the non-padding positions: x (S, B, C), padding_mask (B, S) -> (B, C)."""
    keep = (~padding_mask).t().unsqueeze(-1).double()
    return (x * keep).sum(dim=0) / keep.sum(dim=0)


# ----------------------------------------------------------------------------- attention
def multihead_attention(
    p: Params,
    prefix: str,
    query: Tensor,
    key: Tensor,
    num_heads: int,
    key_padding_mask: Optional[Tensor] = None,
    causal: bool = False,
    q_k_hook: Optional[Callable[[Tensor, Tensor], tuple]] = None,
    logit_hook: Optional[Callable[[Tensor], Tensor]] = None,
) -> Tensor:
    """Multi-head scaled dot-product attention (Vaswani et al. Eq. 1 and Sec. 3.2.2):
    Q = X W_Q + b_Q, K = Y W_K + b_K, V = Y W_V + b_V; per head
    softmax(Q_h K_h^T / sqrt(d_h)) V_h, heads concatenated, then W_O, b_O.

    query (T, B, C), key = value (S, B, C); key_padding_mask (B, S) True at padding;
    causal: query t sees keys s <= t. ``q_k_hook(Q, K) -> (Q, K)`` replaces the projected
    queries / keys (all heads, (T|S, B, C), before the 1/sqrt(d_h) scaling);
    ``logit_hook(E) -> E`` replaces the masked logits E (B, H, T, S), -inf at masked keys.
    """
    q = linear(query, p[prefix + "q_proj.weight"], p[prefix + "q_proj.bias"])
    k = linear(key, p[prefix + "k_proj.weight"], p[prefix + "k_proj.bias"])
    v = linear(key, p[prefix + "v_proj.weight"], p[prefix + "v_proj.bias"])
    if q_k_hook is not None:
        q, k = q_k_hook(q, k)
    T, B, C = q.shape
    S = k.size(0)
    Dh = C // num_heads

    def heads(t: Tensor) -> Tensor:  # (L, B, C) -> (B, H, L, Dh)
        return t.reshape(t.size(0), B, num_heads, Dh).permute(1, 2, 0, 3)

    logits = torch.matmul(heads(q), heads(k).transpose(-1, -2)) / math.sqrt(Dh)
    masked = torch.zeros(B, 1, T, S, dtype=torch.bool)
    if key_padding_mask is not None:
        masked = masked | key_padding_mask.view(B, 1, 1, S)
    if causal:
        masked = masked | torch.ones(T, S, dtype=torch.bool).triu(1).view(1, 1, T, S)
    logits = logits.masked_fill(masked, float("-inf"))
    if logit_hook is not None:
        logits = logit_hook(logits)
    weights = softmax(logits, dim=-1)
    out = torch.matmul(weights, heads(v))  # (B, H, T, Dh)
    out = out.permute(2, 0, 1, 3).reshape(T, B, C)
    return linear(out, p[prefix + "out_proj.weight"], p[prefix + "out_proj.bias"])


def feed_forward(p: Params, prefix: str, x: Tensor) -> Tensor:
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (Vaswani et al. Eq. 2)."""
    hidden = torch.relu(linear(x, p[prefix + "fc1.weight"], p[prefix + "fc1.bias"]))
    return linear(hidden, p[prefix + "fc2.weight"], p[prefix + "fc2.bias"])


def sublayer(p: Params, ln_prefix: str, x: Tensor, fn: Callable[[Tensor], Tensor], pre_norm: bool) -> Tensor:
    """Residual sublayer: post-norm LN(x + F(x)) (Vaswani Sec. 3.1), pre-norm x + F(LN(x))."""
    ln = lambda t: layer_norm(t, p[ln_prefix + ".weight"], p[ln_prefix + ".bias"])  # noqa: E731
    if pre_norm:
        return x + fn(ln(x))
    return ln(x + fn(x))


def num_layers(p: Params, stack: str) -> int:
    return len({name.split(".")[2] for name in p if name.startswith(f"{stack}.layers.")})


# ----------------------------------------------------------------------------- Transformer
def transformer_encoder(
    p: Params,
    src_tokens: Tensor,
    padding_idx: int,
    num_heads: int,
    pre_norm: bool = False,
    self_attention_hook: Optional[Callable] = None,
) -> Dict[str, object]:
    """The encoder. Returns H^0 (the first layer's input), the layer outputs, the final
    output (after the final LN in pre-norm models) and the padding mask.

    ``self_attention_hook(l, x, padding_mask)`` (l 1-based, x the layer's input in
    post-norm or LN(input) in pre-norm) returns dict(q_k_hook=..., logit_hook=...) for
    that layer's self-attention, or None.
    """
    E = p["encoder.embed_tokens.weight"]
    C = E.size(1)
    pad = src_tokens.eq(padding_idx)
    x = math.sqrt(C) * E[src_tokens] + sinusoidal_positions(src_tokens, padding_idx, C)
    x = x.masked_fill(pad.unsqueeze(-1), 0.0).transpose(0, 1)  # (S, B, C), padding zeroed
    states = [x]
    for l in range(1, num_layers(p, "encoder") + 1):
        pre = f"encoder.layers.{l - 1}."

        def attend(h, l=l, pre=pre):
            hooks = self_attention_hook(l, h, pad) if self_attention_hook else None
            return multihead_attention(p, pre + "self_attn.", h, h, num_heads, pad, **(hooks or {}))

        x = sublayer(p, pre + "self_attn_layer_norm", x, attend, pre_norm)
        x = sublayer(p, pre + "final_layer_norm", x, lambda h, pre=pre: feed_forward(p, pre, h), pre_norm)
        states.append(x)
    out = x
    if "encoder.layer_norm.weight" in p:
        out = layer_norm(x, p["encoder.layer_norm.weight"], p["encoder.layer_norm.bias"])
    return {"states": states, "out": out, "padding_mask": pad}


def transformer_decoder(
    p: Params,
    prev_tokens: Tensor,
    encoder: Dict[str, object],
    padding_idx: int,
    num_heads: int,
    pre_norm: bool = False,
    self_attention_hook: Optional[Callable] = None,
    layer_input_hook: Optional[Callable] = None,
) -> Tensor:
    """The decoder and its output projection: logits (B, T, V).

    ``self_attention_hook(l, x, padding_mask)`` as for the encoder (causal self-attention);
    ``layer_input_hook(l, x) -> x`` rewrites the input of decoder layer l (1-based)
    before the layer's own computation."""
    E = p["decoder.embed_tokens.weight"]
    C = E.size(1)
    pad = prev_tokens.eq(padding_idx)
    x = math.sqrt(C) * E[prev_tokens] + sinusoidal_positions(prev_tokens, padding_idx, C)
    x = x.transpose(0, 1)  # (T, B, C)
    enc_out, enc_pad = encoder["out"], encoder["padding_mask"]
    for l in range(1, num_layers(p, "decoder") + 1):
        pre = f"decoder.layers.{l - 1}."
        if layer_input_hook is not None:
            x = layer_input_hook(l, x)

        def self_attend(h, l=l, pre=pre):
            hooks = self_attention_hook(l, h, pad) if self_attention_hook else None
            return multihead_attention(p, pre + "self_attn.", h, h, num_heads, pad, causal=True, **(hooks or {}))

        x = sublayer(p, pre + "self_attn_layer_norm", x, self_attend, pre_norm)
        x = sublayer(
            p, pre + "encoder_attn_layer_norm", x,
            lambda h, pre=pre: multihead_attention(p, pre + "encoder_attn.", h, enc_out, num_heads, enc_pad),
            pre_norm,
        )
        x = sublayer(p, pre + "final_layer_norm", x, lambda h, pre=pre: feed_forward(p, pre, h), pre_norm)
    if "decoder.layer_norm.weight" in p:
        x = layer_norm(x, p["decoder.layer_norm.weight"], p["decoder.layer_norm.bias"])
    out_weight = p.get("decoder.output_projection.weight", E)
    return linear(x.transpose(0, 1), out_weight)


# ----------------------------------------------------------------------------- LSTM
def lstm_cell(x: Tensor, h: Tensor, c: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor):
    """Hochreiter & Schmidhuber LSTM step (gate order i, f, g, o as torch stores them):
    i, f, o = sigma(.), g = tanh(.) of W_i x + b_i + W_h h + b_h; c' = f c + i g; h' = o tanh(c')."""
    gates = linear(x, w_ih, b_ih) + linear(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, dim=-1)
    c = sigmoid(f) * c + sigmoid(i) * torch.tanh(g)
    return sigmoid(o) * torch.tanh(c), c


def bidirectional_lstm_encoder(p: Params, src_tokens: Tensor, padding_idx: int) -> Dict[str, object]:
    """fairseq's one-layer bidirectional LSTM encoder, per sentence over its real tokens
    (sources arrive left-padded; the states come back right-padded, as fairseq's encoder
    returns them). Returns states H (S, B, 2h) (padding rows are never attended), the
    final [forward; backward] hidden / cell states (B, 2h) and the padding mask (S, B)."""
    E = p["encoder.embed_tokens.weight"]
    B, S = src_tokens.shape
    hidden = p["encoder.lstm.weight_hh_l0"].size(1)
    states = torch.zeros(S, B, 2 * hidden, dtype=torch.float64)
    finals_h, finals_c = [], []
    for b in range(B):
        tokens = src_tokens[b][src_tokens[b].ne(padding_idx)]
        x = E[tokens]  # (n, C)
        n = x.size(0)
        per_direction = []
        for suffix, order in (("", range(n)), ("_reverse", reversed(range(n)))):
            w = [p[f"encoder.lstm.{name}_l0{suffix}"] for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            h = c = torch.zeros(hidden, dtype=torch.float64)
            outputs = [None] * n
            for t in order:
                h, c = lstm_cell(x[t], h, c, *w)
                outputs[t] = h
            per_direction.append((torch.stack(outputs), h, c))
        states[:n, b] = torch.cat([per_direction[0][0], per_direction[1][0]], dim=-1)
        finals_h.append(torch.cat([per_direction[0][1], per_direction[1][1]]))
        finals_c.append(torch.cat([per_direction[0][2], per_direction[1][2]]))
    lengths = src_tokens.ne(padding_idx).sum(dim=1)
    padding_mask = torch.arange(S).unsqueeze(1) >= lengths.unsqueeze(0)  # (S, B), right padding
    return {"states": states, "h": torch.stack(finals_h), "c": torch.stack(finals_c), "padding_mask": padding_mask}


def lstm_decoder(
    p: Params,
    prev_tokens: Tensor,
    encoder: Dict[str, object],
    attention: Callable[[Tensor, Tensor, Tensor], Tensor],
) -> Tensor:
    """fairseq's one-layer LSTM decoder with input feeding (Luong et al. Sec. 3.3):
    the step input is [y_{i-1} embedding; o_{i-1}] (o_0 = 0), the initial state the
    encoder's final [forward; backward] state (projected by a biased Linear when the
    sizes differ); o_i = attention(d_i, H, mask); then fairseq's output layers:
    Linear(hidden -> out_embed) when the sizes differ, and Linear(out_embed -> V)."""
    E = p["decoder.embed_tokens.weight"]
    h, c = encoder["h"], encoder["c"]
    if "decoder.encoder_hidden_proj.weight" in p:
        h = linear(h, p["decoder.encoder_hidden_proj.weight"], p["decoder.encoder_hidden_proj.bias"])
        c = linear(c, p["decoder.encoder_cell_proj.weight"], p["decoder.encoder_cell_proj.bias"])
    w = [p[f"decoder.layers.0.{name}"] for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    B, T = prev_tokens.shape
    feed = torch.zeros(B, h.size(-1), dtype=torch.float64)
    outs: List[Tensor] = []
    for i in range(T):
        h, c = lstm_cell(torch.cat([E[prev_tokens[:, i]], feed], dim=-1), h, c, *w)
        feed = attention(h, encoder["states"], encoder["padding_mask"])
        outs.append(feed)
    x = torch.stack(outs, dim=1)  # (B, T, hidden)
    if "decoder.additional_fc.weight" in p:
        x = linear(x, p["decoder.additional_fc.weight"], p["decoder.additional_fc.bias"])
    if "decoder.fc_out.weight" in p:
        return linear(x, p["decoder.fc_out.weight"], p["decoder.fc_out.bias"])
    return linear(x, E)
