"""How much the context changes what the attention computes (ContextSizeRecorder in
fairseq_ctx/analysis/model_statistics.py, shown by fairseq-ctx-gate-statistics):
rms(Q^ - Q) / rms(Q), rms(K^ - K less its sentence mean) / rms(K), and the total
variation distance between the attention of Eq. 5-6 and the stock one, over
non-padding positions. The references are written from the equations, one sentence at
a time over its own tokens (no masks), and with explicit loops over heads and queries."""
import math

import pytest
import torch
from torch import nn

from fairseq_ctx.analysis.model_statistics import ContextSizeRecorder, merge_rows
from fairseq_ctx.modules.context_aware_attention import ContextualQueryKey
from tests.model_checks import build_model, random_batch

D, HEADS = 8, 2


class Attention(nn.Module):
    """The slice of the model's attention module the recorder relies on: a layer index,
    num_heads / head_dim, a contextualizer, and fairseq's MultiheadAttention.forward
    signature for the masks. Here Q and K come in as query and key and the contexts by
    keyword (the model computes them from the layer input)."""

    def __init__(self, contextualizer, layer_index=2):
        super().__init__()
        self.contextualizer, self.layer_index = contextualizer, layer_index
        self.num_heads, self.head_dim = HEADS, D // HEADS

    def forward(self, q, k, value=None, key_padding_mask=None, incremental_state=None, need_weights=True,
                static_kv=False, attn_mask=None, *, global_context=None, deep_context=None):
        return self.contextualizer(q, k, global_context, deep_context)


@torch.no_grad()
def reference(q, k, global_context, deep_context, module, lengths, left_padded, causal):
    """Eq. 5-6 by hand for each sentence's real tokens: C U_X = [g; deep] U_X,
    lambda_X = sigmoid(X V^H_X + C U_X V^C_X), X^ = (1 - lambda_X) X + lambda_X C U_X; without
    the context term X~ = (1 - lambda_X) X."""
    T = q.size(0)
    U = torch.cat([module.global_proj.weight, module.deep_proj.weight], dim=1).t()  # d_c x 2d
    sums = dict(term_q=0.0, rest_q=0.0, term_k=0.0, rest_k=0.0, tv_context=0.0, tv_stock=0.0, positions=0)
    for b, n in enumerate(lengths):
        span = slice(T - n, T) if left_padded else slice(0, n)
        C = torch.cat([global_context[0, b].expand(n, -1), deep_context[span, b]], dim=-1)
        plain, hat, without = {}, {}, {}
        for i, (name, x) in enumerate((("q", q[span, b]), ("k", k[span, b]))):
            cu = C @ U[:, i * D:(i + 1) * D]
            lam = torch.sigmoid(x @ module.gate_input[i] + cu @ module.gate_context[i]).unsqueeze(-1)
            plain[name], hat[name], without[name] = x, (1 - lam) * x + lam * cu, (1 - lam) * x
            term, rest = lam * cu, (1 - lam) * x
            if name == "k":  # less the sentence mean
                term, rest = term - term.mean(0), rest - rest.mean(0)
            sums[f"term_{name}"] += term.pow(2).sum().item()
            sums[f"rest_{name}"] += rest.pow(2).sum().item()
        sums["positions"] += n
        h = D // HEADS
        for head in range(HEADS):
            cols = slice(head * h, (head + 1) * h)

            def attention(x, i, visible):
                return torch.softmax(x["q"][i, cols] @ x["k"][:visible, cols].t() / math.sqrt(h), 0)

            for i in range(n):
                visible = i + 1 if causal else n  # keys j <= i under the causal mask
                p = attention(hat, i, visible)
                sums["tv_context"] += 0.5 * (p - attention(without, i, visible)).abs().sum().item() / HEADS
                sums["tv_stock"] += 0.5 * (p - attention(plain, i, visible)).abs().sum().item() / HEADS
    return {"context_q": math.sqrt(sums["term_q"] / sums["rest_q"]),
            "context_k": math.sqrt(sums["term_k"] / sums["rest_k"]),
            "tv_context": sums["tv_context"] / sums["positions"], "tv_stock": sums["tv_stock"] / sums["positions"],
            "positions": sums["positions"]}


