"""Controlled starts (issue 15, item 1): at the same --seed, every tensor an architecture
shares with its stock fairseq baseline (same state-dict name and shape) is bit-identical
to the baseline's, for every option; what the architecture adds is drawn from its own
stream derived from the seed (deterministic, different for another seed), and building
the model leaves the global RNG where the baseline leaves it.

The models are built as fairseq-train builds them: options parsed with fairseq's own
parser, the seed set, then ``task.build_model``; the last test goes through
``fairseq_cli.train.cli_main`` itself (stopping where the Trainer would be created).
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import fairseq_ctx.models  # noqa: F401  (registers the architectures)
from fairseq.tasks.translation import TranslationTask
from fairseq_ctx.reproduce import train as train_mod
from tests.model_checks import make_dictionary, parse_known_train_args, parse_train_args

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(ROOT, "fairseq_ctx")
VOCAB = 30

# 2 + 2 layers, tiny dims; the stock baseline gets exactly the same options
TRANSFORMER_DIMS = [
    "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "24", "--encoder-layers", "2",
    "--encoder-attention-heads", "4", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "24",
    "--decoder-layers", "2", "--decoder-attention-heads", "4",
]  # fmt: skip
LSTM_DIMS = [
    "--encoder-embed-dim", "8", "--encoder-hidden-size", "6", "--encoder-bidirectional",
    "--encoder-layers", "2", "--decoder-layers", "2",
    "--decoder-embed-dim", "8", "--decoder-hidden-size", "10", "--decoder-out-embed-dim", "8",
]  # fmt: skip


def ctx(encoder, decoder, *extra):
    return ["--encoder-context", encoder, "--decoder-context", decoder, *extra]


# (arch, options); every option of every family appears at least once
VARIANTS = {
    # transformer_context_aware: every context type on each side, --context-apply, the gate
    "ca-enc-global": ("transformer_context_aware", ctx("global", "none", "--context-apply", "both")),
    "ca-enc-deep-query": ("transformer_context_aware", ctx("deep", "none", "--context-apply", "query")),
    "ca-enc-deep_global-key": ("transformer_context_aware", ctx("deep_global", "none", "--context-apply", "key")),
    "ca-enc-default": ("transformer_context_aware", []),  # deep_global+deep, encoder, both, gated
    "ca-enc-nogate": ("transformer_context_aware", ctx("deep_global+deep", "none", "--no-context-gate")),
    "ca-dec-global": ("transformer_context_aware", ctx("none", "global")),
    "ca-init-gate_half": ("transformer_context_aware", ctx("deep_global+deep", "global", "--context-init", "gate_half")),
    "ca-init-matched": ("transformer_context_aware", ctx("deep_global+deep", "deep", "--context-init", "matched")),
    "ca-init-zero_context": ("transformer_context_aware", ctx("deep_global", "none", "--context-init", "zero_context")),
    "ca-init-gate_half_zero_context": ("transformer_context_aware",
                                       ctx("deep_global+deep", "global", "--context-init", "gate_half_zero_context")),
    "ca-init-gate_half_matched": ("transformer_context_aware",
                                  ctx("deep", "deep_global+deep", "--context-init", "gate_half_matched")),
    "ca-init-gate_bias": ("transformer_context_aware",  # not in the paper: a constant bias, no draw
                          ctx("deep_global+deep", "deep", "--context-init", "gate_half", "--context-gate-bias", "-4")),
    "ca-context_dropout": ("transformer_context_aware",  # not in the paper: no parameter, no draw
                           ctx("deep_global+deep", "global", "--context-dropout", "0.2")),
    "ca-dec-deep": ("transformer_context_aware", ctx("none", "deep", "--context-apply", "key")),
    "ca-dec-deep_global+deep": ("transformer_context_aware", ctx("none", "deep_global+deep")),
    "ca-both-sides": ("transformer_context_aware", ctx("deep", "deep_global", "--context-apply", "query")),
    "ca-both-sides-shared-emb": (
        "transformer_context_aware",
        ctx("global", "deep_global+deep", "--share-all-embeddings", "--decoder-normalize-before"),
    ),
    # transformer_cross_agg: --routing-side, vertical / horizontal, --routing-init, iterations
    "xa-encoder-vh-zero": ("transformer_cross_agg", ["--routing-side", "encoder"]),
    "xa-decoder-h-self": (
        "transformer_cross_agg",
        ["--routing-side", "decoder", "--no-routing-vertical", "--routing-init", "self"],
    ),
    "xa-both-v": ("transformer_cross_agg", ["--routing-side", "both", "--no-routing-horizontal"]),
    "xa-both-vh-self": (
        "transformer_cross_agg",
        ["--routing-side", "both", "--routing-init", "self", "--routing-iters", "2"],
    ),
    # initialisation-study arms: the ramp (its update counter is a buffer), stop-gradient
    "xa-encoder-vh-ramp": ("transformer_cross_agg", ["--routing-side", "encoder", "--routing-ramp-updates", "200"]),
    "xa-both-v-stop_gradient": (
        "transformer_cross_agg",
        ["--routing-side", "both", "--no-routing-horizontal", "--routing-stop-gradient"],
    ),
    "xa-decoder-h-ramp-stop_gradient": (
        "transformer_cross_agg",
        ["--routing-side", "decoder", "--no-routing-vertical", "--routing-ramp-updates", "5",
         "--routing-stop-gradient"],
    ),
    # transformer_sentential: GLOBAL mean / max / attention x DEEP none / rnn / tam
    "st-mean-none": ("transformer_sentential", ["--sentential-global", "mean", "--sentential-deep", "none"]),
    "st-max-rnn": ("transformer_sentential", ["--sentential-global", "max", "--sentential-deep", "rnn"]),
    "st-attention-tam": ("transformer_sentential", ["--sentential-global", "attention", "--sentential-deep", "tam"]),
    "st-attention-none": ("transformer_sentential", ["--sentential-global", "attention", "--sentential-deep", "none"]),
    "st-default-prenorm": (
        "transformer_sentential",
        ["--decoder-normalize-before", "--encoder-normalize-before", "--share-decoder-input-output-embed"],
    ),  # attention + rnn
    "st-mean-tam": ("transformer_sentential", ["--sentential-global", "mean", "--sentential-deep", "tam"]),
    "st-attention-rnn-g0_no_dropout": ("transformer_sentential", ["--sentential-g0", "no_dropout"]),
    "st-attention-tam-g0_no_dropout": (
        "transformer_sentential",
        ["--sentential-global", "attention", "--sentential-deep", "tam", "--sentential-g0", "no_dropout"],
    ),
    # lstm_multihop: heads, hops, dependent / independent, learned v_b
    "mh-1x1": ("lstm_multihop", ["--attention-heads", "1", "--attention-hops", "1"]),
    "mh-2x2-dependent": ("lstm_multihop", ["--attention-heads", "2", "--attention-hops", "2"]),
    "mh-3x3-independent": (
        "lstm_multihop",
        ["--attention-heads", "3", "--attention-hops", "3", "--hop-mode", "independent"],
    ),
    "mh-1x2-learned-vb": (
        "lstm_multihop",
        ["--attention-heads", "1", "--attention-hops", "2", "--hop-learned-score-vector"],
    ),
    "mh-2x1-shared-emb": (
        "lstm_multihop",
        ["--attention-heads", "2", "--attention-hops", "1", "--share-decoder-input-output-embed"],
    ),
    # transformer_extra_ffn (the study's capacity control): extra encoder FFN units
    "xf-24": ("transformer_extra_ffn", ["--encoder-extra-ffn-units", "24"]),
    "xf-1-prenorm-shared-emb": (
        "transformer_extra_ffn",
        ["--encoder-extra-ffn-units", "1", "--encoder-normalize-before", "--share-all-embeddings"],
    ),
}

# Shared tensors that legitimately differ in shape from the stock model's, so are added
# parameters: lstm_multihop's attention with N > 1 heads (W_a stacked over heads, W_o
# widened by D per head). Everything else a stock tensor names must be shared.
MULTIHOP_RESHAPED = {"decoder.attention.input_proj.weight", "decoder.attention.output_proj.weight"}


def stock_arch(arch):
    return "lstm" if arch == "lstm_multihop" else "transformer"


def stock_options(arch, options):
    """The baseline gets the dims and every stock option the variant uses."""
    dims = LSTM_DIMS if arch == "lstm_multihop" else TRANSFORMER_DIMS
    stock = [o for o in ("--share-all-embeddings", "--share-decoder-input-output-embed",
                         "--decoder-normalize-before", "--encoder-normalize-before") if o in options]
    if arch == "lstm_multihop":
        stock += ["--decoder-attention", "1"]  # the lstm default, which lstm_multihop requires
    return ["--arch", stock_arch(arch), *dims, *stock]


def arch_options(arch, options):
    dims = LSTM_DIMS if arch == "lstm_multihop" else TRANSFORMER_DIMS
    return ["--arch", arch, *dims, *options]


def build(argv, seed, parse_known=False):
    """fairseq-train's order: parse, seed (utils.set_torch_seed = torch.manual_seed on
    CPU), set up the task, build the model. Returns (state dict, global RNG state after).
    ``parse_known``: the stock side of a config, whose mechanism options fairseq's parser drops."""
    args = parse_known_train_args(argv)[0] if parse_known else parse_train_args(argv)
    torch.manual_seed(seed)
    task = TranslationTask(args, make_dictionary(VOCAB), make_dictionary(VOCAB))
    model = task.build_model(args)
    return model.state_dict(), torch.get_rng_state()


