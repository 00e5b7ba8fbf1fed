"""Seed-level statistics: is a system better than its baseline across training runs?

sacreBLEU's paired bootstrap (``scoring.paired_bootstrap``) resamples test sentences for
two FIXED outputs: it says whether one training run beats another on this test set, not
whether the architecture beats the baseline when training is repeated with another seed.
For that the unit is the seed: ``seed_difference`` pairs the system's and the baseline's
score seed by seed (same seed, same data order and initialisation stream) and tests the
mean of the per-seed differences

* with a paired t-test and a t-distribution 95 % confidence interval of the mean
  difference (assumes the differences are roughly normal; with 3 seeds the interval is
  wide: t(0.975, df=2) = 4.30), and
* with the exact Wilcoxon signed-rank test (no normality assumption), whose two-sided
  p-value can never fall below 2 / 2**n for n non-zero differences: 0.25 with 3 seeds,
  0.0625 with 5; p < 0.05 needs at least 6 seeds. ``wilcoxon_min_p`` and
  ``wilcoxon_can_reach_alpha`` say so in the output.

``detectable_difference`` turns the spread of the per-seed differences into the true mean
difference the paired t-test over these seeds finds (p < alpha) with 80 % probability, and
``seeds_needed`` into the seeds a given difference needs: design figures for the next study
(how many seeds; how wide a margin a reading of "about 0" can hope to meet), not bounds on an
observed difference (its CI is that; "about 0 within a margin" needs the 90 % CI inside the
margin: ``equivalence_test``, two one-sided tests, with ``equivalence_power`` and
``equivalence_seeds_needed`` as its design figures). All of these take the observed sd as the
true one, itself uncertain (``sd_factor_interval``: with 5 seeds the true sd is within 0.6-2.9 times the
estimate).

``curve_summary`` aggregates per-seed curves (update count -> value) into mean, sample
standard deviation and min-max at the update counts every seed has.

Everything returned is JSON-serialisable; undefined quantities (a CI with one seed, a CI or
p-value with zero variance) are ``None``, never NaN. A non-finite score (a training that
diverged: fairseq logs ``loss inf`` / ``nan``) is not averaged away: the statistics it
enters are ``None`` and a note / ``non_finite`` names the seed.
"""
import functools
import math
import statistics
from typing import Dict, Mapping, Optional, Sequence, Union

Number = Union[int, float]


