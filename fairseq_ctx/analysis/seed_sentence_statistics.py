"""Seeds and test sentences both sampled: an interval for "system - baseline" that holds
when training is repeated with other seeds AND the test set is drawn again.

``seed_statistics.seed_difference`` treats the test set as fixed (its unit is the seed);
sacreBLEU's paired bootstrap treats the outputs as fixed (its unit is the sentence). A
comparison of architectures over several seeds on one test set is a crossed design: every
seed pair translates every sentence. Its per-(seed, sentence) difference is modelled as

    y_si = mu + a_s + b_i + e_si

with a seed effect a_s (var sigma_seed^2), a sentence effect b_i shared by every seed
(var sigma_sentence^2: sentences on which the system is better whatever the seed) and a
seed x sentence interaction e_si (var sigma_interaction^2), all independent. The mean over S
seeds and N sentences then has variance

    V = sigma_seed^2 / S + sigma_sentence^2 / N + sigma_interaction^2 / (S N).

The seed-level t interval estimates sigma_seed^2 / S + sigma_interaction^2 / (S N) from the
spread of the S per-seed differences and leaves out sigma_sentence^2 / N (it holds the
sentences fixed); a bootstrap over seeds and sentences together (the "pigeonhole" bootstrap)
counts the interaction about three times (Owen 2007), which over-widens where it dominates.

Estimand: the expected difference, over training seeds, in corpus BLEU on the population the
test sentences are drawn from (for the demo: the hash-split Tatoeba held-out pairs).

Corpus BLEU is not a mean over sentences. Each run's BLEU is linearised by the jackknife:
sentence i's contribution is (N - 1) (BLEU - BLEU without sentence i), centred, so that a
run's contributions average to zero and y_si = (BLEU_sys,s - BLEU_base,s) + (contribution of
i to the system's BLEU - to the baseline's); the mean of y over sentences is the seed's exact
corpus-BLEU difference. Mean squares of the two-way ANOVA without replication (Searle,
Casella & McCulloch 1992, ch. 4; "G theory"'s p x i design, Brennan 2001):

    MS_seed = N sum_s (ybar_s - ybar)^2 / (S - 1)           E = s_int^2 + N s_seed^2
    MS_sent = S sum_i (ybar_i - ybar)^2 / (N - 1)           E = s_int^2 + S s_sent^2
    MS_int  = sum (y_si - ybar_s - ybar_i + ybar)^2 / ((S-1)(N-1))     E = s_int^2

V is estimated as

    V = [max(MS_seed, MS_int) + max(MS_sent - MS_int, 0)] / (S N)

i.e. sigma_seed^2 and sigma_sentence^2 set to 0 where estimated below zero. Two bounds hold for it:
it is never below the seed-level variance MS_seed / (S N) (what the seed-level t uses), and never
below the variance that drawing other sentences for these seeds' models alone gives,
sigma_sentence^2 / N + sigma_interaction^2 / (S N) (law of total variance; re-splitting the demo's
2,000 held-out sentences at random reproduces its size). The first bound alone is not enough:
where the per-seed differences agree more than the interaction implies (F = MS_seed / MS_int
well below 1) the seed-level variance falls below the sentence-sampling one. The interval is
mean +- t(df) sqrt(V), df by Satterthwaite (1946) with the first term counted at S - 1 degrees
of freedom also when MS_int stands in for MS_seed (conservative; it keeps V and df continuous
where F crosses 1, and V continuous where the sentence component crosses zero, where df moves
by at most a relative S / (N - 1)). The components
(sigma_seed^2 = (MS_seed - MS_int) / N may come out negative), the sentence term's share of V and
the F ratio with its lower-tail probability (small: the per-seed differences agree more than
the model expects) are reported.

``set_gap``: where two sets are drawn from one pool (test and valid of the demo) they measure
the same quantity; the mean over seeds of (difference on one - on the other) has, under the
model, only sentence sampling as variance (the seeds' models are the same on both): a gap far
outside it says the sets differ or the model misses a structure.
"""
import math
from typing import Callable, Dict, Mapping, Sequence