def compare(stock_state, arch_state):
    """-> (shared names, identical names, names of stock tensors the arch lacks or reshapes)."""
    shared = [k for k, v in stock_state.items() if k in arch_state and arch_state[k].shape == v.shape]
    identical = [k for k in shared if torch.equal(stock_state[k], arch_state[k])]
    missing = sorted(set(stock_state) - set(shared))
    return shared, identical, missing


def added_names(stock_state, arch_state):
    return sorted(
        k for k, v in arch_state.items()
        if k not in stock_state or stock_state[k].shape != v.shape
    )


def heads(options):
    return int(options[options.index("--attention-heads") + 1]) if "--attention-heads" in options else 2


def is_constant(tensor):
    """Deterministic initialisations (zeros, ones, a fixed v_b) do not depend on the seed."""
    return tensor.numel() == 0 or bool((tensor == tensor.flatten()[0]).all())


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("seed", [1, 7])
def test_shared_tensors_are_bit_identical_to_stock(name, seed):
    arch, options = VARIANTS[name]
    stock_state, stock_rng = build(stock_options(arch, options), seed)
    arch_state, arch_rng = build(arch_options(arch, options), seed)
    shared, identical, missing = compare(stock_state, arch_state)

    # not vacuous: every stock tensor is shared (lstm_multihop: all but the reshaped
    # attention matrices when it has several heads)
    allowed_missing = MULTIHOP_RESHAPED if arch == "lstm_multihop" and heads(options) > 1 else set()
    assert set(missing) <= allowed_missing, f"stock tensors the {name} model lacks or reshapes: {missing}"
    assert len(shared) >= len(stock_state) - len(allowed_missing) > 10

    differing = [k for k in shared if k not in identical]
    assert not differing, (
        f"{name}: {len(identical)} of {len(shared)} shared tensors identical to stock "
        f"{stock_arch(arch)} at seed {seed}; first differing: {differing[:5]}"
    )
    # building the additions drew nothing from the global stream either
    assert torch.equal(stock_rng, arch_rng), f"{name}: global RNG state after the build differs from stock"