def _finite(x) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def seed_difference(system: Union[Mapping, Sequence[Number]], baseline: Union[Mapping, Sequence[Number]],
                    alpha: float = 0.05, higher_is_better: bool = True) -> Dict:
    """Seed-paired comparison of ``system`` vs ``baseline`` scores.

    ``system`` / ``baseline``: {seed: score} (paired on the seeds both have) or two
    equally long sequences (paired by position). Differences are system - baseline.

    Returns n, seeds (when given as mappings), diffs, mean_diff, sd_diff (sample),
    se, df, t, ci_low / ci_high (two-sided 1 - alpha t interval of the mean difference),
    p_t (two-sided paired t-test), p_wilcoxon (two-sided exact Wilcoxon signed-rank,
    zero differences dropped, ties given mid-ranks), wilcoxon_n (non-zero differences),
    wilcoxon_min_p (2 / 2**wilcoxon_n, the smallest p the test can give),
    wilcoxon_can_reach_alpha, better / worse / ties (seed counts: a positive difference is
    better when ``higher_is_better`` (BLEU), a negative one when not (a loss)),
    detectable_80 (``detectable_difference`` at these n seeds and sd_diff: the |mean
    difference| this t-test finds with 80 % power; None without spread), and a ``note`` when
    a quantity is undefined.
    """
    from scipy import stats

    if isinstance(system, Mapping) and isinstance(baseline, Mapping):
        seeds = sorted(set(system) & set(baseline))
        pairs = [(float(system[s]), float(baseline[s])) for s in seeds]
    else:
        if len(system) != len(baseline):
            raise ValueError(f"{len(system)} system scores vs {len(baseline)} baseline scores")
        seeds = None
        pairs = [(float(a), float(b)) for a, b in zip(system, baseline)]
    # rounded: 30.12 - 29.87 is 0.2500000000000036 in floating point; equal differences
    # must stay equal (zero spread) and zero ones zero
    names = seeds if seeds is not None else range(1, len(pairs) + 1)
    bad = [k for k, (a, b) in zip(names, pairs) if not (math.isfinite(a) and math.isfinite(b))]
    diffs = [round(a - b, 10) if math.isfinite(a - b) else None for a, b in pairs]
    if bad:  # a diverged run: no mean, CI or test says anything about it
        out = {"n": len(diffs), "diffs": diffs, "alpha": alpha, "confidence": 1 - alpha, "higher_is_better":
               higher_is_better, "note": f"non-finite score in {'seed' if seeds is not None else 'pair'}(s) "
               f"{', '.join(map(str, bad))} (a diverged training?): no statistics"}
        out.update(dict.fromkeys(("mean_diff", "sd_diff", "se", "df", "t", "ci_low", "ci_high", "p_t", "detectable_80",
                                  "p_wilcoxon", "wilcoxon_n", "wilcoxon_min_p", "better", "worse", "ties"), None))
        out["wilcoxon_can_reach_alpha"] = False
        if seeds is not None:
            out["seeds"] = seeds
        return out
    n = len(diffs)
    out = {
        "n": n, "diffs": diffs, "alpha": alpha, "confidence": 1 - alpha,
        "mean_diff": None, "sd_diff": None, "se": None, "df": None, "t": None,
        "ci_low": None, "ci_high": None, "p_t": None, "p_wilcoxon": None, "detectable_80": None,
        "wilcoxon_n": sum(1 for d in diffs if d != 0),
        "better": sum(1 for d in diffs if (d > 0 if higher_is_better else d < 0)),
        "worse": sum(1 for d in diffs if (d < 0 if higher_is_better else d > 0)),
        "ties": sum(1 for d in diffs if d == 0), "higher_is_better": higher_is_better, "note": None,
    }
    if seeds is not None:
        out["seeds"] = seeds
    m = out["wilcoxon_n"]
    out["wilcoxon_min_p"] = min(1.0, 2.0 / 2 ** m) if m else None
    out["wilcoxon_can_reach_alpha"] = bool(m and out["wilcoxon_min_p"] < alpha)
    notes = []
    if n == 0:
        out["note"] = "no paired seeds"
        return out
    mean = statistics.fmean(diffs)
    out["mean_diff"] = mean
    if n < 2:
        notes.append("one seed: no spread, no CI, no test")
    else:
        sd = statistics.stdev(diffs)
        se = sd / math.sqrt(n)
        df = n - 1
        out.update(sd_diff=sd, se=se, df=df)
        if se > 0:
            half = stats.t.ppf(1 - alpha / 2, df) * se
            out.update(ci_low=mean - half, ci_high=mean + half)
            t = mean / se
            out["t"] = t
            out["p_t"] = _finite(2 * stats.t.sf(abs(t), df))
            out["detectable_80"] = detectable_difference(sd, n, alpha, 0.8)
        elif mean != 0:
            # zero variance (e.g. BLEU rounded to 2 decimals, few seeds): the t-test is
            # undefined, not certain
            notes.append("identical non-zero differences in every seed: zero variance, no CI, t-test undefined")
            out["t"] = None
            out["p_t"] = None
        else:
            notes.append("all differences zero: no CI, no t-test")
    if m == 0:
        notes.append("all differences zero: no Wilcoxon test")
    else:
        out["p_wilcoxon"] = _finite(signed_rank_p(diffs) if m <= 20 else stats.wilcoxon(
            diffs, zero_method="wilcox", alternative="two-sided", method="approx", correction=False).pvalue)
        if not out["wilcoxon_can_reach_alpha"]:
            notes.append(f"Wilcoxon with {m} non-zero difference{'s' if m != 1 else ''} cannot reach "
                         f"p < {alpha:g} (smallest two-sided p = {out['wilcoxon_min_p']:.3g}; "
                         f"needs {wilcoxon_seeds_needed(alpha)})")
    out["note"] = "; ".join(notes) or None
    return out


