"""Synthetic batches: the same random batches (same seed) for every system."""
from __future__ import annotations

import math
from typing import List

import torch


def make_batches(dictionary, src_len: int, bsz: int, n_batches: int, seed: int,
                 device: str) -> List[dict]:
    """Random token ids; source length in [ceil(0.8 L), L] tokens (EOS included),
    target length ~ source length (x U(0.9, 1.1), at least 2); fairseq's own collate
    (source left-padded, prev_output_tokens = EOS + target[:-1])."""
    from fairseq import utils
    from fairseq.data.language_pair_dataset import collate

    g = torch.Generator().manual_seed(seed * 1000003 + src_len)
    lo, hi = dictionary.nspecial, len(dictionary)
    batches = []
    for b in range(n_batches):
        samples = []
        for i in range(bsz):
            sl = int(torch.randint(max(2, math.ceil(0.8 * src_len)), src_len + 1, (1,), generator=g))
            tl = max(2, int(round(sl * float(0.9 + 0.2 * torch.rand(1, generator=g)))))
            src = torch.randint(lo, hi, (sl,), generator=g)
            tgt = torch.randint(lo, hi, (tl,), generator=g)
            src[-1] = dictionary.eos()
            tgt[-1] = dictionary.eos()
            samples.append({"id": b * bsz + i, "source": src, "target": tgt})
        batch = collate(samples, dictionary.pad(), dictionary.eos(),
                        left_pad_source=True, left_pad_target=False)
        batches.append(utils.move_to_cuda(batch) if device == "cuda" else batch)
    return batches
