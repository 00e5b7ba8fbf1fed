"""lstm_multihop as a fairseq model: stock equivalence, Table 5 parameter counts, options."""
import pytest
import torch

import fairseq_ctx.models  # noqa: F401  (registers lstm_multihop with fairseq)
from fairseq_ctx.modules.multihop_attention import MultiHopAttention
from tests.model_checks import (
    assert_finite_low_precision,
    assert_incremental_matches_full,
    assert_padding_invariant,
    assert_reorder_consistent,
    build_model,
    parse_train_args,
)

TINY = [
    "--encoder-embed-dim", "8", "--encoder-hidden-size", "6", "--encoder-bidirectional",
    "--decoder-embed-dim", "8", "--decoder-hidden-size", "10", "--decoder-out-embed-dim", "8",
    "--dropout", "0",
]  # fmt: skip


def build(arch, argv, vocab_size=20):
    """Parse the options exactly as fairseq-train does (arch defaults applied); eval mode."""
    return build_model(["--arch", arch, *argv], vocab_size=vocab_size)[0]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def sample_batch(bsz=3, src_len=5, tgt_len=4, pad=1, vocab=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    src_lengths = torch.tensor([src_len, src_len - 1, src_len - 3])[:bsz]
    src = torch.randint(4, vocab, (bsz, src_len), generator=g)
    for b, n in enumerate(src_lengths.tolist()):
        src[b, : src_len - n] = pad  # fairseq left-pads sources
    prev = torch.randint(4, vocab, (bsz, tgt_len), generator=g)
    prev[:, 0] = 2  # eos starts the decoder input
    return src, src_lengths, prev


def test_one_head_one_hop_is_exactly_fairseq_lstm_attention():
    stock = build("lstm", TINY)
    multihop = build("lstm_multihop", TINY + ["--attention-heads", "1", "--attention-hops", "1"])
    assert isinstance(multihop.decoder.attention, MultiHopAttention)
    # identical parameter names and shapes: the stock weights load without remapping
    assert {k: v.shape for k, v in stock.state_dict().items()} == {
        k: v.shape for k, v in multihop.state_dict().items()
    }
    multihop.load_state_dict(stock.state_dict())
    src, src_lengths, prev = sample_batch()
    with torch.no_grad():
        expected, expected_extra = stock(src, src_lengths, prev)
        logits, extra = multihop(src, src_lengths, prev)
    # same function; only the reduction order of the dot products differs (bmm vs mul+sum)
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(extra, expected_extra, rtol=0, atol=1e-6)


def test_default_arch_is_two_heads_two_dependent_hops_on_paper_setup():
    model = build("lstm_multihop", [], vocab_size=10)
    enc, dec = model.encoder, model.decoder
    assert enc.bidirectional and enc.hidden_size == 512 and enc.num_layers == 1
    assert enc.embed_tokens.embedding_dim == 512 and dec.embed_tokens.embedding_dim == 512
    assert dec.hidden_size == 1024 and dec.num_layers == 1 and dec.additional_fc.out_features == 512
    assert dec.layers[0].input_size == 512 + 1024  # input feeding
    att = dec.attention
    assert (att.num_heads, att.num_hops, att.hop_mode) == (2, 2, "dependent")


# Table 5 of Iida et al. (2019): (heads, hops, hop mode) -> parameters
TABLE5 = {
    (1, 1, "dependent"): 68_460_544,  # RNN baseline
    (2, 1, "dependent"): 70_557_696,
    (3, 1, "dependent"): 72_654_848,
    (2, 2, "independent"): 72_654_848,
    (2, 2, "dependent"): 75_800_576,
    (2, 3, "dependent"): 81_043_456,
    (3, 2, "dependent"): 79_994_880,
    (3, 3, "dependent"): 87_334_912,
}


def test_table5_parameter_differences_reproduced_exactly():
    """The vocabulary sizes are not reported, so the absolute counts are not pinned; every
    difference between Table 5 rows depends only on the attention and must match exactly."""
    counts = {}
    for heads, hops, mode in TABLE5:
        argv = ["--attention-heads", str(heads), "--attention-hops", str(hops), "--hop-mode", mode]
        counts[heads, hops, mode] = n_params(build("lstm_multihop", argv, vocab_size=32000))
    baseline = (1, 1, "dependent")
    for row in TABLE5:
        assert counts[row] - counts[baseline] == TABLE5[row] - TABLE5[baseline], row
    stock = build("lstm", ["--encoder-bidirectional", "--decoder-hidden-size", "1024"], vocab_size=32000)
    assert n_params(stock) == counts[baseline]  # N=1, K=1 adds nothing to fairseq's lstm


def test_learned_score_vector_adds_d_per_dependent_hop():
    base = n_params(build("lstm_multihop", TINY + ["--attention-hops", "3"]))
    learned = n_params(build("lstm_multihop", TINY + ["--attention-hops", "3", "--hop-learned-score-vector"]))
    assert learned - base == 2 * 12  # 2 extra hops x D (encoder output 2 x 6)


@pytest.mark.parametrize(
    "argv,option",
    [
        (["--attention-heads", "0"], "--attention-heads"),
        (["--attention-hops", "0"], "--attention-hops"),
        (["--decoder-attention", "0"], "--decoder-attention"),
    ],
)
def test_bad_options_rejected_when_model_is_built(argv, option):
    with pytest.raises(ValueError, match=option):
        build("lstm_multihop", TINY + argv)


def test_unknown_hop_mode_rejected_by_parser(capsys):
    with pytest.raises(SystemExit):
        parse_train_args(["--arch", "lstm_multihop", "--hop-mode", "both"])
    assert "--hop-mode" in capsys.readouterr().err


# Every option combination that changes the computation: multi-head only, dependent
# (2 and 3 hops), independent, learned v_b, and the stock-equivalent 1x1.
VARIANTS = {
    "1x1": ["--attention-heads", "1", "--attention-hops", "1"],
    "2x1": ["--attention-heads", "2", "--attention-hops", "1"],
    "2x2-dependent": [],
    "3x3-dependent": ["--attention-heads", "3", "--attention-hops", "3"],
    "2x2-independent": ["--hop-mode", "independent"],
    "2x2-learned-vb": ["--hop-learned-score-vector"],
}
# fairseq's LSTMEncoder packs with enforce_sorted=True, as fairseq's batches are sorted
# by decreasing source length; so source lengths here are non-increasing, and the beam
# reorder (1, 0, 0, 2) keeps them so while swapping and duplicating sentences.
SORTED_SRC = (7, 5, 3)


@pytest.fixture(params=sorted(VARIANTS), scope="module")
def variant_model(request):
    return build("lstm_multihop", TINY + VARIANTS[request.param])


def test_padding_invariant(variant_model):
    assert_padding_invariant(variant_model, src_lens=SORTED_SRC, tgt_lens=(4, 6, 2))


def test_incremental_decoding_matches_full_forward(variant_model):
    assert_incremental_matches_full(variant_model, src_lens=SORTED_SRC)


def test_beam_reorder_matches_decoding_the_reordered_batch(variant_model):
    assert_reorder_consistent(variant_model, src_lens=(6, 6, 4), new_order=(1, 0, 0, 2))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_low_precision_forward_backward_finite(variant_model, dtype):
    assert_finite_low_precision(variant_model, dtype, src_lens=SORTED_SRC, tgt_lens=(4, 6, 2))