@pytest.mark.parametrize("causal", [False, True])
def test_context_size_matches_eq5_6_over_non_padding_positions(causal):
    torch.manual_seed(0)
    module = ContextualQueryKey(D, 2, 1).double()  # glorot: gates away from 0.5, differ by position
    T, B, lengths = 5, 3, [5, 3, 2]
    left_padded = not causal  # sources are left-padded, decoder inputs right-padded
    q, k = 3.0 * torch.randn(T, B, D, dtype=torch.double), 0.5 * torch.randn(T, B, D, dtype=torch.double)
    global_context, deep_context = torch.randn(1, B, 2 * D).double(), torch.randn(T, B, D).double()
    padding = torch.zeros(B, T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        if left_padded:
            padding[b, : T - n] = True
        else:
            padding[b, n:] = True
    q[padding.t()] = 1e3  # padded positions hold garbage: counting them would swamp every statistic
    k[padding.t()] = -1e3
    future = torch.triu(torch.full((T, T), float("-inf")), 1) if causal else None  # fairseq's float mask
    attention = Attention(module)
    recorder = ContextSizeRecorder([("decoder" if causal else "encoder", attention)])
    contexts = dict(global_context=global_context, deep_context=deep_context)
    if causal:  # positionally, as MultiheadAttention's signature has them
        attention(q, k, None, padding, None, True, False, future, **contexts)
        attention(q, k, None, padding, {}, True, False, future, **contexts)  # a decoding step: not recorded
    else:  # by keyword, as fairseq's layers pass them
        attention(q, k, key_padding_mask=padding, **contexts)
        attention(q, k, key_padding_mask=padding, incremental_state={}, **contexts)  # not recorded
    recorder.remove()
    attention(q, k, key_padding_mask=padding, **contexts)  # after remove: not recorded
    (side, rows), = recorder.table().items()
    row, = rows
    assert row.pop("layer") == 2 and side == ("decoder" if causal else "encoder")
    expected = reference(q, k, global_context, deep_context, module, lengths, left_padded, causal)
    assert row == pytest.approx(expected, rel=1e-9)
    assert 0.05 < row["tv_context"] < 0.95 and 0.05 < row["tv_stock"] < 0.95
    assert row["tv_context"] != pytest.approx(row["tv_stock"], rel=0.01)


def test_a_gate_with_no_context_to_mix_in_changes_only_the_temperature():
    """U = 0 (zero_context): Q^ = (1 - lambda) Q, no context at all; the context columns are 0
    while the attention still differs from the one from Q, K (the gate's shrinkage)."""
    torch.manual_seed(3)
    module = ContextualQueryKey(D, 1, 1, init="zero_context").double()
    attention = Attention(module)
    recorder = ContextSizeRecorder([("encoder", attention)])
    attention(torch.randn(6, 2, D).double(), torch.randn(6, 2, D).double(),
              global_context=torch.randn(1, 2, D).double(), deep_context=torch.randn(6, 2, D).double())
    row, = recorder.table()["encoder"]
    assert max(row["context_q"], row["context_k"], row["tv_context"]) < 1e-12  # rounding of torch.lerp only
    assert row["tv_stock"] > 0.01


def test_a_key_shift_shared_by_the_sentence_changes_nothing():
    """Ungated, a global-only C U_K adds one vector to every key of a sentence: the softmax
    cancels it, so the centred context term and both TVs are 0 (uncentred it would be
    rms(C U_K) / rms(K))."""
    torch.manual_seed(2)
    module = ContextualQueryKey(D, 1, 0, apply_to="key", gated=False).double()
    attention = Attention(module, layer_index=1)
    recorder = ContextSizeRecorder([("encoder", attention)])
    q, k, g = torch.randn(4, 2, D).double(), torch.randn(4, 2, D).double(), torch.randn(1, 2, D).double()
    q_hat, k_hat, _ = attention(q, k, global_context=g)
    assert (k_hat - k).abs().min() > 0 and torch.equal(q_hat, q)
    row, = recorder.table()["encoder"]
    assert row["context_q"] == 0 and row["context_k"] < 1e-12
    assert row["tv_context"] < 1e-12 and row["tv_stock"] < 1e-12


def test_merge_keeps_every_contextualised_layer():
    """Gate means exist only for gated layers; the size rows exist for every contextualised
    layer (ungated ones included), with their position counts."""
    gates = {"encoder": [{"layer": 2, "lambda_k": 0.3, "positions": 7}], "decoder": []}
    sizes = {"encoder": [{"layer": 2, "tv_context": 0.1, "positions": 7}, {"layer": 3, "tv_context": 0.2, "positions": 7}],
             "decoder": [{"layer": 1, "tv_context": 0.4, "positions": 5}]}
    merged = merge_rows(gates, sizes)
    assert merged == {"encoder": [{"layer": 2, "lambda_k": 0.3, "tv_context": 0.1, "positions": 7},
                                  {"layer": 3, "tv_context": 0.2, "positions": 7}],
                      "decoder": [{"layer": 1, "tv_context": 0.4, "positions": 5}]}


ARGS = ("--arch transformer_context_aware --encoder-context deep --decoder-context deep_global "
        "--encoder-embed-dim 16 --encoder-ffn-embed-dim 32 --encoder-layers 3 --encoder-attention-heads 2 "
        "--decoder-embed-dim 16 --decoder-ffn-embed-dim 32 --decoder-layers 2 --decoder-attention-heads 2").split()


def collect(model, batch):
    recorder = ContextSizeRecorder(model._context_attentions())
    with torch.no_grad():
        model(*batch)
    recorder.remove()
    return recorder


def test_a_padded_batch_gives_the_sums_of_its_sentences_run_alone():
    """In a real model (fairseq's layers pass the masks by keyword): the sums over a
    left-padded source / right-padded target batch equal those of each sentence alone, so
    padding is left out on both sides (a dropped or transposed mask changes them)."""
    model, _ = build_model(ARGS, vocab_size=30)
    src, src_lens, prev, sentences = random_batch(model, (7, 4, 2), (3, 6, 2))
    batched = collect(model, (src, src_lens, prev))
    alone = [collect(model, (s.unsqueeze(0), torch.tensor([len(s)]), t.unsqueeze(0))) for s, t in sentences]
    # the encoder's layer 1 has no deep context (stock attention), layers 2-3 have one
    assert sorted(batched.sums) == [("decoder", 1), ("decoder", 2), ("encoder", 2), ("encoder", 3)]
    for key, sums in batched.sums.items():
        assert set(sums) == {"positions", "term_q", "rest_q", "term_k", "rest_k", "tv_context", "tv_stock"}
        for name, value in sums.items():
            assert value == pytest.approx(sum(r.sums[key][name] for r in alone), rel=1e-5), (key, name)
    assert batched.sums[("encoder", 2)]["positions"] == 7 + 4 + 2
    assert batched.sums[("decoder", 1)]["positions"] == 3 + 6 + 2
    assert all(row[name] > 0 for rows in batched.table().values() for row in rows
               for name in ("context_q", "context_k", "tv_context", "tv_stock"))


def test_the_attention_recomputed_is_the_models_own():
    """The recorder's softmax (scaling, padding, the decoder's causal mask) against the
    per-head probabilities the model's attention returns for the same Q^, K^."""
    model, _ = build_model(ARGS, vocab_size=30)
    src, src_lens, prev, _ = random_batch(model, (7, 4, 2), (3, 6, 2))
    captured = []
    for side, attention in model._context_attentions():
        def force_weights(module, args, kwargs):
            return args, {**kwargs, "need_weights": True, "need_head_weights": True}

        def keep(module, args, kwargs, output, attention=attention, side=side):
            captured.append((side, attention, output[1]))  # H x B x T x S

        attention.register_forward_pre_hook(force_weights, with_kwargs=True)
        attention.register_forward_hook(keep, with_kwargs=True)
    recomputed = []
    for side, attention in model._context_attentions():
        stash = {}
        attention.register_forward_pre_hook(ContextSizeRecorder._stash(stash), with_kwargs=True)
        attention.contextualizer.register_forward_hook(
            lambda module, inputs, outputs, attention=attention, stash=stash: recomputed.append(
                ContextSizeRecorder._attention(outputs[0].double(), outputs[1].double(), attention,
                                               stash["padding"], stash["attn_mask"])))
    with torch.no_grad():
        model(src, src_lens, prev)
    assert [side for side, _, _ in captured] == ["encoder", "encoder", "decoder", "decoder"]
    for (side, attention, weights), ours in zip(captured, recomputed):
        tokens, pad = (src, model.encoder.dictionary.pad()) if side == "encoder" else (prev, model.decoder.dictionary.pad())
        queries = tokens.ne(pad)  # B x T, the non-padding queries
        theirs = weights.transpose(0, 1).double()  # B x H x T x S
        rows = queries.unsqueeze(1).expand(-1, attention.num_heads, -1)
        torch.testing.assert_close(ours[rows], theirs[rows], atol=1e-5, rtol=0)


def test_a_seed_without_train_mode_is_refused_before_anything_is_read(tmp_path, capsys, monkeypatch):
    from fairseq_ctx.analysis import model_statistics

    # files that exist but are no data / checkpoint: reading them would fail otherwise
    (tmp_path / "bin").mkdir()
    (tmp_path / "model.pt").write_bytes(b"not a checkpoint")
    calls = []
    monkeypatch.setattr(model_statistics, "gate_statistics", lambda *a: calls.append(a) or {"gates": {}})
    monkeypatch.setattr(model_statistics, "write_gates", lambda result, out_dir: "table")
    argv = ["--data", str(tmp_path / "bin"), "--path", str(tmp_path / "model.pt"), "--out-dir", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as refused:
        model_statistics.main("gates", argv + ["--seed", "2"])
    assert refused.value.code == 2 and not calls
    assert "--seed seeds the dropout masks of --train-mode" in capsys.readouterr().err
    # with --train-mode the seed reaches the statistics; without --seed, 1; eval mode: no seed
    model_statistics.main("gates", argv + ["--seed", "2", "--train-mode"])
    model_statistics.main("gates", argv + ["--train-mode"])
    model_statistics.main("gates", argv)
    assert [(c[4], c[5]) for c in calls] == [(True, 2), (True, 1), (False, 1)]