def signed_rank_p(diffs) -> float:
    """Two-sided exact Wilcoxon signed-rank p-value by enumerating all 2**m sign flips of the
    mid-ranks of the m non-zero |differences| (ties keep their mid-ranks in every flip, the
    exact permutation distribution conditional on the observed ranks; scipy's "exact" method
    ignores ties)."""
    import itertools

    nonzero = [d for d in diffs if d != 0]
    order = sorted(range(len(nonzero)), key=lambda i: abs(nonzero[i]))
    ranks = [0.0] * len(nonzero)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and abs(nonzero[order[j + 1]]) == abs(nonzero[order[i]]):
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    total = sum(ranks)
    observed = sum(r for r, d in zip(ranks, nonzero) if d > 0)
    # two-sided: as or more extreme than the observed W+ about its mean total / 2
    distance = abs(observed - total / 2) - 1e-9
    extreme = sum(1 for signs in itertools.product((0, 1), repeat=len(ranks))
                  if abs(sum(r for r, sign in zip(ranks, signs) if sign) - total / 2) >= distance)
    return extreme / 2 ** len(ranks)


def wilcoxon_seeds_needed(alpha: float = 0.05) -> int:
    """Smallest n for which the exact two-sided signed-rank test can give p < alpha."""
    n = 1
    while 2.0 / 2 ** n >= alpha:
        n += 1
    return n


def _check_levels(alpha, power):
    if not 0 < alpha < power < 1:
        raise ValueError(f"need 0 < alpha < power < 1 (alpha {alpha}, power {power})")


