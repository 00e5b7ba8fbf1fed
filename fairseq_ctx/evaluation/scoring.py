"""BLEU as the papers report it, significance, and BLEU by source length.

* ``score``: sacreBLEU on the detokenised hypotheses against the raw references, with its
  signature (tokeniser per target language: ``zh``, ``ja-mecab``, else ``13a``).
* ``tokenized_bleu``: multi-bleu.perl-style BLEU on tokenised text (the papers' "case-
  sensitive 4-gram BLEU"): hypotheses and references are tokenised with the same
  tokeniser as the training data (Moses / jieba / MeCab), optionally compound-split
  (En-De, Vaswani et al.'s get_ende_bleu.sh: ``s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g``), then
  scored by sacreBLEU with ``tokenize='none'`` (the same n-gram statistics as multi-bleu).
* ``paired_bootstrap``: Koehn (2004) paired bootstrap resampling via sacreBLEU's
  ``PairedTest(test_type='bs')`` (Yang / Wang / Cao / Iida all mark significance this way).
* ``bleu_by_length``: BLEU of each source-length bucket of ``width`` words (0-9, 10-19,
  ...; Iida Tables 3-4, Yang Figure 5), sacreBLEU and tokenised.
"""
import re
from typing import Dict, List, Optional, Sequence

import sacrebleu

from ..atomic import atomic_path

COMPOUND = re.compile(r"(\S)-(\S)")


def sacrebleu_tokenizer(lang):
    return {"zh": "zh", "ja": "ja-mecab"}.get(lang, "13a")


def _corpus_bleu(hypotheses, references, lang):
    _check(hypotheses, references)
    bleu = sacrebleu.metrics.BLEU(tokenize=sacrebleu_tokenizer(lang))
    return bleu, bleu.corpus_score(hypotheses, [references])


def score(hypotheses, references, tgt):
    """sacreBLEU of detokenised hypotheses against the raw references, with its signature."""
    bleu, result = _corpus_bleu(hypotheses, references, tgt)
    return {"bleu": round(result.score, 2), "signature": str(bleu.get_signature()), "text": str(result)}


def length_statistics(hypotheses, references, lang):
    """What corpus BLEU is made of, and chrF: the brevity penalty, output / reference length
    (sacreBLEU's tokens), sacreBLEU's n-gram precisions (in %), BLEU without its brevity
    penalty (their geometric mean, as sacreBLEU takes it, smoothing included: BLEU = BP x
    that; None for no output at all) and sacreBLEU's chrF (β = 2, weighted towards recall)
    with its signature. The parts are not independent: a shorter output lowers BP and chrF
    and tends to raise the precisions."""
    _, bleu = _corpus_bleu(hypotheses, references, lang)
    chrf_metric = sacrebleu.metrics.CHRF()
    chrf = chrf_metric.corpus_score(hypotheses, [references])
    return {"bp": round(bleu.bp, 4), "ratio": round(bleu.sys_len / bleu.ref_len, 4) if bleu.ref_len else None,
            "sys_len": bleu.sys_len, "ref_len": bleu.ref_len, "precisions": [round(x, 2) for x in bleu.precisions],
            # no output (BP 0): no n-gram, no precision to average
            "bleu_without_bp": round(bleu.score / bleu.bp, 2) if bleu.sys_len else None, "chrf": round(chrf.score, 2),
            "chrf_signature": str(chrf_metric.get_signature())}


def sentence_statistics(hypotheses, references, lang):
    """sacreBLEU's per-sentence sufficient statistics (hypothesis and reference length,
    n-gram matches and totals): corpus BLEU is :func:`bleu_of_statistics` of their sum."""
    _check(hypotheses, references)
    bleu = sacrebleu.metrics.BLEU(tokenize=sacrebleu_tokenizer(lang))
    return bleu._extract_corpus_statistics(hypotheses, [references])


def bleu_of_statistics(lang):
    """Summed :func:`sentence_statistics` -> corpus BLEU, as sacreBLEU computes it."""
    bleu = sacrebleu.metrics.BLEU(tokenize=sacrebleu_tokenizer(lang))
    return lambda stats: bleu._compute_score_from_stats(list(stats)).score


def compound_split(line: str) -> str:
    # re.sub is non-overlapping like perl's s///g, so "a-b-c" -> "a ##AT##-##AT## b-c",
    # exactly what get_ende_bleu.sh produces
    return COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


def tokenize_lines(lines: Sequence[str], lang: str, compound: bool = False) -> List[str]:
    from ..data.tokenize import tokenizer

    tok = tokenizer(lang)
    out = [tok(line.strip()) for line in lines]
    return [compound_split(line) for line in out] if compound else out


def _check(hypotheses, references):
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")


def tokenized_bleu(hypotheses, references, lang, compound: Optional[bool] = None) -> Dict:
    """BLEU on tokenised text; ``compound`` defaults to True for German."""
    _check(hypotheses, references)
    compound = (lang == "de") if compound is None else compound
    hyp = tokenize_lines(hypotheses, lang, compound)
    ref = tokenize_lines(references, lang, compound)
    bleu = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    result = bleu.corpus_score(hyp, [ref])
    return {"bleu": round(result.score, 2), "compound_split": compound, "text": str(result),
            "signature": str(bleu.get_signature()) + f"|pretok:{lang}" + ("|compound-split" if compound else "")}


