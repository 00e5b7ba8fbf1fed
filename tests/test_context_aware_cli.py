"""transformer_context_aware through the real fairseq CLI (train, resume, generate with
beam search, interactive), with context on both sides so that beam search reorders the
decoder's running prefix sums as well as the attention caches. With the (not-in-the-paper) gate
bias, so that its parameter goes through a checkpoint, a resume, generate and interactive too
(without it, the demo's context-aware row is trained and translated in tests/test_demo.py), and
dropout on C U (not in the paper either), so that a model trained with it goes the same road (that
it is the identity in generation is pinned by tests/test_context_aware_model.py); and the pairing
and exact resume of --context-dropout runs through fairseq-train."""
import copy
import glob
import math
import os
import re

import pytest
import torch

import fairseq_ctx.models  # noqa: F401
from tests.conftest import TRAIN_DEFAULTS, USER_DIR, fairseq_cli, run

TINY = [
    "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-layers", "2",
    "--encoder-attention-heads", "2", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32",
    "--decoder-layers", "2", "--decoder-attention-heads", "2", "--share-decoder-input-output-embed",
]


def test_cli_train_resume_generate_interactive_both_sides(cli_roundtrip):
    cli_roundtrip(
        ["--arch", "transformer_context_aware", "--encoder-context", "deep_global+deep",
         "--decoder-context", "deep_global+deep", "--context-gate-bias", "-2",
         "--context-dropout", "0.1", *TINY],
        beam=3,
    )


def test_context_dropout_keeps_the_stock_training_noise_and_resumes_exactly(tiny_corpus, tmp_path):
    """Through fairseq-train (stock --dropout on, 2 micro-batches per update): a run with a
    vanishing --context-dropout logs exactly the losses of the run without it (the same start
    and the same stock dropout masks: the pairing the initialisation study's arm 14 relies on);
    with 0.5 the losses move; and 2 updates + a resume to 4 end with the weights of 4 updates in
    one go (the masks are keyed to fairseq's per-update seed, not to the process)."""
    data = str(tiny_corpus / "bin")
    args = ["--arch", "transformer_context_aware", "--encoder-context", "deep_global+deep", *TINY,
            "--update-freq", "2", "--attention-dropout", "0.1"]

    def train(name, updates, *extra):
        save_dir = str(tmp_path / name)
        proc = run([*fairseq_cli("train", data, "--user-dir", USER_DIR, *TRAIN_DEFAULTS, *args, *extra,
                                 "--save-dir", save_dir, "--max-update", str(updates))])
        losses = re.findall(r"train_inner \|.*? loss=([0-9.]+)", proc.stdout + proc.stderr)
        return losses, os.path.join(save_dir, "checkpoint_last.pt")

    def weights(checkpoint):
        return torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]

    plain, _ = train("plain", 4)
    vanishing, _ = train("vanishing", 4, "--context-dropout", "1e-9")
    dropped, in_one_go = train("dropped", 4, "--context-dropout", "0.5")
    assert len(plain) == 4 and vanishing == plain
    assert dropped != plain
    train("resumed", 2, "--context-dropout", "0.5")
    resumed, after_resume = train("resumed", 4, "--context-dropout", "0.5")
    assert resumed == dropped[2:]
    expected, got = weights(in_one_go), weights(after_resume)
    assert sorted(expected) == sorted(got)
    for name in expected:
        assert torch.equal(expected[name], got[name]), name


