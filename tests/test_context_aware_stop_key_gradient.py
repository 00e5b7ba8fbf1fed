"""--context-stop-key-gradient (init study arm 29, not in the paper): in Q^ K^T with
Q^ = (1 - lambda) Q + lambda C U_Q (Eq. 5-6, --context-apply query) the added term lambda C U_Q meets
the keys as constants, so K (W_K, the layer input through it) gets its gradient from (1 - lambda) Q
only; the forward is unchanged up to rounding. With --context-stop-gradient (C a constant) and gates
that do not read Q (frozen with V^H = 0, or none) the term's direct gradient reaches U only.

The reference is one self-attention layer written from Eq. 5-8 and 10 in float64 (c^l the mean of
the layer input over the sentence's tokens, Eq. 8, or over the prefix in the decoder, footnote 2),
against the module's outputs and every gradient, on both attention paths (fused and explicit
weights); encoder layers 1 and 2 (layer 2 also with deep_global+deep, whose per-position deep context
[H^1] has its own projection, Eq. 9) and the causal decoder layer 1; trained, frozen and no gates; the
gradient into layer 1's input (through c^1 and H^1) compared as well."""
import pytest
import torch
import torch.nn.functional as F

from tests.model_checks import build_model, decoder_logits, random_batch

D, HEADS = 16, 4


def _model(*extra, encoder_context="deep_global"):
    model, _ = build_model([
        "--arch", "transformer_context_aware", "--encoder-embed-dim", str(D), "--encoder-ffn-embed-dim", "24",
        "--encoder-layers", "2", "--encoder-attention-heads", str(HEADS), "--decoder-embed-dim", str(D),
        "--decoder-ffn-embed-dim", "24", "--decoder-layers", "2", "--decoder-attention-heads", str(HEADS),
        "--encoder-context", encoder_context, "--decoder-context", "deep_global", "--context-apply", "query",
        "--dropout", "0", *extra], seed=2)
    return model


def _mean_over_tokens(x, pad):
    keep = (~pad).t().unsqueeze(-1).to(x.dtype)  # T x B x 1
    return (x * keep).sum(0, keepdim=True) / keep.sum(0, keepdim=True)  # Eq. 8: 1 x B x d


def _reference(attention, x, pad, causal, lower_contexts, stop_context, stop_key, lower_inputs=None):
    """Eq. 5-8 / 10 for one self-attention layer with its queries contextualised by the deep-global
    context [c^1, ..., c^l] (``lower_contexts`` holds c^1 .. c^{l-1}); x: T x B x d, pad: B x T.
    Causal (decoder, footnote 2): c^l at step i is the mean of positions <= i, keys j > i masked.
    ``lower_inputs`` (deep_global+deep): the per-position deep context [H^1, ..., H^{l-1}] (Eq. 9),
    the inputs of the layers below, with its own projection, added to the deep-global one's."""
    T, B, d = x.shape
    hd = d // HEADS
    Q = F.linear(x, attention.q_proj.weight, attention.q_proj.bias)
    K = F.linear(x, attention.k_proj.weight, attention.k_proj.bias)
    V = F.linear(x, attention.v_proj.weight, attention.v_proj.bias)
    if causal:
        own = x.cumsum(0) / torch.arange(1, T + 1, dtype=x.dtype).view(T, 1, 1)
    else:
        own = _mean_over_tokens(x, pad)
    c = torch.cat([*(lower.expand_as(own) for lower in lower_contexts), own], dim=-1)  # Eq. 10
    if stop_context:
        c = c.detach()
    contextualizer = attention.contextualizer
    cu = F.linear(c, contextualizer.global_proj.weight).expand(T, B, d)  # C U_Q (Eq. 5)
    if lower_inputs is not None:
        deep = torch.cat(lower_inputs, dim=-1)
        cu = cu + F.linear(deep.detach() if stop_context else deep, contextualizer.deep_proj.weight)
    if contextualizer.gated:  # Eq. 6
        lam = torch.sigmoid(Q @ contextualizer.gate_input[0] + cu @ contextualizer.gate_context[0]).unsqueeze(-1)
        plain, added = (1 - lam) * Q, lam * cu
    else:  # footnote 1: Q^ = Q + C U_Q
        plain, added = Q, cu

    def heads(t):
        return t.reshape(T, B, HEADS, hd).permute(1, 2, 0, 3)

    keys_for_added = K.detach() if stop_key else K
    logits = (heads(plain) @ heads(K).transpose(-1, -2) + heads(added) @ heads(keys_for_added).transpose(-1, -2))
    logits = logits / hd ** 0.5
    logits = logits.masked_fill(pad[:, None, None, :], float("-inf"))
    if causal:
        logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    out = (logits.softmax(-1) @ heads(V)).permute(2, 0, 1, 3).reshape(T, B, d)  # Eq. 7
    return F.linear(out, attention.out_proj.weight, attention.out_proj.bias)