@pytest.mark.parametrize("name", list(VARIANTS))
def test_added_parameters_are_deterministic_under_the_seed(name):
    arch, options = VARIANTS[name]
    stock_state, _ = build(stock_options(arch, options), 1)
    first, _ = build(arch_options(arch, options), 1)
    again, _ = build(arch_options(arch, options), 1)
    other, _ = build(arch_options(arch, options), 2)
    added = added_names(stock_state, first)
    # one head, one hop: the stock attention, nothing added; horizontal routing alone
    # has no parameters (with --routing-ramp-updates: only the ramp's update counters)
    adds_nothing = name == "mh-1x1" or (arch == "transformer_cross_agg" and "--no-routing-vertical" in options)
    if "--routing-ramp-updates" in options:
        counters = [k for k in added if k.endswith(".cross_aggregation.num_updates")]
        assert counters and all(first[k].dtype == torch.long for k in counters), f"{name} adds {added}"
        added = [k for k in added if k not in counters] if adds_nothing else added
    assert bool(added) != adds_nothing, f"{name} adds {added}"
    for key in added:
        assert torch.equal(first[key], again[key]), f"{name}: {key} differs between two builds at one seed"
    random_init = [k for k in added if not is_constant(first[k])]
    for key in random_init:
        assert not torch.equal(first[key], other[key]), f"{name}: {key} does not depend on the seed"
    if arch == "transformer_cross_agg" or "gate_half_zero_context" in options:
        # W^v of Eq. 13 is zero-initialised; gate_half_zero_context zeroes U and V: nothing
        # random is added
        assert not random_init and all(not first[k].any() for k in added)
    elif not adds_nothing:
        assert random_init, f"{name}: no randomly initialised additions found"