@pytest.mark.parametrize("gate_bias", [None, -0.8814])
def test_freeze_context_trains_the_stock_transformer_with_scaled_encoder_logits(tiny_corpus, tmp_path, gate_bias):
    """Init study arms 19 and 24 (--context-init gate_half_zero_context --freeze-context, 24 with
    --context-gate-bias -0.8814; not in the paper) through fairseq-train, a resume included: nothing
    the context adds is trained (U = 0, V = 0, every gate sigmoid(b) after 4 updates: 1/2 without a
    bias), the stock weights are, and the trained model is, from Eq. 5-6 with C U = 0, the stock
    transformer with each contextualised layer's Q and K times 1 - lambda (its attention logits
    times 1/4 in 19, 1/2 in 24): built as `transformer` from the checkpoint's stock tensors with
    those layers' W_Q, W_K (and biases) so scaled, it gives the same logits."""
    from fairseq import checkpoint_utils
    from fairseq.models.transformer import TransformerModel

    from tests.model_checks import decoder_logits, random_batch

    data = str(tiny_corpus / "bin")
    save_dir = str(tmp_path / "frozen")
    arch = ["--encoder-context", "deep_global+deep", "--context-init", "gate_half_zero_context", *TINY,
            *([] if gate_bias is None else [f"--context-gate-bias={gate_bias}"])]
    # 1 - lambda from the equation, not from the model: lambda = sigmoid(b), 1/2 without a bias (b as
    # the float32 parameter holds it: the model is compared in float64 to 1e-10)
    stored_bias = None if gate_bias is None else float(torch.tensor(gate_bias, dtype=torch.float32))
    keep = 0.5 if gate_bias is None else 1 - 1 / (1 + math.exp(-stored_bias))

    def train(updates):
        run([*fairseq_cli("train", data, "--user-dir", USER_DIR, *TRAIN_DEFAULTS,
                          "--arch", "transformer_context_aware", *arch, "--freeze-context",
                          "--save-dir", save_dir, "--max-update", str(updates))])
        return torch.load(os.path.join(save_dir, "checkpoint_last.pt"), map_location="cpu",
                          weights_only=False)

    after_two = {k: v.clone() for k, v in train(2)["model"].items()}
    checkpoint = train(4)
    assert checkpoint["optimizer_history"][-1]["num_updates"] == 4
    state = checkpoint["model"]
    added = [k for k in state if ".contextualizer." in k]
    biases = [k for k in added if k.endswith("gate_bias")]
    assert len(biases) == (0 if gate_bias is None else 2)
    added_by_equation = [k for k in added if k not in biases]
    assert len(added_by_equation) == 1 + 2 + 2 * 2  # U: layer 1 global, layer 2 global and deep; V^H, V^C per layer
    assert all(torch.count_nonzero(state[k]) == 0 for k in added_by_equation)
    assert all(torch.equal(state[k], torch.full_like(state[k], gate_bias)) for k in biases)
    stock_keys = [k for k in state if k not in added]
    moved = [k for k in stock_keys if not torch.equal(state[k], after_two[k])]
    assert "encoder.layers.0.self_attn.q_proj.weight" in moved and len(moved) > len(stock_keys) // 2

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([os.path.join(save_dir, "checkpoint_last.pt")])
    frozen = models[0].eval().double()
    assert not any(p.requires_grad for k, p in frozen.named_parameters() if ".contextualizer." in k)
    stock_args = copy.deepcopy(cfg.model)
    stock_args.arch = "transformer"
    stock = TransformerModel.build_model(stock_args, task)
    # in float64 before scaling: 1 - lambda = 0.7071... times a float32 weight is not exact in float32
    stock_state = {k: v.double() for k, v in state.items() if k not in added}
    for layer in range(2):  # both encoder layers carry a context here
        for name in ("q_proj", "k_proj"):
            for part in ("weight", "bias"):
                stock_state[f"encoder.layers.{layer}.self_attn.{name}.{part}"] = (
                    stock_state[f"encoder.layers.{layer}.self_attn.{name}.{part}"] * keep)
    stock = stock.double()
    stock.load_state_dict(stock_state)
    stock = stock.eval()
    batch = random_batch(frozen, (7, 5, 3), (4, 6, 2))[:3]
    torch.testing.assert_close(decoder_logits(frozen, *batch), decoder_logits(stock, *batch),
                               rtol=1e-10, atol=1e-10)


def test_freeze_context_parts_train_only_the_other_part_through_fairseq_train(tiny_corpus, tmp_path):
    """Init study arms 21 / 22 (not in the paper) through fairseq-train, context on both sides, from
    gate_half_zero_context's start (V = 0, U = 0) with a gate bias: with --freeze-context-projection
    U stays 0 for the whole run (so C U = 0 and V^C, which only C U reaches, gets no gradient) while
    V^H and the bias move; with --freeze-context-gates V^H, V^C and the bias keep their start while U
    moves; between updates 1 and 3 the stock tensors move in both."""
    data = str(tiny_corpus / "bin")
    arch = ["--encoder-context", "deep_global+deep", "--decoder-context", "deep_global+deep",
            "--context-init", "gate_half_zero_context", "--context-gate-bias", "-1", *TINY]

    def train(flag):
        save_dir = str(tmp_path / flag)
        run([*fairseq_cli("train", data, "--user-dir", USER_DIR, *TRAIN_DEFAULTS,
                          "--arch", "transformer_context_aware", *arch, flag, "--save-dir", save_dir,
                          "--max-update", "3", "--save-interval-updates", "1", "--keep-interval-updates", "-1")])
        first, last = (glob.glob(os.path.join(save_dir, f"checkpoint_*_{u}.pt")) for u in (1, 3))
        assert len(first) == 1 and len(last) == 1
        return tuple(torch.load(path[0], map_location="cpu", weights_only=False)["model"] for path in (first, last))

    def added(state, suffix):
        tensors = [v for k, v in state.items() if ".contextualizer." in k and k.endswith(suffix)]
        assert len(tensors) == {"_proj.weight": 2 * 3, "gate_bias": 2 * 2}.get(suffix, 2 * 2), suffix
        return tensors

    def at_start(state, suffix):
        start = -1.0 if suffix == "gate_bias" else 0.0
        return [bool(torch.all(v == start)) for v in added(state, suffix)]

    def stock_moved(first, last):
        stock = [k for k in last if ".contextualizer." not in k and k.endswith("weight")]
        assert any(k.startswith("decoder.layers.1.self_attn.") for k in stock)
        return all(not torch.equal(first[k], last[k]) for k in stock
                   if k.split(".")[-2] not in ("embed_positions",))

    first, gates_trained = train("--freeze-context-projection")
    assert all(at_start(gates_trained, "_proj.weight")) and all(at_start(gates_trained, "gate_context"))
    assert not any(at_start(gates_trained, "gate_input")) and not any(at_start(gates_trained, "gate_bias"))
    assert stock_moved(first, gates_trained)
    first, projection_trained = train("--freeze-context-gates")
    assert not any(at_start(projection_trained, "_proj.weight"))
    assert all(at_start(projection_trained, suffix) for suffix in ("gate_input", "gate_context", "gate_bias"))
    assert stock_moved(first, projection_trained)