GATES = {"gates frozen at 1/2": ["--context-init", "gate_half_zero_context", "--freeze-context-gates"],
         "gates trained": ["--context-init", "glorot"],
         "no gate": ["--no-context-gate"]}
# (stack, layer index from 1, the encoder's context): encoder layers 1 and 2 (c^1 from below), layer 2 with
# the per-position deep part added (arm 31's deep_global+deep), the decoder's (causal) layer 1
WHERE = {"encoder layer 1": ("encoder", 1, "deep_global"), "encoder layer 2": ("encoder", 2, "deep_global"),
         "encoder layer 2, deep_global+deep": ("encoder", 2, "deep_global+deep"),
         "decoder layer 1": ("decoder", 1, "deep_global")}


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("gates", list(GATES))
@pytest.mark.parametrize("stop_context,stop_key", [(False, False), (False, True), (True, False), (True, True)])
def test_the_layer_and_its_gradients_match_the_equations(stop_context, stop_key, gates, where, need_weights):
    flags = (["--context-stop-gradient"] if stop_context else []) + (["--context-stop-key-gradient"] if stop_key else [])
    side, layer, encoder_context = WHERE[where]
    model = _model(*GATES[gates], *flags, encoder_context=encoder_context).double().train()
    stack = getattr(model, side)
    attention = stack.layers[layer - 1].self_attn
    assert attention.stop_key_gradient_of_context == stop_key
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():  # a trained-looking U (and V): the term and its gradient are not 0
        for parameter in attention.contextualizer.parameters():
            if parameter.requires_grad:
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64) * 0.5)
    T, B = 6, 3
    x = torch.randn(T, B, D, generator=generator, dtype=torch.float64)
    below = torch.randn(T, B, D, generator=generator, dtype=torch.float64)  # layer 1's input, for layer 2
    pad = torch.zeros(B, T, dtype=torch.bool)
    causal = side == "decoder"
    if not causal:
        pad[1, :2] = True  # left padding
        pad[2, :4] = True
    if encoder_context == "deep_global+deep":
        assert attention.contextualizer.deep_proj is not None

    def context_from_below():
        """c^1 (Eq. 8) and, with deep_global+deep, [H^1] (Eq. 9) from a fresh copy of layer 1's input
        that records its gradient: the term's gradient through C into the layer below is compared too."""
        source = below.clone().requires_grad_(True)
        lower = [_mean_over_tokens(source, pad)] if layer == 2 else []
        return source, lower, [source] if encoder_context == "deep_global+deep" else None
    attn_mask = torch.zeros(T, T, dtype=torch.float64).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1),
                                                                   float("-inf")) if causal else None
    weight = torch.randn(T, B, D, generator=generator, dtype=torch.float64)
    results = []
    for compute in ("module", "reference"):
        attention.zero_grad()
        inp = x.clone().requires_grad_(True)
        source, lower, lower_inputs = context_from_below()
        if compute == "module":
            stack.context_history.clear()
            if layer == 2:  # what layer 1 leaves for the layers above it (Eq. 9-10)
                stack.context_history.layer_inputs.append(source)
                stack.context_history.global_contexts.append(lower[0])
            out, _ = attention(inp, inp, inp, key_padding_mask=None if causal else pad, need_weights=need_weights,
                               attn_mask=attn_mask)
            stack.context_history.clear()
        else:
            out = _reference(attention, inp, pad, causal, lower, stop_context, stop_key, lower_inputs)
        (out * weight).sum().backward()
        grads = {n: p.grad.clone() for n, p in attention.named_parameters() if p.requires_grad}
        grads["(layer 1's input)"] = torch.zeros_like(below) if source.grad is None else source.grad.clone()
        results.append((out.detach(), inp.grad.clone(), grads))
    (out, x_grad, grads), (ref_out, ref_x_grad, ref_grads) = results
    # the explicit path takes fairseq's softmax, which computes in float32
    out_tol, grad_tol = (1e-6, 1e-6) if need_weights else (1e-12, 1e-10)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=out_tol)
    torch.testing.assert_close(x_grad, ref_x_grad, rtol=0, atol=grad_tol)
    assert grads.keys() == ref_grads.keys() and "k_proj.weight" in grads
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=0, atol=grad_tol, msg=name)
    if layer == 2 and not stop_context:  # the term's gradient through C reaches the layer below
        assert grads["(layer 1's input)"].abs().max() > 1e-3
    # the options matter at this size: the other reference (stop or not) is far from the module
    if stop_key or stop_context:
        attention.zero_grad()
        inp = x.clone().requires_grad_(True)
        source, lower, lower_inputs = context_from_below()
        (_reference(attention, inp, pad, causal, lower, False, False, lower_inputs) * weight).sum().backward()
        assert (inp.grad - x_grad).abs().max() > 1e-3
        if stop_context and layer == 2:
            assert (source.grad - grads["(layer 1's input)"]).abs().max() > 1e-3