# -- every shipped config (paper tables, demo rows, initialisation-study arms) -------------

CONFIGS = os.path.join(ROOT, "fairseq_ctx", "configs")
STOCK_OF = {"transformer_context_aware": "transformer", "transformer_cross_agg": "transformer",
            "transformer_sentential": "transformer", "lstm_multihop": "lstm",
            "transformer_context_aware_big": "transformer_vaswani_wmt_en_de_big",
            "transformer_cross_agg_big": "transformer_vaswani_wmt_en_de_big",
            "transformer_sentential_big": "transformer_vaswani_wmt_en_de_big",
            "transformer_extra_ffn": "transformer"}


OUR_FAMILIES = ("transformer_context_aware", "transformer_cross_agg", "transformer_sentential", "lstm_multihop",
                "transformer_extra_ffn")
# the options our four architectures add (what fairseq's stock parser must not know)
MECHANISM_OPTIONS = {
    "--encoder-context", "--decoder-context", "--context-apply", "--no-context-gate", "--context-init",
    "--context-gate-bias", "--context-dropout", "--freeze-context", "--freeze-context-gates",
    "--freeze-context-projection", "--context-stop-gradient", "--context-stop-key-gradient",
    "--routing-side", "--routing-vertical", "--no-routing-vertical", "--routing-horizontal", "--no-routing-horizontal",
    "--routing-init", "--routing-iters", "--routing-ramp-updates", "--routing-stop-gradient",
    "--routing-stop-gradient-updates",
    "--sentential-global", "--sentential-deep", "--sentential-g0",
    "--attention-heads", "--attention-hops", "--hop-mode", "--hop-learned-score-vector",
    "--encoder-extra-ffn-units",
}
# decided by the hardware SETTING, which fairseq-ctx-train / -reproduce put after the config
SETTING_KEYS = {"max_tokens", "max_tokens_valid", "update_freq", "batch_size", "batch_size_valid", "fp16", "bf16",
                "distributed_world_size"}
