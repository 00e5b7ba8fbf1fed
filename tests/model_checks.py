"""Generic behaviour checks for any fairseq encoder-decoder model built from CLI args.

Every architecture's tests call these with its own options:
- assert_padding_invariant: a sentence alone == the same sentence in a padded batch
- assert_incremental_matches_full: step-by-step decoding == teacher-forced forward
- assert_reorder_consistent: reordering state like beam search == decoding that batch
- assert_finite_low_precision: bf16 autocast / fp16 forward + backward stay finite
"""
import os

import torch

import fairseq  # noqa: F401  (must be imported before fairseq_ctx registers models)
from fairseq import options
from fairseq.data import Dictionary
from fairseq.tasks.translation import TranslationTask

USER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_ctx")


def make_dictionary(size):
    dictionary = Dictionary()
    for i in range(size):
        dictionary.add_symbol(f"w{i}")
    return dictionary


def _train_argv(arch_args, data):
    return [data, "--user-dir", USER_DIR, "--task", "translation",
            "--source-lang", "src", "--target-lang", "tgt", *arch_args]


def parse_train_args(arch_args, data="unused-data-dir"):
    """Parse arguments exactly as fairseq-train does (arch defaults applied)."""
    return options.parse_args_and_arch(options.get_training_parser(), _train_argv(arch_args, data))


def parse_known_train_args(arch_args, data="unused-data-dir"):
    """As parse_train_args, leaving out what the chosen arch's parser does not know:
    returns (args, the words left out)."""
    return options.parse_args_and_arch(options.get_training_parser(), _train_argv(arch_args, data), parse_known=True)


def build_model(arch_args, vocab_size=40, seed=0):
    """Build (model, task) from CLI-style args on an in-memory dictionary; eval mode, fp32, CPU."""
    args = parse_train_args(arch_args)
    torch.manual_seed(seed)
    task = TranslationTask(args, make_dictionary(vocab_size), make_dictionary(vocab_size))
    model = task.build_model(args)
    model.eval()
    return model, task


def random_batch(model, src_lens, tgt_lens, seed=1):
    """Left-padded sources and right-padded decoder inputs (fairseq's defaults).

    Returns (src_tokens, src_lengths, prev_output_tokens, sentences) where sentences
    holds each unpadded (source, decoder input) pair. The checks' default source lengths
    are sorted longest first, as fairseq's batches are (fairseq's LSTMEncoder needs it);
    the reorder check still swaps and duplicates sentences.
    """
    g = torch.Generator().manual_seed(seed)
    src_dict, tgt_dict = model.encoder.dictionary, model.decoder.dictionary
    sentences = []
    for s_len, t_len in zip(src_lens, tgt_lens):
        src = torch.randint(src_dict.nspecial, len(src_dict), (s_len,), generator=g)
        src[-1] = src_dict.eos()
        tgt = torch.randint(tgt_dict.nspecial, len(tgt_dict), (t_len,), generator=g)
        tgt[0] = tgt_dict.eos()  # decoder input starts with EOS, as in fairseq
        sentences.append((src, tgt))
    bsz, max_s, max_t = len(sentences), max(src_lens), max(tgt_lens)
    src_tokens = torch.full((bsz, max_s), src_dict.pad(), dtype=torch.long)
    prev = torch.full((bsz, max_t), tgt_dict.pad(), dtype=torch.long)
    for i, (src, tgt) in enumerate(sentences):
        src_tokens[i, max_s - len(src):] = src
        prev[i, : len(tgt)] = tgt
    return src_tokens, torch.tensor(src_lens), prev, sentences


def decoder_logits(model, src_tokens, src_lengths, prev_output_tokens):
    return model(src_tokens, src_lengths, prev_output_tokens)[0]


def encode(model, src_tokens, src_lengths):
    # the same entry point fairseq's SequenceGenerator uses
    return model.encoder.forward_torchscript({"src_tokens": src_tokens, "src_lengths": src_lengths})


@torch.no_grad()
def assert_padding_invariant(model, src_lens=(7, 5, 3), tgt_lens=(4, 6, 2), atol=1e-5):
    src_tokens, src_lengths, prev, sentences = random_batch(model, src_lens, tgt_lens)
    batched = decoder_logits(model, src_tokens, src_lengths, prev)
    for i, (src, tgt) in enumerate(sentences):
        alone = decoder_logits(model, src[None], torch.tensor([len(src)]), tgt[None])[0]
        torch.testing.assert_close(batched[i, : len(tgt)], alone, atol=atol, rtol=1e-4,
                                   msg=lambda m: f"sentence {i} differs alone vs in padded batch: {m}")


def incremental_logits(model, encoder_out, prev_output_tokens, incremental_state, start=0):
    """Decode positions start..T-1 one token at a time, as the sequence generator does."""
    steps = []
    for t in range(start, prev_output_tokens.size(1)):
        out = model.decoder(prev_output_tokens[:, : t + 1], encoder_out=encoder_out,
                            incremental_state=incremental_state)[0]
        steps.append(out[:, -1])
    return torch.stack(steps, dim=1)


@torch.no_grad()
def assert_incremental_matches_full(model, src_lens=(6, 5, 4), tgt_len=6, atol=1e-5):
    src_tokens, src_lengths, prev, _ = random_batch(model, src_lens, [tgt_len] * len(src_lens))
    full = decoder_logits(model, src_tokens, src_lengths, prev)
    step = incremental_logits(model, encode(model, src_tokens, src_lengths), prev, {})
    torch.testing.assert_close(step, full, atol=atol, rtol=1e-4)


@torch.no_grad()
def assert_reorder_consistent(model, src_lens=(6, 6, 4), tgt_len=6, split=3,
                              new_order=(1, 0, 0, 2), atol=1e-5):
    """Decode `split` steps, reorder (with duplication, as beams do), finish; compare."""
    src_tokens, src_lengths, prev, _ = random_batch(model, src_lens, [tgt_len] * len(src_lens))
    order = torch.tensor(new_order)
    encoder_out = encode(model, src_tokens, src_lengths)
    state = {}
    incremental_logits(model, encoder_out, prev[:, :split], state)
    encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)
    model.decoder.reorder_incremental_state_scripting(state, order)
    continued = incremental_logits(model, encoder_out, prev[order], state, start=split)
    direct = decoder_logits(model, src_tokens[order], src_lengths[order], prev[order])[:, split:]
    torch.testing.assert_close(continued, direct, atol=atol, rtol=1e-4)


def assert_finite_low_precision(model, dtype, src_lens=(7, 5, 3), tgt_lens=(4, 6, 2)):
    """Forward + backward in bf16 autocast (dtype=torch.bfloat16) or pure fp16 (torch.float16)."""
    model.train()
    src_tokens, src_lengths, prev, _ = random_batch(model, src_lens, tgt_lens)
    if dtype == torch.float16:
        model.half()
        logits = decoder_logits(model, src_tokens, src_lengths, prev)
    else:
        with torch.autocast("cpu", dtype=dtype):
            logits = decoder_logits(model, src_tokens, src_lengths, prev)
    assert torch.isfinite(logits).all(), f"non-finite outputs under {dtype}"
    logits.float().log_softmax(-1).mean().backward()
    for name, param in model.named_parameters():
        if param.grad is not None:
            assert torch.isfinite(param.grad).all(), f"non-finite gradient for {name} under {dtype}"
    model.float().eval()
