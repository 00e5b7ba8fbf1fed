"""Where the key gate cannot vary over the keys (no gate, or gates frozen at a V = 0 start), an
encoder's sentence-wide context term on the key side, lambda_K c U_K, is the same vector for every
key of a sentence: Q^_i . lambda_K c U_K shifts all of query i's logits alike, the softmax ignores
it, and U_K's sentence-wide rows get no gradient. The model says so at build time (a warning: the
equations are the paper's), and only then. The gradients below are computed, not assumed."""
import logging

import pytest
import torch

from tests.model_checks import build_model, decoder_logits, random_batch

D = 16


def _options(*extra):
    return ["--arch", "transformer_context_aware", "--encoder-embed-dim", str(D),
            "--encoder-ffn-embed-dim", "24", "--encoder-layers", "2", "--encoder-attention-heads", "4",
            "--decoder-embed-dim", str(D), "--decoder-ffn-embed-dim", "24", "--decoder-layers", "2",
            "--decoder-attention-heads", "4", "--decoder-context", "none", "--dropout", "0", *extra]


def _key_rows_gradient(model):
    """Per encoder layer: the norm of the gradient of global_proj's key rows and of all its rows,
    after a backward pass through the model's loss on a padded batch, in float64 with every
    context parameter (U, V) given random nonzero values first."""
    model = model.double().train()
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for layer in model.encoder.layers:
            contextualizer = layer.self_attn.contextualizer
            for name, parameter in contextualizer.named_parameters():
                if name.endswith("_proj.weight"):
                    parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64) * 0.3)
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 5, 3), (4, 6, 2))
    logits = decoder_logits(model, src_tokens, src_lengths, prev)
    logits.log_softmax(-1).sum().neg().backward()
    out = []
    for layer in model.encoder.layers:
        contextualizer = layer.self_attn.contextualizer
        grad = contextualizer.global_proj.weight.grad
        rows = grad[contextualizer.targets.index("key") * D:][:D]
        out.append((float(rows.norm()), float(grad.norm())))
    return out


INERT = {
    # the paper's footnote-1 ablation with a global context on the keys
    "no gate, global, key": ["--encoder-context", "global", "--context-apply", "key", "--no-context-gate"],
    "no gate, deep_global, both": ["--encoder-context", "deep_global", "--context-apply", "both",
                                   "--no-context-gate"],
    # the initialisation study's arms 22 / 27: V = 0 and frozen, lambda_K = 1/2 throughout
    "frozen V = 0 gates, deep_global+deep, key": ["--encoder-context", "deep_global+deep", "--context-apply", "key",
                                                  "--context-init", "gate_half_zero_context",
                                                  "--freeze-context-gates"],
    "frozen V = 0 gates with a bias, global, both": ["--encoder-context", "global", "--context-apply", "both",
                                                     "--context-init", "gate_half", "--freeze-context-gates",
                                                     "--context-gate-bias", "-1"],
}
LIVE = {
    "the default (gates trained)": ["--encoder-context", "deep_global+deep", "--context-apply", "both"],
    "frozen gates with random V": ["--encoder-context", "global", "--context-apply", "key", "--context-init",
                                   "glorot", "--freeze-context-gates"],
}
SILENT_OTHERWISE = {
    "query side only": ["--encoder-context", "global", "--context-apply", "query", "--no-context-gate"],
    "deep context only": ["--encoder-context", "deep", "--context-apply", "key", "--no-context-gate"],
    # nothing of U trained, so nothing is wasted
    "U frozen, no gate": ["--encoder-context", "global", "--context-apply", "key", "--no-context-gate",
                          "--freeze-context"],
    "U and V = 0 gates frozen": ["--encoder-context", "global", "--context-apply", "key", "--context-init",
                                 "gate_half_zero_context", "--freeze-context-gates", "--freeze-context-projection"],
}


def _warnings(caplog, options):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fairseq_ctx.models.transformer_context_aware"):
        model, _ = build_model(_options(*options))
    return model, [r.getMessage() for r in caplog.records if "get no gradient" in r.getMessage()]


@pytest.mark.parametrize("case", list(INERT))
def test_inert_key_context_is_warned_of_and_gets_no_gradient(case, caplog):
    model, warnings = _warnings(caplog, INERT[case])
    assert len(warnings) == 1 and "global_proj" in warnings[0]
    gradients = _key_rows_gradient(model)
    assert all(key_rows < 1e-12 for key_rows, _ in gradients)
    if "both" in case:  # the query rows of the same projection do train
        assert all(all_rows > 1e-6 for _, all_rows in gradients)


@pytest.mark.parametrize("case", list(LIVE))
def test_live_key_context_gets_a_gradient_and_no_warning(case, caplog):
    model, warnings = _warnings(caplog, LIVE[case])
    assert warnings == []
    if case.startswith("the default"):  # V starts at 0 (lambda = 1/2 everywhere): give the gate a slope
        with torch.no_grad():
            for layer in model.encoder.layers:
                layer.self_attn.contextualizer.gate_input.normal_(0, 0.5)
    assert all(key_rows > 1e-6 for key_rows, _ in _key_rows_gradient(model))


@pytest.mark.parametrize("case", list(SILENT_OTHERWISE))
def test_no_warning_where_no_trained_key_rows_are_inert(case, caplog):
    _, warnings = _warnings(caplog, SILENT_OTHERWISE[case])
    assert warnings == []
