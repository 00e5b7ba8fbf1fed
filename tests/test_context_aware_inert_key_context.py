"""Where the key gate is fixed (no gate, or V^H_K = 0 and V^C_K = 0 frozen), an encoder's
sentence-wide context term on the key side, lambda_K c U_K, is the same vector for every key of a
sentence: Q^_i . lambda_K c U_K shifts all of query i's logits alike, the softmax ignores it, and
global_proj's key rows get no gradient. The model says so once, at its first training step, read
from the parameters. The rule is checked against gradients computed in float64 over a grid of
options, per layer (context dropout on a C U with a deep part makes layers 2-3 live in training)."""
import itertools
import logging

import pytest
import torch

from fairseq_ctx.models.transformer_context_aware import _key_rows_inert, inert_key_context
from tests.model_checks import build_model, decoder_logits, random_batch

D = 16
LOGGER = "fairseq_ctx.models.transformer_context_aware"


def _options(*extra, decoder_context="none"):
    return ["--arch", "transformer_context_aware", "--encoder-embed-dim", str(D),
            "--encoder-ffn-embed-dim", "24", "--encoder-layers", "3", "--encoder-attention-heads", "4",
            "--decoder-embed-dim", str(D), "--decoder-ffn-embed-dim", "24", "--decoder-layers", "2",
            "--decoder-attention-heads", "4", "--decoder-context", decoder_context, "--dropout", "0", *extra]


def _randomise_trained_context(model):
    """U random everywhere (it is trained); V random where it is trained (it will move), else as built."""
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for stack in (model.encoder, model.decoder):
            for layer in stack.layers:
                contextualizer = layer.self_attn.contextualizer
                if contextualizer is None:
                    continue
                for name, parameter in contextualizer.named_parameters():
                    if name.endswith("_proj.weight") or (name.startswith("gate_") and parameter.requires_grad):
                        parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)


def _key_row_gradients(model, stack="encoder"):
    """Per layer of ``stack`` with a global_proj: the norm of its key rows' gradient (float64, train
    mode with every dropout the options set, a left-padded batch), and of its query rows' (or None)."""
    model = model.double().train()
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 5, 3), (4, 6, 2))
    decoder_logits(model, src_tokens, src_lengths, prev).log_softmax(-1).sum().neg().backward()
    out = []
    for layer in getattr(model, stack).layers:
        c = layer.self_attn.contextualizer
        if c is None or c.global_proj is None:
            out.append(None)
            continue
        rows = c.global_proj.weight.grad.split(D, dim=0)
        grads = dict(zip(c.targets, (float(r.norm()) for r in rows)))
        out.append((grads.get("key"), grads.get("query")))
    return out


GATES = {
    "no gate": ["--no-context-gate"],
    "V = 0 gates frozen": ["--context-init", "gate_half", "--freeze-context-gates"],
    "V = 0 gates frozen, with a bias": ["--context-init", "gate_half_zero_context", "--freeze-context-gates",
                                        "--context-gate-bias", "-1"],
    "V = 0 gates frozen, matched U": ["--context-init", "gate_half_matched", "--freeze-context-gates"],
    "random V frozen": ["--context-init", "glorot", "--freeze-context-gates"],
    "gates trained": ["--context-init", "gate_half"],
}
# attention dropout acts after the softmax (a shift common to a query's logits still changes nothing)
GRID = list(itertools.product(["global", "deep_global", "deep_global+deep"], ["key", "both"], list(GATES),
                              ["0", "0.3"], ["0.3"]))


@pytest.mark.parametrize("context,apply_to,gate,context_dropout,attention_dropout", GRID)
def test_the_rule_matches_the_gradients_layer_by_layer(context, apply_to, gate, context_dropout, attention_dropout):
    model, _ = build_model(_options("--encoder-context", context, "--context-apply", apply_to, *GATES[gate],
                                    "--context-dropout", context_dropout, "--attention-dropout", attention_dropout))
    torch.manual_seed(0)  # fairseq seeds the global generator; the context dropout's stream reads it
    _randomise_trained_context(model)
    predicted = [_key_rows_inert(layer.self_attn) for layer in model.encoder.layers]
    for inert, (key_rows, query_rows) in zip(predicted, _key_row_gradients(model)):
        assert (key_rows < 1e-12) == inert, (key_rows, inert)
        if query_rows is not None:
            assert query_rows > 1e-6  # the same projection's query rows do train
    expected_somewhere = gate in ("no gate",) or (gate.startswith("V = 0") and gate != "gates trained")
    assert any(predicted) == expected_somewhere  # layer 1 (no deep part) is inert whenever the gate is constant
    assert (inert_key_context(model.encoder.layers) is None) == (not any(predicted))


def test_decoder_context_is_per_position_and_never_flagged():
    # the decoder's global context is a causal prefix mean: a different vector at every key
    model, _ = build_model(_options("--encoder-context", "deep", "--context-apply", "key", "--no-context-gate",
                                    decoder_context="global"))
    _randomise_trained_context(model)
    assert inert_key_context(model.encoder.layers) is None
    assert not any(_key_rows_inert(layer.self_attn) for layer in model.decoder.layers)
    assert all(key_rows > 1e-6 for key_rows, _ in _key_row_gradients(model, "decoder"))


