"""The initialisation study's configs (fairseq_ctx/configs/init_study/, issue 15): every arm
parses and builds with the dims of 00-transformer.args, the mechanisms are configured as in
the demo rows, each arm differs from its family's paper config in exactly its one option,
and fairseq-ctx-quality-compare pairs every arm with the stock transformer."""
import glob
import os

import pytest
import torch

from fairseq_ctx import quality_compare as qc
from fairseq_ctx.paths import CONFIGS
from tests.model_checks import build_model, parse_train_args

STUDY = os.path.join(CONFIGS, "init_study")
DEMO = os.path.join(CONFIGS, "demo")


def configs():
    return {os.path.basename(p)[:-len(".args")]: qc.read_args_file(p)
            for p in sorted(glob.glob(os.path.join(STUDY, "*.args")))}


# arm -> (the family's paper config in the study, the demo row it must match, its own option)
ARMS = {
    "01-context_aware-glorot": ("01-context_aware-glorot", "01-transformer_context_aware", ["--context-init", "glorot"]),
    "02-context_aware-gate_half": ("01-context_aware-glorot", "01-transformer_context_aware", ["--context-init", "gate_half"]),
    "03-context_aware-matched": ("01-context_aware-glorot", "01-transformer_context_aware", ["--context-init", "matched"]),
    "04-context_aware-zero_context": ("01-context_aware-glorot", "01-transformer_context_aware", ["--context-init", "zero_context"]),
    "11-context_aware-gate_half_matched": ("01-context_aware-glorot", "01-transformer_context_aware",
                                           ["--context-init", "gate_half_matched"]),
    # not in the paper: gate_half (02) plus a bias inside Eq. 6's sigmoid (gates start at ~0.018)
    "12-context_aware-gate_bias": ("01-context_aware-glorot", "01-transformer_context_aware",
                                   ["--context-init", "gate_half", "--context-gate-bias", "-4"]),
    # not in the paper: gate_half (02) plus dropout on C U (regularises the added projections only)
    "14-context_aware-context_dropout": ("01-context_aware-glorot", "01-transformer_context_aware",
                                         ["--context-init", "gate_half", "--context-dropout", "0.3"]),
    # the paper's deep context alone (Table 1), gate_half: no context in layer 1, no global part in layers 2-3
    "15-context_aware-deep_only": ("01-context_aware-glorot", "01-transformer_context_aware",
                                   ["--encoder-context", "deep", "--context-init", "gate_half"]),
    # the footnote-1 ablation (no gate: Q^ = Q + C U for the whole run, an architecture change,
    # not only a start) with U as matched: a context term at the start without 02's halving of
    # Q and K, but also with no gate to switch the context off later
    "17-context_aware-no_gate_matched": ("01-context_aware-glorot", "01-transformer_context_aware",
                                         ["--no-context-gate", "--context-init", "matched"]),
    # gate_half's start without its context term (V = 0, U = 0: Q and K halved, C U = 0): 02 - 18
    # is 02's starting context term alone (the same gates, slope and parameters)
    "18-context_aware-gate_half_zero_context": ("01-context_aware-glorot", "01-transformer_context_aware",
                                                ["--context-init", "gate_half_zero_context"]),
    # 12's learned gate bias started at 0 instead of -4 (V = 0: every gate starts at 0.5 as in 02, every
    # tensor as in 02 at the seed): 20 - 02 is the bias parameter alone, 20 - 12 the gates' starting level
    "20-context_aware-gate_half_bias0": ("01-context_aware-glorot", "01-transformer_context_aware",
                                         ["--context-init", "gate_half", "--context-gate-bias", "0"]),
    # 18 with nothing the context adds trained (gates fixed at 0.5, U = 0 throughout): the stock
    # transformer with the encoder self-attention logits times 1/4 for the whole run; 19 - 00 is
    # what that scaling does, 18 - 19 what 18's learned gates and context add
    "19-context_aware-frozen_half_zero_context": ("01-context_aware-glorot", "01-transformer_context_aware",
                                                  ["--context-init", "gate_half_zero_context", "--freeze-context"]),
    # 18 with the gates trained and U frozen at 0 (C U = 0 throughout; the gates, from V^H alone, scale
    # Q and K): 21 - 19 is what training the gates costs or gains, 18 - 21 what training U adds to it
    "21-context_aware-half_zero_context_gates_trained": (
        "01-context_aware-glorot", "01-transformer_context_aware",
        ["--context-init", "gate_half_zero_context", "--freeze-context-projection"]),
    # 18 with U trained from 0 and the gates frozen at 1/2 (Q^ = (Q + C U_Q) / 2, K^ likewise): 22 - 19
    # is what training the context term alone costs or gains
    "22-context_aware-half_zero_context_projection_trained": (
        "01-context_aware-glorot", "01-transformer_context_aware",
        ["--context-init", "gate_half_zero_context", "--freeze-context-gates"]),
    # 19 with the frozen gates at sigmoid(-0.8814) = 1 - 1/sqrt(2) instead of 1/2: the stock transformer
    # with the encoder self-attention logits times (1 - lambda)^2 = 1/2 for the whole run, about the logit
    # scale 21's trained gates reach (0.37-0.58): 24 - 19 is what that scale alone costs or gains
    "24-context_aware-frozen_scale_half": (
        "01-context_aware-glorot", "01-transformer_context_aware",
        ["--context-init", "gate_half_zero_context", "--freeze-context", "--context-gate-bias", "-0.8814"]),
    # 22 with no gradient through the context C into the layers it is read from (U still trained; at
    # the start, U = 0, that gradient is 0 anyway): 25 - 22 is what that gradient, once U has grown,
    # costs or gains in 22's training
    "25-context_aware-projection_trained_context_stop_gradient": (
        "01-context_aware-glorot", "01-transformer_context_aware",
        ["--context-init", "gate_half_zero_context", "--freeze-context-gates", "--context-stop-gradient"]),
    # 22 with the context on the query side only (Q^ = (Q + C U_Q) / 2, K^ = K): at the start (U = 0) the
    # logits are Q K^T / 2, 24's function and, under Adam, its steps in logit space; 26 - 24 is what
    # training the query-side context term costs or gains
    "26-context_aware-query_only_projection_trained": (
        "01-context_aware-glorot", "01-transformer_context_aware",
        ["--context-apply", "query", "--context-init", "gate_half_zero_context", "--freeze-context-gates"]),
    # 22 with the context on the key side only (Q^ = Q, K^ = (K + C U_K) / 2): 24's function at the start
    # as 26; 27 - 24 is what training the key-side context term costs or gains (in layer 1, global
    # context only, the key-side term adds the same to every key of a query: inert in the softmax)
    "27-context_aware-key_only_projection_trained": (
        "01-context_aware-glorot", "01-transformer_context_aware",
        ["--context-apply", "key", "--context-init", "gate_half_zero_context", "--freeze-context-gates"]),
    # 26 without the per-position (deep) part: the query-side context term is one vector per sentence in
    # every layer (layer l: [c^1, ..., c^l] U_Q, Eq. 10), so C U_Q . K_j is the same for every query of a
    # sentence, a bias over its keys; 24's function at the start as 26. 28 - 24 is what that sentence-wide
    # term costs or gains, 26 - 28 what the per-position deep part adds to it
    "28-context_aware-query_only_deep_global_projection_trained": (
        "01-context_aware-glorot", "01-transformer_context_aware",
        ["--encoder-context", "deep_global", "--context-apply", "query", "--context-init", "gate_half_zero_context",
         "--freeze-context-gates"]),
    # 28 with the term's direct gradient into U only: C a constant (as 25) and lambda C U_Q . K sending K
    # no gradient; the forward is 28's. 29 - 28 is what the term's gradient into the stock parameters (the
    # layers C is read from, W_K and the layer inputs through K) costs or gains; 29 - 24 what remains
    "29-context_aware-query_only_deep_global_projection_trained_gradient_into_u_only": (
        "01-context_aware-glorot", "01-transformer_context_aware",
        ["--encoder-context", "deep_global", "--context-apply", "query", "--context-init", "gate_half_zero_context",
         "--freeze-context-gates", "--context-stop-gradient", "--context-stop-key-gradient"]),
    # 28 with only the keys' share stopped (lambda C U_Q . K sends K no gradient; C's gradient kept): with
    # 29, 30 - 28 is what the term's gradient into K costs or gains, 29 - 30 what its gradient through C does
    "30-context_aware-query_only_deep_global_projection_trained_key_gradient_stopped": (
        "01-context_aware-glorot", "01-transformer_context_aware",
        ["--encoder-context", "deep_global", "--context-apply", "query", "--context-init", "gate_half_zero_context",
         "--freeze-context-gates", "--context-stop-key-gradient"]),
    # 26 (the whole query-side term: sentence-wide and per-position parts) with the keys' share stopped, as
    # 30 is for 28: 31 - 26 is what the query-side term's gradient into K costs or gains, 31 - 24 what remains
    "31-context_aware-query_only_projection_trained_key_gradient_stopped": (
        "01-context_aware-glorot", "01-transformer_context_aware",
        ["--context-apply", "query", "--context-init", "gate_half_zero_context", "--freeze-context-gates",
         "--context-stop-key-gradient"]),
    # 28 with the gradient through C stopped and the keys' share kept: the fourth cell of the 2 x 2 with 28,
    # 29 and 30; 32 - 28 is what the term's gradient through C costs or gains with K's kept
    "32-context_aware-query_only_deep_global_projection_trained_context_stop_gradient": (
        "01-context_aware-glorot", "01-transformer_context_aware",
        ["--encoder-context", "deep_global", "--context-apply", "query", "--context-init", "gate_half_zero_context",
         "--freeze-context-gates", "--context-stop-gradient"]),
    "05-cross_agg-paper": ("05-cross_agg-paper", "08-transformer_cross_agg", []),
    "06-cross_agg-ramp": ("05-cross_agg-paper", "08-transformer_cross_agg", ["--routing-ramp-updates", "200"]),
    "07-cross_agg-iters1": ("05-cross_agg-paper", "08-transformer_cross_agg", ["--routing-iters", "1"]),
    "08-cross_agg-stop_gradient": ("05-cross_agg-paper", "08-transformer_cross_agg", ["--routing-stop-gradient"]),
    # the gradient through the routing stopped for the first 800 updates only (the early cost)
    "23-cross_agg-stop_gradient_first800": ("05-cross_agg-paper", "08-transformer_cross_agg",
                                            ["--routing-stop-gradient-updates", "800"]),
    "09-sentential-paper": ("09-sentential-paper", "07-transformer_sentential", []),  # default g0: after dropout
    "10-sentential-g0_no_dropout": ("09-sentential-paper", "07-transformer_sentential", ["--sentential-g0", "no_dropout"]),
    # the capacity control: the transformer with 02's added parameter count as extra encoder FFN units
    "16-transformer-extra_ffn": ("00-transformer", "00-transformer",
                                 ["--arch", "transformer_extra_ffn", "--encoder-extra-ffn-units", "384"]),
}