# the baseline each paper's architecture rows are compared with, by stock arch
PAPER_BASELINES = {
    "yang2019": {"transformer": "transformer_base.args", "transformer_vaswani_wmt_en_de_big": "transformer_big.args"},
    "wang2019": {"transformer": "transformer_base.args", "transformer_vaswani_wmt_en_de_big": "transformer_big.args"},
    "cao": {"transformer": "transformer_base.args"},
    "iida2019": {"lstm": "lstm.args"},
    "demo": {"transformer": "00-transformer.args", "lstm": "05-lstm.args"},
    "init_study": {"transformer": "00-transformer.args"},
}


def namespace_differences(arch_args, stock_args, ignore=()):
    a, b = vars(arch_args), vars(stock_args)
    return {k: (a[k], b[k]) for k in a.keys() & b.keys()
            if k not in ("arch", "_name", *ignore) and a[k] != b[k]}


def shipped_configs():
    """(relative path, model options) of every config that trains one of our architectures:
    the paper's train.args (shared embeddings etc.) + the row's own options."""
    found = []
    for paper in sorted(os.listdir(CONFIGS)):
        for name in sorted(os.listdir(os.path.join(CONFIGS, paper))):
            if not name.endswith(".args") or name == "train.args":
                continue
            words = train_mod.model_args(os.path.join(CONFIGS, paper, name))
            arch = train_mod.option_value(words, "--arch")
            if arch in STOCK_OF:
                found.append((f"{paper}/{name}", words))
            else:  # a stock baseline; a new arch of ours must be added to STOCK_OF, not skipped
                assert not arch.startswith(OUR_FAMILIES), f"{paper}/{name}: --arch {arch} is missing from STOCK_OF"
    return found


SHIPPED = shipped_configs()


def test_the_shipped_configs_are_found():
    papers = {path.split("/")[0] for path, _ in SHIPPED}
    assert {"yang2019", "wang2019", "cao", "iida2019", "demo", "init_study"} <= papers and len(SHIPPED) > 30


@pytest.mark.parametrize("path,words", SHIPPED, ids=[path for path, _ in SHIPPED])
def test_every_shipped_config_starts_from_its_stock_models_weights(path, words):
    """The configs a user trains (every option combination the papers' tables, the demo and
    the study use), at tiny dims: the stock side is the same options under the stock arch,
    with what fairseq's stock parser does not know left out (the added mechanism's options)."""
    arch = train_mod.option_value(words, "--arch")
    dims = LSTM_DIMS if arch == "lstm_multihop" else TRANSFORMER_DIMS
    arch_argv = [*words, *dims]
    stock_argv = [*words, "--arch", STOCK_OF[arch], *dims]
    if arch == "lstm_multihop":
        stock_argv += ["--decoder-attention", "1"]
    stock_args, left_out = parse_known_train_args(stock_argv)
    assert stock_args.arch == STOCK_OF[arch]
    # what the stock parser left out is the mechanism's options and nothing else, and every
    # option both models have is set alike (the *_big archs' dropout included)
    unknown = {w.split("=")[0] for w in left_out if w.startswith("--")}
    assert unknown <= MECHANISM_OPTIONS, f"{path}: options the stock parser does not know: {unknown - MECHANISM_OPTIONS}"
    assert not namespace_differences(parse_train_args(arch_argv), stock_args), path
    stock_state, stock_rng = build(stock_argv, 5, parse_known=True)
    arch_state, arch_rng = build(arch_argv, 5)
    shared, identical, missing = compare(stock_state, arch_state)
    allowed_missing = MULTIHOP_RESHAPED if arch == "lstm_multihop" and heads(words) > 1 else set()
    assert set(missing) <= allowed_missing, f"{path}: stock tensors the model lacks or reshapes: {missing}"
    assert len(shared) > 10
    differing = [k for k in shared if k not in identical]
    assert not differing, f"{path}: first shared tensors that differ from stock {STOCK_OF[arch]}: {differing[:5]}"
    assert torch.equal(stock_rng, arch_rng), f"{path}: global RNG state after the build differs from stock"