@pytest.mark.parametrize("encoder_context", ["deep_global", "deep_global+deep"])
def test_the_flag_changes_the_keys_gradient_and_not_the_model_s_function(encoder_context):
    """Whole model, float32, train mode (the split form runs): the same logits at the same seed; W_K's
    gradient of the layers with a query-side term differs (so the reference above is not passing on a
    term of 0); with deep_global+deep (arm 31) as with deep_global (arms 29-30)."""
    logits, grads = {}, {}
    for stop_key in (False, True):
        model = _model("--context-init", "glorot", "--decoder-context", "none",
                       *(["--context-stop-key-gradient"] if stop_key else []), encoder_context=encoder_context).train()
        batch = random_batch(model, (7, 5, 3), (4, 6, 2))[:3]
        out = decoder_logits(model, *batch)
        out.log_softmax(-1)[..., 5].sum().backward()
        logits[stop_key] = out.detach()
        grads[stop_key] = {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.testing.assert_close(logits[True], logits[False], rtol=0, atol=1e-6)
    for layer in range(2):
        name = f"encoder.layers.{layer}.self_attn.k_proj.weight"
        assert (grads[True][name] - grads[False][name]).abs().max() > 1e-4
    top = "decoder.layers.1.fc2.weight"  # above the encoder: its gradient follows the forward alone
    torch.testing.assert_close(grads[True][top], grads[False][top], rtol=0, atol=1e-6)


@pytest.mark.parametrize("apply_to", ["key", "both"])
def test_it_needs_the_queries_alone_contextualised(apply_to):
    with pytest.raises(ValueError, match="--context-stop-key-gradient takes the query-side term's gradient out of K, "
                                         f"which needs --context-apply query \\(got {apply_to}"):
        build_model(["--arch", "transformer_context_aware", "--encoder-embed-dim", str(D), "--encoder-ffn-embed-dim",
                     "24", "--encoder-attention-heads", str(HEADS), "--decoder-embed-dim", str(D),
                     "--decoder-ffn-embed-dim", "24", "--decoder-attention-heads", str(HEADS),
                     "--context-apply", apply_to, "--context-stop-key-gradient"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_arm_29_trains_finite_in_half_precision(dtype):
    """The arm's options (init study 29) in bf16 / fp16 on the CPU: a training forward and backward
    stay finite, with U moved off 0 so that the split query carries a term."""
    model = _model("--context-init", "gate_half_zero_context", "--freeze-context-gates", "--context-stop-gradient",
                   "--context-stop-key-gradient").train()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("global_proj.weight"):
                parameter.normal_(0, 0.3)
    model = model.to(dtype)
    batch = random_batch(model, (7, 5, 3), (4, 6, 2))[:3]
    out = decoder_logits(model, *batch)
    out.float().log_softmax(-1)[..., 5].sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.encoder.layers[1].self_attn.k_proj.weight.grad.abs().max() > 0