import numpy as np

Stats = Sequence[Sequence[float]]


def jackknife_contributions(stats: Stats, score: Callable[[np.ndarray], float]):
    """(corpus score, per-sentence contributions) of one run.

    ``stats``: one row of additive sufficient statistics per sentence (sacreBLEU's for BLEU);
    ``score``: summed statistics -> corpus score. Contribution i = (N - 1) (score - score
    without sentence i), centred to average zero (N >= 2)."""
    rows = np.asarray(stats, dtype=np.float64)
    n = len(rows)
    if n < 2:
        raise ValueError(f"{n} sentence(s): the jackknife needs at least 2")
    total = rows.sum(axis=0)
    full = float(score(total))
    loo = np.array([score(total - row) for row in rows], dtype=np.float64)
    pseudo = (n - 1) * (full - loo)
    return full, pseudo - pseudo.mean()


def _undefined(out, note):
    out.update(dict.fromkeys(("mean_diff", "se", "df", "ci_low", "ci_high", "p", "components", "mean_squares",
                              "variance_shares", "seed_only_se", "seed_spread_f", "seed_spread_p_lower",
                              "sentence_sampling_variance"), None))
    out["note"] = note
    return out


def seed_and_sentence_difference(system: Mapping[object, Stats], baseline: Mapping[object, Stats],
                                 score: Callable[[np.ndarray], float], alpha: float = 0.05) -> Dict:
    """Mean over seeds of (system score - baseline score), with a 1 - alpha interval under
    seed AND sentence sampling (variance components of the crossed seed x sentence design).

    ``system`` / ``baseline``: {seed: per-sentence statistics} on the same sentences in the
    same order, paired on the seeds both have. Returns seeds, n_seeds, n_sentences,
    per_seed (exact score differences), mean_diff, se, df, ci_low / ci_high, p (two-sided,
    t with Satterthwaite df), components (sigma^2 of seed / sentence / interaction as estimated,
    negative ones kept negative), truncated (those set to 0 for V), mean_squares,
    variance_shares (of V: "seed", the seed term max(MS_seed, MS_int) / (S N), and "sentence"),
    seed_only_se (what the seed-level t uses), seed_spread_f (MS_seed / MS_int) and
    seed_spread_p_lower (P(F <= that) when sigma_seed^2 = 0), sentence_sampling_variance (the part
    of the mean's variance that drawing other sentences for these seeds' models would give,
    for ``set_gap``), and a note where something is undefined. JSON-serialisable; undefined
    values are None."""
    from scipy import stats as st

    seeds = sorted(set(system) & set(baseline))
    out = {"seeds": seeds, "n_seeds": len(seeds), "alpha": alpha, "confidence": 1 - alpha, "truncated": [],
           "n_sentences": None, "per_seed": None}
    if not seeds:
        return _undefined(out, "no paired seeds")
    rows = []
    for s in seeds:
        if len(system[s]) != len(baseline[s]):
            raise ValueError(f"seed {s}: {len(system[s])} system sentences vs {len(baseline[s])} baseline sentences")
        a, ca = jackknife_contributions(system[s], score)
        b, cb = jackknife_contributions(baseline[s], score)
        if not (math.isfinite(a) and math.isfinite(b)):
            return _undefined(out, f"non-finite score in seed {s}: no statistics")
        rows.append((a - b) + ca - cb)
    lengths = {len(r) for r in rows}
    if len(lengths) != 1:
        raise ValueError(f"the seeds' outputs cover different numbers of sentences: {sorted(lengths)}")
    y = np.vstack(rows)
    S, N = y.shape
    out["n_sentences"] = N
    per_seed = y.mean(axis=1)
    out["per_seed"] = [float(x) for x in per_seed]
    grand = float(y.mean())
    out["mean_diff"] = grand
    if S < 2:
        _undefined(out, "one seed: seed and interaction variance cannot be told apart, no interval")
        out["mean_diff"] = grand
        return out
    per_sentence = y.mean(axis=0)
    df_seed, df_sent, df_int = S - 1, N - 1, (S - 1) * (N - 1)
    ms_seed = N * float(((per_seed - grand) ** 2).sum()) / df_seed
    ms_sent = S * float(((per_sentence - grand) ** 2).sum()) / df_sent
    residual = y - per_seed[:, None] - per_sentence[None, :] + grand
    ms_int = float((residual ** 2).sum()) / df_int
    seed_var, sent_var = (ms_seed - ms_int) / N, (ms_sent - ms_int) / S  # may be negative
    out["components"] = {"seed": seed_var, "sentence": sent_var, "interaction": ms_int}
    out["mean_squares"] = {"seed": ms_seed, "sentence": ms_sent, "interaction": ms_int}
    keep_sent = sent_var > 0
    out["truncated"] = [name for name, var in (("seed", seed_var), ("sentence", sent_var)) if var <= 0]
    seed_term = max(ms_seed, ms_int)  # never below the interaction: the sentence-sampling floor
    parts = {"seed": seed_term / (S * N), "sentence": max(sent_var, 0.0) / N}
    v = sum(parts.values())
    # V (S N) as a combination of mean squares: the seed term (at S - 1 df, also where MS_int
    # stands in for MS_seed), and MS_sent - MS_int where kept
    terms = [(1.0, seed_term, df_seed), (1.0 if keep_sent else 0.0, ms_sent, df_sent),
             (-1.0 if keep_sent else 0.0, ms_int, df_int)]
    out["seed_only_se"] = math.sqrt(ms_seed / (S * N))
    if ms_int > 0:
        f = ms_seed / ms_int
        out["seed_spread_f"] = f
        out["seed_spread_p_lower"] = float(st.f.cdf(f, df_seed, df_int))
    else:
        out["seed_spread_f"] = out["seed_spread_p_lower"] = None
    out["sentence_sampling_variance"] = max(sent_var, 0.0) / N + ms_int / (S * N)
    if v <= 0:
        out.update(se=0.0, df=None, ci_low=None, ci_high=None, p=None, variance_shares=None,
                   note="no variance at any level: no interval")
        return out
    out["variance_shares"] = {k: x / v for k, x in parts.items()}
    denominator = sum((c * ms) ** 2 / d for c, ms, d in terms if c)
    df = (v * S * N) ** 2 / denominator if denominator > 0 else math.inf
    se = math.sqrt(v)
    half = float(st.t.ppf(1 - alpha / 2, df)) * se
    out.update(se=se, df=df if math.isfinite(df) else None, ci_low=grand - half, ci_high=grand + half,
               p=float(2 * st.t.sf(abs(grand) / se, df)), note=None)
    return out


def set_gap(first: Mapping, second: Mapping) -> Dict:
    """Mean over seeds of (difference on one set - on another), for two results of
    :func:`seed_and_sentence_difference` on the same seeds' models, with its standard deviation
    under the model when both sets are drawn from one pool (sentence sampling only: the seed
    effects are the same on both), z and a two-sided normal p."""
    from scipy import stats as st

    out = {"per_seed": None, "mean": None, "model_sd": None, "z": None, "p": None, "note": None}
    if first.get("per_seed") is None or second.get("per_seed") is None or first.get("seeds") != second.get("seeds"):
        out["note"] = "the two sets do not have the same seeds' differences"
        return out
    gaps = [a - b for a, b in zip(first["per_seed"], second["per_seed"])]
    out["per_seed"], out["mean"] = gaps, sum(gaps) / len(gaps)
    variances = (first.get("sentence_sampling_variance"), second.get("sentence_sampling_variance"))
    if None in variances or sum(variances) <= 0:
        out["note"] = "no sentence-sampling variance: no test"
        return out
    sd = math.sqrt(sum(variances))
    out.update(model_sd=sd, z=out["mean"] / sd, p=float(2 * st.norm.sf(abs(out["mean"]) / sd)))
    return out