def t_test_power(difference: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Probability that the two-sided paired t-test over ``n`` seeds gives p < ``alpha`` when the
    per-seed differences are normal with mean ``difference`` and standard deviation ``sd``: T is
    noncentral t with n - 1 degrees of freedom and noncentrality difference * sqrt(n) / sd."""
    if n < 2 or not sd > 0:
        raise ValueError(f"power needs at least 2 seeds and a positive sd (n {n}, sd {sd})")
    return _power_in_sd_units(abs(difference) / sd, n, alpha)


def _power_in_sd_units(effect, n, alpha):
    from scipy import stats

    df, ncp = n - 1, effect * math.sqrt(n)
    crit = stats.t.ppf(1 - alpha / 2, df)
    # the wrong-sign rejections: P(T < -crit) <= P(T < 0) = Phi(-ncp); scipy's nct gives NaN for
    # that tail at a large ncp, where it is below any figure this is read to
    wrong_sign = stats.nct.cdf(-crit, df, ncp) if stats.norm.cdf(-ncp) > 1e-12 else 0.0
    return float(stats.nct.sf(crit, df, ncp) + wrong_sign)


@functools.lru_cache(maxsize=256)
def _detectable_effect(n, alpha, power):
    """detectable_difference in units of the sd (it scales with the sd)."""
    from scipy.optimize import brentq

    high = 1.0
    while _power_in_sd_units(high, n, alpha) < power:
        high *= 2
    return float(brentq(lambda e: _power_in_sd_units(e, n, alpha) - power, 0.0, high, xtol=1e-10))


def detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> Optional[float]:
    """The |true mean difference| at which the paired t-test over ``n`` seeds (differences of
    standard deviation ``sd``) reaches p < ``alpha`` with probability ``power`` (a design figure:
    a true difference this large is missed 1 - power of the time; not a bound on the difference
    observed, which is the CI's); None for fewer than 2 seeds or no spread."""
    _check_levels(alpha, power)
    if n < 2 or not (sd and sd > 0 and math.isfinite(sd)):
        return None
    return sd * _detectable_effect(int(n), float(alpha), float(power))


def sd_factor_interval(n: int, confidence: float = 0.95):
    """(low, high): the true sd lies within (low x, high x) the sample sd of ``n`` normal values
    with probability ``confidence`` (chi-square with n - 1 degrees of freedom): how uncertain an
    sd plugged into ``detectable_difference`` / ``seeds_needed`` is. Skewed: the sample sd is
    below the true one more often than not, so plugged-in figures are optimistic more often."""
    from scipy import stats

    df, tail = n - 1, (1 - confidence) / 2
    return math.sqrt(df / stats.chi2.ppf(1 - tail, df)), math.sqrt(df / stats.chi2.ppf(tail, df))


def _smallest_enough(enough, low, most):
    """The smallest n in (low, most] with enough(n), for an ``enough`` that stays true once it is
    (a power growing with n): doubled until enough, then the gap halved; None if not by ``most``."""
    high = max(low + 1, min(2 * low, most))
    while not enough(high):
        if high >= most:
            return None
        low, high = high, min(2 * high, most)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


def seeds_needed(difference: float, sd: float, alpha: float = 0.05, power: float = 0.8,
                 most: int = 10_000) -> Optional[int]:
    """Smallest number of seeds whose paired t-test finds a true mean difference ``difference``
    (differences of standard deviation ``sd``) with probability ``power``; None if not within
    ``most`` seeds or the difference is 0. For planning, pass an upper confidence limit of the sd
    (``sd_factor_interval``), not the estimate alone."""
    _check_levels(alpha, power)
    if not difference or not sd > 0:
        return None

    def enough(n):
        return t_test_power(difference, sd, n, alpha) >= power

    return _smallest_enough(enough, 1, most)  # the power grows with n


def _check_margin_and_alpha(margin, alpha):
    if not (margin > 0 and math.isfinite(margin)):
        raise ValueError(f"the margin must be positive and finite (got {margin})")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5) (got {alpha})")


def equivalence_test(diffs: Sequence[Number], margin: float, alpha: float = 0.05) -> Dict:
    """Two one-sided t-tests (TOST) that the mean of the per-seed differences ``diffs`` lies within
    (-margin, +margin): the reading "about 0 within a margin", which "not separated" is not.
    p = the larger of P(T >= (mean + margin) / se) and P(T <= (mean - margin) / se) (T: t with
    n - 1 degrees of freedom); equivalent when p < alpha, which is the (1 - 2 alpha) t interval
    lying inside the margin (returned as ci_low / ci_high: the 90 % interval at alpha 0.05).
    With no spread the limits as se -> 0: p 0 inside the margin, 1 outside, the interval the mean.
    Fewer than 2 seeds or a non-finite difference: p, interval and verdict None.
    The margin must be set before the result is seen."""
    from scipy import stats

    _check_margin_and_alpha(margin, alpha)
    xs = [float(d) for d in diffs]
    n = len(xs)
    out = {"n": n, "margin": margin, "alpha": alpha, "p": None, "ci_low": None, "ci_high": None,
           "equivalent": None}
    if n < 2 or not all(math.isfinite(x) for x in xs):
        return out
    mean, se = statistics.fmean(xs), statistics.stdev(xs) / math.sqrt(n)
    if se == 0:
        out.update(p=0.0 if abs(mean) < margin else 1.0, ci_low=mean, ci_high=mean)
    else:
        df = n - 1
        half = float(stats.t.ppf(1 - alpha, df)) * se
        out.update(ci_low=mean - half, ci_high=mean + half,
                   p=float(max(stats.t.sf((mean + margin) / se, df), stats.t.cdf((mean - margin) / se, df))))
    out["equivalent"] = out["p"] < alpha
    return out


def _check_equivalence_design(sd, margin, alpha, true_difference):
    if not math.isfinite(true_difference):
        raise ValueError(f"the true difference must be finite (got {true_difference})")
    if not (sd > 0 and math.isfinite(sd)):
        raise ValueError(f"the sd must be positive and finite (got {sd})")
    _check_margin_and_alpha(margin, alpha)


def equivalence_power(true_difference: float, sd: float, n: int, margin: float, alpha: float = 0.05) -> float:
    """Probability that ``equivalence_test`` over ``n`` seeds finds the mean difference within
    (-margin, +margin) when the per-seed differences are normal with mean ``true_difference`` and
    standard deviation ``sd``. The sample mean (normal, sd / sqrt(n)) and sd (sd sqrt(V / (n - 1)),
    V chi-square with n - 1 degrees of freedom) are independent, so for each V the (1 - 2 alpha)
    interval's half-width h is fixed and the test succeeds when the mean lies in (-margin + h,
    margin - h): the power is that normal probability integrated over V's density, over the range
    holding all but ~1e-16 of V's law and with breakpoints at its mean and where the normal
    probability falls from its largest value to 0, so that neither a narrow chi-square peak (many
    seeds) nor a margin many sds wide escapes the quadrature (to ~1e-9; a few 1e-9 at 1e7 seeds).
    Raises ArithmeticError if the quadrature reports an error above 1e-7."""
    from scipy import integrate, stats

    _check_equivalence_design(sd, margin, alpha, true_difference)
    if isinstance(n, bool) or not math.isfinite(n) or int(n) != n or n < 2:
        raise ValueError(f"power needs a whole number of at least 2 seeds (got {n})")
    df, root_n = int(n) - 1, math.sqrt(n)
    crit, se_true = float(stats.t.ppf(1 - alpha, df)), sd / root_n
    distance = abs(true_difference)

    def v_of_half(half):  # the V at which the interval's half-width is ``half``
        return df * (half * root_n / (crit * sd)) ** 2

    def given_v(v):
        half = crit * sd * math.sqrt(v / df) / root_n
        if not half < margin:
            return 0.0
        inside = (stats.norm.cdf((margin - half - distance) / se_true)
                  - stats.norm.cdf((-margin + half - distance) / se_true))
        return float(inside) * float(stats.chi2.pdf(v, df))

    # V's law outside [low, high] holds < 2e-16; beyond V(margin) no mean is inside; the normal
    # probability falls from ~1 to ~0 as h crosses margin - |true_difference| (within a few se)
    low, high = float(stats.chi2.ppf(1e-16, df)), min(float(stats.chi2.isf(1e-16, df)), v_of_half(margin))
    if not high > low:
        return 0.0
    points = sorted({v for v in [float(df)] + [v_of_half(h) for h in (margin - distance - 6 * se_true,
                                                                       margin - distance,
                                                                       margin - distance + 6 * se_true) if h > 0]
                     if low < v < high})
    value, error = integrate.quad(given_v, low, high, points=points or None, epsabs=1e-11, epsrel=1e-9, limit=400)
    if not error <= 1e-7:
        raise ArithmeticError(f"equivalence_power({true_difference}, {sd}, {n}, {margin}, {alpha}): the quadrature's "
                              f"error estimate is {error:.2g}")
    return min(1.0, max(0.0, value))


def equivalence_seeds_needed(sd: float, margin: float, alpha: float = 0.05, power: float = 0.8,
                             true_difference: float = 0.0, most: int = 100_000) -> Optional[int]:
    """Smallest number of seeds at which ``equivalence_test`` (margin ``margin``) succeeds with
    probability ``power`` when the true mean difference is ``true_difference`` (0: really none) and
    the differences have standard deviation ``sd``; None when |true_difference| >= margin (the test
    is built to fail there) or not within ``most`` seeds. A design figure for an "about 0" reading,
    as ``seeds_needed`` is for "a difference"."""
    _check_levels(alpha, power)
    _check_equivalence_design(sd, margin, alpha, true_difference)
    if abs(true_difference) >= margin:
        return None

    def enough(n):
        return equivalence_power(true_difference, sd, n, margin, alpha) >= power

    # counted up over the first seeds: there the power is not monotone in n (a very small sample sd
    # now and then gives a narrow interval: 0.024 at 2 seeds, 0.018 at 4, margin sd / 2); beyond,
    # where it grows with n, doubled and then bisected as in seeds_needed
    counted = min(most, 64)
    found = next((n for n in range(2, counted + 1) if enough(n)), None)
    if found is not None or counted >= most:
        return found
    return _smallest_enough(enough, counted, most)


def curve_summary(per_seed: Mapping[object, Mapping[int, Number]]) -> Dict:
    """per_seed: {seed: {updates: value}} -> mean / sd / min / max over seeds, at the
    update counts every seed has (sorted); ``per_seed`` is kept (keys as strings, a
    non-finite value as None). At an update count where a seed's value is not finite
    (diverged), mean / sd / min / max are None and ``non_finite`` {updates: [seeds]} names it."""
    seeds = list(per_seed)
    common = sorted(set.intersection(*(set(int(u) for u in per_seed[s]) for s in seeds))) if seeds else []
    values = [[float(_lookup(per_seed[s], u)) for s in seeds] for u in common]
    non_finite = {u: [s for s, x in zip(seeds, v) if not math.isfinite(x)] for u, v in zip(common, values)}
    ok = [not non_finite[u] for u in common]

    def each(fn):
        return [fn(v) if good else None for v, good in zip(values, ok)]

    return {
        "updates": common,
        "mean": each(statistics.fmean),
        "sd": each(lambda v: statistics.stdev(v) if len(v) > 1 else 0.0),
        "min": each(min),
        "max": each(max),
        "n": len(seeds),
        "non_finite": {str(u): bad for u, bad in non_finite.items() if bad},
        "per_seed": {str(s): {str(int(u)): _finite(x) for u, x in sorted(per_seed[s].items(), key=lambda kv: int(kv[0]))}
                     for s in seeds},
    }


def _lookup(curve, updates):
    return curve[updates] if updates in curve else curve[str(updates)]
