"""Each paper's evaluation settings: the one table of them.

``fairseq-ctx-evaluate --paper P`` takes its defaults from ``PAPER_DEFAULTS[P]`` (options
given explicitly win), and the reproduction reads the same entries: ``Table.evaluation`` in
fairseq_ctx/reproduce/tables.py, hence the runner's evaluation command, its evaluation key
(which eval directory a result belongs to) and the tables' "Evaluation:" footers. Change a
value here and both change; there is no second copy of these numbers.

The keys are the papers' keys everywhere else (``Table.paper``, ``PAPER_SETTING``,
``paper_tables.PAPERS``) plus ``demo``, the defaults without ``--paper`` (scripts/demo.sh,
fairseq-ctx-quality-compare). Which of these values a paper states and which are our
assumptions is printed under every reproduced table (reproduce/tables.py: ``assumptions``).

Pure data: importing this module imports nothing beyond the standard library.
"""
from dataclasses import dataclass
from typing import Dict


@dataclass(frozen=True)
class EvalSettings:
    beam: int
    lenpen: float
    # checkpoint of --save-dir: the average of the last N numbered checkpoints (N > 0), or the
    # file `checkpoint` (N = 0); --path CHECKPOINT evaluates that file instead
    average_last: int
    checkpoint: str
    # output length bound of fairseq-generate: a * source length + b tokens
    max_len_a: float
    max_len_b: int
    # tokenised BLEU (the papers' "case-sensitive BLEU" on tokenised text): split hyphenated
    # compounds as get_ende_bleu.sh does: "auto" = for a German target, "yes", "no"
    compound_split: str = "auto"


# 2 x source + 10 tokens: no paper states a bound, and fairseq's fixed default (200 tokens)
# would cut the long outputs of ASPEC / WMT (Iida's 120-139 word buckets)
_RELATIVE_BOUND = {"max_len_a": 2, "max_len_b": 10}
# the Transformer papers (Yang, Wang, Cao): Vaswani et al.'s evaluation recipe
_TRANSFORMER = EvalSettings(beam=4, lenpen=0.6, average_last=5, checkpoint="checkpoint_best.pt", **_RELATIVE_BOUND)

PAPER_DEFAULTS: Dict[str, EvalSettings] = {
    # fairseq-generate's own defaults (lenpen 1, bound 0 x source + 200) and the checkpoint the
    # demo writes: it trains with --disable-validation, so there is no checkpoint_best.pt
    "demo": EvalSettings(beam=5, lenpen=1.0, average_last=0, checkpoint="checkpoint_last.pt", max_len_a=0,
                         max_len_b=200),
    "yang2019": _TRANSFORMER,
    "cao": _TRANSFORMER,
    "wang2019": _TRANSFORMER,
    # Iida et al. (RNN + multi-hop attention, fairseq): best checkpoint by validation loss, beam 5
    "iida2019": EvalSettings(beam=5, lenpen=1.0, average_last=0, checkpoint="checkpoint_best.pt", **_RELATIVE_BOUND),
}
DEFAULT_PAPER = "demo"


def checkpoint_choice(settings: EvalSettings) -> str:
    """The checkpoint of --save-dir these settings evaluate, in words."""
    if settings.average_last:
        return f"average of the last {settings.average_last}"
    return settings.checkpoint


def defaults_table() -> str:
    """Every paper's defaults, one line each (fairseq-ctx-evaluate --help)."""
    header = ("--paper", "--beam", "--lenpen", "checkpoint of --save-dir", "--max-len-a/-b", "--compound-split")
    rows = [(name + (" (default)" if name == DEFAULT_PAPER else ""), str(s.beam), str(s.lenpen), checkpoint_choice(s),
             f"{s.max_len_a} / {s.max_len_b}", s.compound_split) for name, s in PAPER_DEFAULTS.items()]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]]
    return "\n".join("  " + line for line in lines)