@pytest.mark.parametrize("path,words", SHIPPED, ids=[path for path, _ in SHIPPED])
def test_every_shipped_config_has_its_papers_baseline_model_apart_from_the_mechanism(path, words):
    """At the config's real dims (parsing only): every option the row shares with its paper's
    baseline file (transformer_base / _big, lstm.args, the demo's 00 / 05) is set alike, so a
    table compares the mechanism and nothing else (e.g. lstm_multihop's arch defaults differ
    from lstm's: the Iida baseline must spell the same dims out)."""
    paper = path.split("/")[0]
    arch = train_mod.option_value(words, "--arch")
    baseline_file = os.path.join(CONFIGS, paper, PAPER_BASELINES[paper][STOCK_OF[arch]])
    baseline = train_mod.model_args(baseline_file)
    assert train_mod.option_value(baseline, "--arch") == STOCK_OF[arch]
    if arch == "lstm_multihop":
        baseline += ["--decoder-attention", "1"]
    differences = namespace_differences(parse_train_args(words), parse_train_args(baseline), ignore=SETTING_KEYS)
    assert not differences, f"{path} vs {os.path.basename(baseline_file)}: {differences}"


def test_additions_do_not_depend_on_the_other_side():
    """Each addition has its own stream (named after the module): the decoder's
    additions are the same whether or not the encoder has some, and two layers'
    additions of the same shape differ."""
    dec_only, _ = build(arch_options("transformer_context_aware", ctx("none", "deep_global")), 3)
    both, _ = build(arch_options("transformer_context_aware", ctx("global", "deep_global")), 3)
    decoder_added = [k for k in dec_only if ".contextualizer." in k]
    assert decoder_added and all(k.startswith("decoder.") for k in decoder_added)
    for key in decoder_added:
        assert torch.equal(dec_only[key], both[key]), key
    # global context: one d x d block per layer, so the layers' matrices compare
    enc = [both[k] for k in both if k.startswith("encoder.") and k.endswith("contextualizer.global_proj.weight")]
    assert len(enc) == 2 and not torch.equal(enc[0], enc[1])


# -- through fairseq-train itself ---------------------------------------------------

CLI_DRIVER = textwrap.dedent(
    """
    import json, sys
    import torch
    import fairseq_cli.train as train

    class Built(Exception):
        pass

    def capture(cfg, task, model, criterion, *args, **kwargs):
        # fairseq-train has parsed the options, seeded, set up the task, built the model
        # and the criterion; the Trainer would come next
        torch.save({"state": dict(model.state_dict()), "rng": torch.get_rng_state()}, OUTPUT)
        raise Built

    train.Trainer = capture
    for OUTPUT, argv in json.loads(sys.argv[1]):
        sys.argv = ["fairseq-train", *argv]
        try:
            train.cli_main()
        except Built:
            continue
        raise SystemExit("fairseq-train did not reach the Trainer")
    """
)