def options(args):
    """{option: value tuple} of a flat option list (a flag has an empty tuple)."""
    out, key = {}, None
    for word in args:
        if word.startswith("--"):
            key = word
            out[key] = ()
        else:
            out[key] = out[key] + (word,)
    return out


def test_the_study_has_the_baseline_and_every_arm():
    assert sorted(configs()) == sorted(["00-transformer", *ARMS])


def test_every_arm_is_paired_with_the_stock_transformer():
    study = configs()
    baselines = qc.assign_baselines(study)
    assert baselines.pop("00-transformer") is None
    assert set(baselines.values()) == {"00-transformer"}


@pytest.mark.parametrize("arm", list(ARMS))
def test_arm_is_its_demo_row_plus_its_own_option(arm):
    study = configs()
    paper, demo_row, own = ARMS[arm]
    arm_options, paper_options = options(study[arm]), options(study[paper])
    demo_options = options(qc.read_args_file(os.path.join(DEMO, demo_row + ".args")))
    own_options = options(own)
    # the mechanism's settings and the dims are the demo row's; only the arm's option is
    # added (or, for --routing-iters 1, changed)
    without_own = lambda opts: {k: v for k, v in opts.items() if k not in own_options}
    assert without_own(arm_options) == without_own(demo_options)
    for key, value in own_options.items():
        assert arm_options[key] == value
    # and it differs from the family's paper config in that option only
    differing = {k for k in set(arm_options) | set(paper_options) if arm_options.get(k) != paper_options.get(k)}
    assert differing <= set(own_options)
    # the dims of the baseline
    dims = {k: v for k, v in options(study["00-transformer"]).items() if k != "--arch"}
    assert all(arm_options[k] == v for k, v in dims.items())