@pytest.mark.parametrize("zero_side", ["key", "query"])
def test_the_key_rows_of_v_decide_not_the_query_rows(zero_side):
    # --context-apply both, gates frozen: V's key row zero (query row random) is inert; the reverse is live
    model, _ = build_model(_options("--encoder-context", "global", "--context-apply", "both",
                                    *GATES["V = 0 gates frozen"]))
    _randomise_trained_context(model)
    live_row = {"key": 0, "query": 1}[zero_side]  # rows: 0 query, 1 key
    with torch.no_grad():
        for layer in model.encoder.layers:
            for v in (layer.self_attn.contextualizer.gate_input, layer.self_attn.contextualizer.gate_context):
                v[live_row].normal_(0, 0.5)
    expected = zero_side == "key"
    assert [_key_rows_inert(layer.self_attn) for layer in model.encoder.layers] == [expected] * 3
    assert [key_rows < 1e-12 for key_rows, _ in _key_row_gradients(model)] == [expected] * 3


@pytest.mark.parametrize("freeze", [["--freeze-context"], ["--freeze-context-gates", "--freeze-context-projection"]])
def test_nothing_is_flagged_where_u_is_not_trained(freeze):
    model, _ = build_model(_options("--encoder-context", "global", "--context-apply", "key", "--context-init",
                                    "gate_half_zero_context", *freeze))
    assert inert_key_context(model.encoder.layers) is None


def test_gates_that_will_train_are_not_flagged_at_their_v_0_start():
    # gate_half (the default): V = 0 at the start, so lambda is 1/2 everywhere at the first step, but V trains
    model, _ = build_model(_options("--encoder-context", "deep_global+deep", "--context-apply", "both"))
    assert all(not layer.self_attn.contextualizer.gate_input.any() for layer in model.encoder.layers)
    assert inert_key_context(model.encoder.layers) is None


@pytest.mark.parametrize("loaded,expected", [
    ("gate_input", [False, False, False]),  # V^H != 0: lambda_K varies with K_j in every layer
    # V^C != 0 only: c U_K reaches the logits through the gate's scaling of K (and, in layers 2-3,
    # lambda_K varies with the deep part of C U_K)
    ("gate_context", [False, False, False]),
])
def test_read_from_the_weights_not_the_options(loaded, expected):
    # gate_half and frozen gates, but V loaded from a run where the gates were trained
    model, _ = build_model(_options("--encoder-context", "deep_global+deep", "--context-apply", "key",
                                    *GATES["V = 0 gates frozen"]))
    assert inert_key_context(model.encoder.layers) is not None
    _randomise_trained_context(model)
    with torch.no_grad():
        for layer in model.encoder.layers:
            getattr(layer.self_attn.contextualizer, loaded).normal_(0, 0.5)
    assert [_key_rows_inert(layer.self_attn) for layer in model.encoder.layers] == expected
    assert [key_rows < 1e-12 for key_rows, _ in _key_row_gradients(model)] == expected


def test_the_message_says_when_the_whole_encoder_context_does_nothing():
    only_keys, _ = build_model(_options("--encoder-context", "global", "--context-apply", "key", "--no-context-gate"))
    both, _ = build_model(_options("--encoder-context", "global", "--context-apply", "both", "--no-context-gate"))
    assert "changes its attention by at most" in inert_key_context(only_keys.encoder.layers)
    assert "changes its attention by at most" not in inert_key_context(both.encoder.layers)


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if "get no gradient" in r.getMessage()]


def test_warned_once_at_the_first_training_step_and_not_in_evaluation(caplog):
    options = _options("--encoder-context", "deep_global+deep", "--context-apply", "key", "--context-init",
                       "gate_half_zero_context", "--freeze-context-gates")
    src_tokens, src_lengths, prev, _ = None, None, None, None
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        model, _ = build_model(options)  # eval mode
        src_tokens, src_lengths, prev, _ = random_batch(model, (7, 5, 3), (4, 6, 2))
        assert _warnings(caplog) == []  # building (as fairseq-generate and the hub do) says nothing
        decoder_logits(model, src_tokens, src_lengths, prev)
        model.train()
        with torch.no_grad():
            decoder_logits(model, src_tokens, src_lengths, prev)
        assert _warnings(caplog) == []  # no step without gradients
        decoder_logits(model, src_tokens, src_lengths, prev)
        decoder_logits(model, src_tokens, src_lengths, prev)
    warnings = _warnings(caplog)
    assert len(warnings) == 1
    assert "encoder layer(s) 1, 2, 3" in warnings[0] and "key rows of global_proj" in warnings[0]
    # layer l's deep-global context is [c^1, ..., c^l]: d x (l d) key rows per layer
    assert f"{(1 + 2 + 3) * D * D:,} parameters" in warnings[0]


def test_only_rank_0_warns(caplog, monkeypatch):
    from fairseq.distributed import utils as distributed_utils
    monkeypatch.setattr(distributed_utils, "get_global_rank", lambda: 1)
    model, _ = build_model(_options("--encoder-context", "global", "--context-apply", "key", "--no-context-gate"))
    src_tokens, src_lengths, prev, _ = random_batch(model, (7, 5, 3), (4, 6, 2))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        model.train()
        decoder_logits(model, src_tokens, src_lengths, prev)
    assert _warnings(caplog) == []