def test_fairseq_train_cli_builds_stock_identical_starts(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for lang in ("src", "tgt"):
        make_dictionary(VOCAB).save(str(data / f"dict.{lang}.txt"))
    common = [str(data), "--user-dir", USER_DIR, "--task", "translation", "--source-lang", "src",
              "--target-lang", "tgt", "--cpu", "--disable-validation", "--optimizer", "adam",
              "--lr", "1e-3", "--max-tokens", "100", "--criterion", "cross_entropy", "--seed", "5",
              "--save-dir", str(tmp_path / "checkpoints")]  # fairseq probes it before building
    runs = {
        "transformer": stock_options("transformer_context_aware", []),
        "context_aware": arch_options("transformer_context_aware", ctx("deep_global+deep", "global")),
        "sentential": arch_options("transformer_sentential", ["--sentential-deep", "tam"]),
        "sentential_g0": arch_options("transformer_sentential", ["--sentential-g0", "no_dropout"]),
        "cross_agg": arch_options("transformer_cross_agg", ["--routing-ramp-updates", "200",
                                                            "--routing-stop-gradient"]),
        "lstm": stock_options("lstm_multihop", []),
        "multihop": arch_options("lstm_multihop", ["--attention-heads", "2", "--attention-hops", "2"]),
        "extra_ffn": arch_options("transformer_extra_ffn", ["--encoder-extra-ffn-units", "8"]),
    }
    plan = [(str(tmp_path / f"{name}.pt"), [*common, *argv]) for name, argv in runs.items()]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", CLI_DRIVER, json.dumps(plan)], capture_output=True,
                          text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    built = {name: torch.load(tmp_path / f"{name}.pt", weights_only=False) for name in runs}
    for arch, stock in (("context_aware", "transformer"), ("sentential", "transformer"),
                        ("sentential_g0", "transformer"), ("cross_agg", "transformer"), ("multihop", "lstm"),
                        ("extra_ffn", "transformer")):
        shared, identical, missing = compare(built[stock]["state"], built[arch]["state"])
        assert set(missing) <= MULTIHOP_RESHAPED
        assert len(shared) > 10 and identical == shared, (
            f"{arch}: {len(identical)} of {len(shared)} shared tensors identical through fairseq-train"
        )
        assert torch.equal(built[stock]["rng"], built[arch]["rng"])
    # the seed is fairseq-train's: stock parameters really are the seeded ones
    assert not torch.equal(built["transformer"]["state"]["encoder.embed_tokens.weight"],
                           build(stock_options("transformer_context_aware", []), 6)[0]["encoder.embed_tokens.weight"])
    assert torch.equal(built["transformer"]["state"]["encoder.embed_tokens.weight"],
                       build(stock_options("transformer_context_aware", []), 5)[0]["encoder.embed_tokens.weight"])


@pytest.mark.parametrize("arch,paper,arm", [
    ("transformer_cross_agg", [], ["--routing-ramp-updates", "200"]),
    ("transformer_cross_agg", ["--routing-side", "both"], ["--routing-stop-gradient"]),
    ("transformer_cross_agg", [], ["--routing-stop-gradient-updates", "800"]),
    ("transformer_cross_agg", [], ["--routing-iters", "1"]),
    ("transformer_sentential", [], ["--sentential-g0", "no_dropout"]),
    ("transformer_context_aware", [], ["--context-init", "glorot"]),  # the default is gate_half
    # init_study 12 against 02 (gate_half): only the bias added, every other value as 02's
    ("transformer_context_aware", ["--context-init", "gate_half"], ["--context-gate-bias", "-4"]),
    # init_study 14 against 02: dropout on C U only (no parameter, no draw)
    ("transformer_context_aware", ["--context-init", "gate_half"], ["--context-dropout", "0.1"]),
])
def test_initialisation_study_arms_start_from_the_paper_models_values(arch, paper, arm):
    """An arm of the initialisation study (configs/init_study/) changes how the model is
    trained or where a term starts, not the random draws: at one seed it starts with the
    paper model's parameters (--context-init rescales / zeroes some of them by design; the
    gate bias adds constants)."""
    paper_state, paper_rng = build(arch_options(arch, paper), 4)
    arm_state, arm_rng = build(arch_options(arch, [*paper, *arm]), 4)
    counters = [k for k in arm_state if k.endswith(".cross_aggregation.num_updates")]
    assert bool(counters) == ("--routing-ramp-updates" in arm)
    biases = [k for k in arm_state if k.endswith(".contextualizer.gate_bias")]
    assert bool(biases) == ("--context-gate-bias" in arm)
    assert all(torch.equal(arm_state[k], torch.full((2,), -4.0)) for k in biases)
    assert sorted(set(arm_state) - set(counters) - set(biases)) == sorted(paper_state)
    changed = [k for k in paper_state if not torch.equal(paper_state[k], arm_state[k])]
    if "--context-init" in arm:
        assert changed and all(".contextualizer." in k for k in changed)  # V random, not 0
    else:
        assert not changed, changed
    assert torch.equal(paper_rng, arm_rng)