# arms built on another arm: (that arm, the one option this arm adds)
DERIVED = {
    "29-context_aware-query_only_deep_global_projection_trained_gradient_into_u_only": (
        "28-context_aware-query_only_deep_global_projection_trained",
        ["--context-stop-gradient", "--context-stop-key-gradient"]),
    "30-context_aware-query_only_deep_global_projection_trained_key_gradient_stopped": (
        "28-context_aware-query_only_deep_global_projection_trained", ["--context-stop-key-gradient"]),
    "31-context_aware-query_only_projection_trained_key_gradient_stopped": (
        "26-context_aware-query_only_projection_trained", ["--context-stop-key-gradient"]),
    "32-context_aware-query_only_deep_global_projection_trained_context_stop_gradient": (
        "28-context_aware-query_only_deep_global_projection_trained", ["--context-stop-gradient"]),
}


@pytest.mark.parametrize("arm", list(DERIVED))
def test_arm_is_the_arm_it_builds_on_plus_its_own_options(arm):
    study = configs()
    parent, own = DERIVED[arm]
    assert options(study[arm]) == {**options(study[parent]), **options(own)}
    assert not set(options(own)) & set(options(study[parent]))


@pytest.mark.parametrize("name", sorted(["00-transformer", *ARMS]))
def test_config_builds(name):
    args = configs()[name]
    model, _ = build_model(args, vocab_size=30)
    parsed = parse_train_args(args)
    if "cross_agg" in name:
        routers = [m for m in model.modules() if hasattr(m, "ramp_updates")]
        assert len(routers) == 3
        assert {(r.iters, r.ramp_updates, r.stop_gradient, r.stop_gradient_updates) for r in routers} == {
            (parsed.routing_iters, parsed.routing_ramp_updates, parsed.routing_stop_gradient,
             parsed.routing_stop_gradient_updates)}
    if "sentential" in name:
        assert model.encoder.g0_without_dropout == (parsed.sentential_g0 == "no_dropout")
    if "context_aware" in name:
        biases = [layer.self_attn.contextualizer.gate_bias for layer in model.encoder.layers
                  if layer.self_attn.contextualizer is not None]
        if parsed.context_gate_bias is None:
            assert all(b is None for b in biases)
        else:
            assert all(torch.equal(b, torch.full((2,), parsed.context_gate_bias)) for b in biases)
    if "deep_only" in name:
        contextualizers = [layer.self_attn.contextualizer for layer in model.encoder.layers]
        assert contextualizers[0] is None  # layer 1: stock self-attention
        d = 128
        assert all(c is not None and c.global_proj is None and c.deep_proj.in_features == i * d
                   for i, c in enumerate(contextualizers[1:], start=1))
    if "deep_global_projection" in name:
        # every layer: the deep-global context alone (Eq. 10), one vector per sentence, no deep part
        d = 128
        assert all(c is not None and c.deep_proj is None and c.global_proj.in_features == i * d
                   for i, c in enumerate((layer.self_attn.contextualizer for layer in model.encoder.layers), start=1))
    if "context_dropout" in name:
        rates = {layer.self_attn.contextualizer.context_dropout for layer in model.encoder.layers
                 if layer.self_attn.contextualizer is not None}
        assert rates == {parsed.context_dropout} and parsed.context_dropout > 0
    if "context_aware" in name and parsed.context_init == "gate_half_zero_context":  # 18, 19, 21, 22, 24-32
        # V = 0 and U = 0 in every contextualised layer: Q^ = (1 - lambda) Q, K^ = (1 - lambda) K at the
        # start, lambda = sigmoid(gate bias), 1/2 without one
        contextualizers = [layer.self_attn.contextualizer for layer in model.encoder.layers]
        assert all(c is not None and c.gated for c in contextualizers)
        assert all(torch.count_nonzero(p) == 0 for c in contextualizers
                   for n, p in c.named_parameters() if n != "gate_bias")
    if "frozen_scale_half" in name:
        # 19's frozen start with the gates at 1 - 1/sqrt(2): every logit of the contextualised layers
        # times (1 - lambda)^2 = 1/2 (to 1e-5), nothing the context adds trainable
        lam = torch.sigmoid(torch.tensor(parsed.context_gate_bias, dtype=torch.float64))
        assert abs(float((1 - lam) ** 2) - 0.5) < 1e-5
        assert {n for n, p in model.named_parameters() if not p.requires_grad} == {
            n for n, _ in model.named_parameters() if ".contextualizer." in n}
    if "query_only" in name or "key_only" in name:
        # at the same seed the stock tensors are 24's and C U = 0: the logits Q K^T / 2 (one side halved,
        # the other as it is) are 24's (Q / sqrt(2)) (K / sqrt(2))^T: the model computes 24's function at the start
        side = "query" if "query_only" in name else "key"
        assert parsed.context_apply == side
        assert all(c.targets == (side,) for c in (layer.self_attn.contextualizer for layer in model.encoder.layers))
        from tests.model_checks import decoder_logits, random_batch
        scale_half, _ = build_model(configs()["24-context_aware-frozen_scale_half"], vocab_size=30)
        src_tokens, src_lengths, prev, _ = random_batch(model, (7, 5, 3), (4, 6, 2))
        with torch.no_grad():
            ours = decoder_logits(model, src_tokens, src_lengths, prev)
            theirs = decoder_logits(scale_half, src_tokens, src_lengths, prev)
            stock, _ = build_model(configs()["00-transformer"], vocab_size=30)
            unscaled = decoder_logits(stock, src_tokens, src_lengths, prev)
        assert torch.allclose(ours, theirs, atol=1e-5)
        assert not torch.allclose(ours, unscaled, atol=1e-3)  # the halving matters at this start
    if "bias0" in name:
        # 02's tensors at the same seed, plus the bias at 0: the gates start at 0.5 as in 02
        from tests.test_controlled_start import build
        arm, _ = build(args, seed=5)
        gate_half, _ = build(configs()["02-context_aware-gate_half"], seed=5)
        assert sorted(set(arm) - set(gate_half)) == [f"encoder.layers.{i}.self_attn.contextualizer.gate_bias"
                                                     for i in range(3)]
        assert all(torch.equal(arm[k], gate_half[k]) for k in gate_half)
    if "frozen_half_zero_context" in name:
        # 18's start (V = 0, U = 0) with nothing the context adds trainable: the gates stay 0.5
        added = {n for n, _ in model.named_parameters() if ".contextualizer." in n}
        assert len(added) == 3 + 4 + 4  # layer 1: global U; layers 2-3: global and deep U; V^H, V^C
        assert all(torch.count_nonzero(p) == 0 for n, p in model.named_parameters() if n in added)
        assert {n for n, p in model.named_parameters() if not p.requires_grad} == added
    if "context_aware" in name:
        assert all(layer.self_attn.contextualizer.stop_context_gradient == parsed.context_stop_gradient
                   for layer in model.encoder.layers if layer.self_attn.contextualizer is not None)
        assert all(layer.self_attn.stop_key_gradient_of_context == parsed.context_stop_key_gradient
                   for layer in model.encoder.layers)
        assert parsed.context_stop_key_gradient == ("gradient_into_u_only" in name or "key_gradient_stopped" in name)
        assert parsed.context_stop_gradient == ("stop_gradient" in name or "gradient_into_u_only" in name)
    if "gates_trained" in name or "projection_trained" in name:
        # 18's start with one part of what the context adds frozen: 21 freezes U (5 tensors), 22 V^H, V^C (6)
        gates = {n for n, _ in model.named_parameters() if n.endswith(("gate_input", "gate_context"))}
        projections = {n for n, _ in model.named_parameters() if n.endswith("_proj.weight") and ".contextualizer." in n}
        # 28: one (deep-global) projection per layer, no deep one
        assert len(gates) == 6 and len(projections) == (3 if parsed.encoder_context == "deep_global" else 5)
        frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
        assert frozen == (projections if "gates_trained" in name else gates)
    if "no_gate" in name:
        # no gate vectors; U holds the numbers 02 draws at the same seed, rescaled from Glorot's
        # Var 2 / (fan_in + d) to 1 / (2 n fan_in) for n projections summed in the layer: the
        # context term starts at 0.41-0.71 of Glorot's C U, against 02's lambda C U = C U / 2
        from tests.test_controlled_start import build
        arm, _ = build(args, seed=5)
        gate_half, _ = build(configs()["02-context_aware-gate_half"], seed=5)
        d = 128
        for layer in model.encoder.layers:
            contextualizer = layer.self_attn.contextualizer
            assert not contextualizer.gated and contextualizer.gate_bias is None
            assert not any("gate" in n for n, _ in contextualizer.named_parameters())
        projections = [k for k in gate_half if "contextualizer" in k and "proj" in k]
        assert sorted(k for k in arm if "contextualizer" in k) == sorted(projections)
        assert len(projections) == 5  # layer 1: global only; layers 2-3: global and deep
        for key in projections:
            layer_prefix = key.split(".self_attn.")[0]
            n = sum(k.startswith(layer_prefix + ".") for k in projections)
            fan_in = gate_half[key].shape[1]
            scale = (1 / (2 * n * fan_in) / (2 / (fan_in + d))) ** 0.5
            assert 0.40 < scale < 0.71
            torch.testing.assert_close(arm[key], gate_half[key] * scale, rtol=1e-6, atol=0)
    if "extra_ffn" in name:
        # as many added parameters as the context-aware arm 02 adds (within 0.2 %), all of
        # them in the encoder FFNs' extra units
        stock, _ = build_model(configs()["00-transformer"], vocab_size=30)
        context_aware, _ = build_model(configs()["02-context_aware-gate_half"], vocab_size=30)
        count = lambda m: sum(p.numel() for p in m.parameters())
        added, added_by_02 = count(model) - count(stock), count(context_aware) - count(stock)
        assert added == 3 * parsed.encoder_extra_ffn_units * (128 + 1 + 128)
        assert abs(added - added_by_02) <= 0.002 * added_by_02, (added, added_by_02)
        assert {(layer.fc1.extra_units, layer.fc2.extra_units) for layer in model.encoder.layers} == {(384, 384)}



@pytest.mark.parametrize("name", sorted(ARMS))
def test_arm_starts_from_the_transformers_weights_at_the_same_seed(name):
    """The study's pairing, as its runs build the models (the arms' own args files, the
    study's dims): at one seed every tensor an arm shares with 00-transformer is 00's."""
    from tests.test_controlled_start import build, compare

    study = configs()
    stock, _ = build(study["00-transformer"], seed=3)
    arm, _ = build(study[name], seed=3)
    shared, identical, missing = compare(stock, arm)
    assert not missing and len(shared) == len(stock) > 50
    assert identical == shared, sorted(set(shared) - set(identical))