def sacre_bleu(hypotheses, references, lang):
    return _corpus_bleu(hypotheses, references, lang)[1].score


def compound_flag(setting: str) -> Optional[bool]:
    """--compound-split auto / yes / no -> the ``compound`` argument (None: for German)."""
    return {"auto": None, "yes": True, "no": False}[setting]


def paired_test(baseline, system, references, metric, samples=1000, seed=12345):
    """sacreBLEU's paired bootstrap resampling (Koehn 2004; the API behind ``--paired-bs``)
    with a fixed seed: (signature, baseline result, system result); the system's carries
    ``p_value``, and both the bootstrap ``mean`` and 95% ``ci``."""
    from sacrebleu.significance import PairedTest

    _check(baseline, references)
    _check(system, references)
    test = PairedTest([("baseline", baseline), ("system", system)], {"BLEU": metric}, [references],
                      test_type="bs", n_samples=samples)
    test._seed = seed  # sacreBLEU's own knob (SACREBLEU_SEED); fixed for reproducible p-values
    signatures, scores = test()
    base, ours = scores["BLEU"]
    return str(signatures["BLEU"]), base, ours


def paired_bootstrap(baseline, system, references, lang, samples=1000, seed=12345, tokenized=False,
                     compound: Optional[bool] = None):
    """p-value of ``system`` vs ``baseline`` (:func:`paired_test`); ``tokenized``: on
    tokenised BLEU, compound-split as :func:`tokenized_bleu` (``compound`` None: for German)."""
    _check(baseline, references)
    _check(system, references)
    if tokenized:
        compound = (lang == "de") if compound is None else compound
        baseline, system = tokenize_lines(baseline, lang, compound), tokenize_lines(system, lang, compound)
        references = tokenize_lines(references, lang, compound)
        metric = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    else:
        metric = sacrebleu.metrics.BLEU(tokenize=sacrebleu_tokenizer(lang))
    _, base, ours = paired_test(baseline, system, references, metric, samples, seed)
    return {"baseline": round(base.score, 2), "system": round(ours.score, 2),
            "delta": round(ours.score - base.score, 2), "p_value": ours.p_value, "samples": samples,
            "p_value_meaningful": p_value_meaningful(base, ours, samples),
            "on": "tokenized BLEU" if tokenized else "sacreBLEU"}


def p_value_meaningful(base, ours, samples):
    """False when no resample differs (identical outputs, or BLEU 0 for both): sacreBLEU's p is
    then its floor, 1 / (samples + 1), which reads as significant (see significance_mark); equal
    scores of different outputs give an ordinary p (~0.4). ``base`` / ``ours``: paired_test's scores."""
    return not (ours.score == base.score and ours.p_value <= 1.0 / (samples + 1) + 1e-12)


def significance_mark(p_value, delta=1.0, glyphs=("\u2191", "\u21d1")):
    """The papers' marks for a system BETTER than the baseline: double for p < 0.01,
    single for p < 0.05. sacreBLEU's bootstrap p-value is meaningless without variance
    (identical outputs get p = 1/(n+1)), hence the delta > 0 condition."""
    if delta <= 0:
        return ""
    return glyphs[1] if p_value < 0.01 else glyphs[0] if p_value < 0.05 else ""


def bleu_by_length(source_lengths, hypotheses, references, lang, width=10, tokenized=True,
                   compound: Optional[bool] = None):
    """Rows {"bucket": "0-9", "sentences": n, "bleu": ...}, ascending, empty buckets omitted."""
    _check(hypotheses, references)
    if len(source_lengths) != len(references):
        raise ValueError(f"{len(source_lengths)} source lengths but {len(references)} references")
    groups: Dict[int, List[int]] = {}
    for i, length in enumerate(source_lengths):
        groups.setdefault(length // width, []).append(i)
    rows = []
    for bucket in sorted(groups):
        ids = groups[bucket]
        hyp = [hypotheses[i] for i in ids]
        ref = [references[i] for i in ids]
        bleu = tokenized_bleu(hyp, ref, lang, compound)["bleu"] if tokenized else round(sacre_bleu(hyp, ref, lang), 2)
        rows.append({"bucket": f"{bucket * width}-{bucket * width + width - 1}", "sentences": len(ids), "bleu": bleu})
    return rows


def markdown_table(header, rows):
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def plot_length_buckets(series: Dict[str, List[Dict]], path, title="BLEU by source length"):
    """series: system name -> bleu_by_length rows. Needs matplotlib (optional dependency)."""
    from ..analysis.plotting import pyplot

    try:
        plt = pyplot()
    except ImportError as error:
        raise RuntimeError("PNG plots need matplotlib (pip install matplotlib); the tables were written") from error
    buckets = sorted({r["bucket"] for rows in series.values() for r in rows}, key=lambda b: int(b.split("-")[0]))
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, rows in series.items():
        by = {r["bucket"]: r["bleu"] for r in rows}
        ax.plot(range(len(buckets)), [by.get(b) for b in buckets], marker="o", label=name)
    ax.set_xticks(range(len(buckets)))
    ax.set_xticklabels(buckets, rotation=45)
    ax.set_xlabel("source length (words)")
    ax.set_ylabel("BLEU")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as partial:  # an interrupted plot leaves no PNG that looks whole
        fig.savefig(partial, dpi=120, format="png")
    plt.close(fig)
