"""Seed-level statistics and learning curves of fairseq_ctx/quality_compare.py.

* ``seed_difference`` against values computed here from the formulas (closed-form t
  distribution for df = 2, a numerically integrated t density for df = 5, the exact
  signed-rank distribution by enumerating sign patterns), not by calling scipy as the
  code does;
* parsing of fairseq-train's validation lines (an excerpt of a real log) and of the
  checkpoint names ``--save-interval-updates`` writes;
* the PNG; the training command; an end-to-end run of quality_compare.main with fake
  training / evaluation (resume, new curve points, an epoch-end curve point, an
  interrupted scoring);
* one real tiny run (fairseq-train + fairseq-generate on the tiny Tatoeba slice) whose
  curve point falls on an epoch's end.
"""
import argparse
import contextlib
import copy
import io
import itertools
import json
import math
import os
import pathlib
import random
import re
import shutil
import statistics
import types

import pytest

from fairseq_ctx import quality_compare
from fairseq_ctx.checkpoint_repair import stored_updates, written_to_the_end
from fairseq_ctx.analysis.learning_curves import (
    checkpoint_at, checkpoints_by_update, parse_valid_log, plot_learning_curves)
from fairseq_ctx.analysis.seed_statistics import (
    curve_summary, detectable_difference, equivalence_power, equivalence_seeds_needed, equivalence_test,
    sd_factor_interval, seed_difference, seeds_needed,
    wilcoxon_seeds_needed)
from tests.conftest import TINY_TEST_SENTENCES


@pytest.fixture(scope="module")
def qc():
    return quality_compare


# ---------------------------------------------------------------------------------------
# seed_difference, by hand
# ---------------------------------------------------------------------------------------

def t_two_sided_p(t, df, steps=20000):
    """P(|T| >= |t|) for Student's t with df degrees of freedom: 1 - 2 * integral of the
    density from 0 to |t| (Simpson's rule)."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    pdf = lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2)  # noqa: E731
    a, b = 0.0, abs(t)
    h = (b - a) / steps
    s = pdf(a) + pdf(b) + sum((4 if i % 2 else 2) * pdf(a + i * h) for i in range(1, steps))
    return 1 - 2 * s * h / 3


def t_quantile(q, df):
    """Upper quantile by bisection on t_two_sided_p: P(|T| >= x) = 2 (1 - q)."""
    lo, hi = 0.0, 50.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if t_two_sided_p(mid, df, 4000) > 2 * (1 - q):
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def signed_rank_p(diffs):
    """Exact two-sided Wilcoxon signed-rank p (no zeros, no ties): enumerate all 2**n
    sign patterns of the ranks 1..n; p = P(min(W+, W-) <= observed min)."""
    ranks = {abs(d): r for r, d in enumerate(sorted(diffs, key=abs), start=1)}
    w_plus = sum(ranks[abs(d)] for d in diffs if d > 0)
    n = len(diffs)
    total = n * (n + 1) // 2
    observed = min(w_plus, total - w_plus)
    hits = 0
    for signs in itertools.product((0, 1), repeat=n):
        w = sum(r for r, s in zip(range(1, n + 1), signs) if s)
        hits += min(w, total - w) <= observed
    return hits / 2 ** n


def test_three_seeds_closed_form():
    # system 3, 4, 6 vs baseline 2, 2, 2: differences 1, 2, 4
    st = seed_difference({1: 3.0, 2: 4.0, 3: 6.0}, {1: 2.0, 2: 2.0, 3: 2.0})
    mean = 7 / 3
    sd = math.sqrt(((1 - mean) ** 2 + (2 - mean) ** 2 + (4 - mean) ** 2) / 2)  # sqrt(7/3)
    se = sd / math.sqrt(3)  # sqrt(7) / 3
    t = mean / se  # sqrt(7)
    assert st["n"] == 3 and st["df"] == 2 and st["seeds"] == [1, 2, 3]
    assert st["diffs"] == [1.0, 2.0, 4.0]
    assert st["mean_diff"] == pytest.approx(mean)
    assert st["sd_diff"] == pytest.approx(math.sqrt(7 / 3))
    assert st["se"] == pytest.approx(math.sqrt(7) / 3)
    assert st["t"] == pytest.approx(math.sqrt(7))
    # Student's t with 2 degrees of freedom: P(|T| >= t) = 1 - t / sqrt(2 + t^2)
    assert st["p_t"] == pytest.approx(1 - t / math.sqrt(2 + t * t))  # = 1 - sqrt(7)/3 = 0.1181
    assert st["p_t"] == pytest.approx(0.118083, abs=1e-6)
    # 97.5 % quantile with df = 2: t / sqrt(2 + t^2) = 0.95  =>  t = 0.95 sqrt(2 / (1 - 0.95^2))
    q = 0.95 * math.sqrt(2 / (1 - 0.95 ** 2))
    assert q == pytest.approx(4.302653, abs=1e-6)  # the table value 4.303
    assert st["ci_low"] == pytest.approx(mean - q * se)
    assert st["ci_high"] == pytest.approx(mean + q * se)
    assert st["ci_low"] == pytest.approx(-1.461250, abs=1e-5)
    assert st["ci_high"] == pytest.approx(6.127916, abs=1e-5)
    # all three differences positive: W- = 0, the most extreme of 2^3 sign patterns on
    # each side: p = 2 / 8
    assert st["p_wilcoxon"] == pytest.approx(0.25)
    assert st["wilcoxon_min_p"] == pytest.approx(0.25)
    assert st["wilcoxon_can_reach_alpha"] is False
    assert "cannot reach p < 0.05" in st["note"] and "needs 6" in st["note"]
    assert (st["better"], st["worse"], st["ties"]) == (3, 0, 0)
    json.dumps(st, allow_nan=False)


def paired_t_power(difference, sd, n, crit, steps=4000):
    """P(|T| > crit) for T = (Z + ncp) / sqrt(V / df), Z standard normal, V chi-square with
    df = n - 1, ncp = difference sqrt(n) / sd: the paired t-test's power, integrated here over
    u = sqrt(V) (Simpson's rule): P(T > crit | u) = Phi(ncp - crit u / sqrt(df)),
    P(T < -crit | u) = Phi(-ncp - crit u / sqrt(df)); u's density is
    2 u^(df-1) exp(-u^2 / 2) / (2^(df/2) Gamma(df/2))."""
    df, ncp = n - 1, abs(difference) * math.sqrt(n) / sd
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    norm = 2 / (2 ** (df / 2) * math.gamma(df / 2))

    def f(u):
        return norm * u ** (df - 1) * math.exp(-u * u / 2) * (
            phi(ncp - crit * u / math.sqrt(df)) + phi(-ncp - crit * u / math.sqrt(df)))

    top = math.sqrt(df) + 12
    h = top / steps
    return h / 3 * (f(0.0) + f(top) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, steps)))


T975_DF2 = 0.95 * math.sqrt(2 / (1 - 0.95 ** 2))  # closed form (test_three_seeds_closed_form)


@pytest.mark.parametrize("n, sd", [(2, 1.0), (3, 0.02), (5, 0.004), (5, 1.0), (10, 0.3)])
def test_the_detectable_difference_is_found_with_80_percent_power(n, sd):
    """detectable_difference: the paired t-test over n seeds finds it in 4 runs of 5 (the power
    integrated here, with the t quantile found here), and a difference 10 % smaller less often."""
    # t with 1 degree of freedom is Cauchy: P(|T| >= x) = 1 - 2 atan(x) / pi
    crit = math.tan(0.975 * math.pi - math.pi / 2) if n == 2 else T975_DF2 if n == 3 else t_quantile(0.975, n - 1)
    d = detectable_difference(sd, n)
    assert paired_t_power(d, sd, n, crit) == pytest.approx(0.80, abs=1e-3)
    assert paired_t_power(0.9 * d, sd, n, crit) < 0.78
    # scale: in units of sd it depends on n only
    assert d / sd == pytest.approx(detectable_difference(1.0, n), rel=1e-6)


def test_seeds_needed_is_the_smallest_count_with_80_percent_power():
    # the textbook counts for a paired t-test (two-sided 5 %, power 0.8): effect size 1 -> 10 pairs, 0.5 -> 34
    for effect, want in ((1.0, 10), (0.5, 34)):
        assert seeds_needed(effect * 0.01, 0.01) == want
        below, at = (paired_t_power(effect, 1.0, m, t_quantile(0.975, m - 1)) for m in (want - 1, want))
        assert below < 0.8 <= at
    assert seeds_needed(0.0, 1.0) is None and seeds_needed(1e-3, 1.0, most=1000) is None


def test_the_sds_uncertainty_and_levels_that_make_no_sense():
    # chi-square with 2 degrees of freedom: P(V <= x) = 1 - exp(-x / 2); true sd / sample sd = sqrt(2 / V)
    low, high = sd_factor_interval(3)
    assert low == pytest.approx(math.sqrt(1 / -math.log(0.025))) and high == pytest.approx(math.sqrt(1 / -math.log(0.975)))
    for alpha, power in ((0.05, 0.05), (0.05, 0.01), (0.05, 1.0), (0.0, 0.8)):
        with pytest.raises(ValueError, match="alpha < power < 1"):
            detectable_difference(1.0, 5, alpha, power)
    assert detectable_difference(1e-300, 5) == pytest.approx(1e-300 * detectable_difference(1.0, 5), rel=1e-9)


def test_equivalence_within_a_margin_by_two_one_sided_t_tests_closed_form():
    """TOST on differences 1, 2, 4 (df = 2, where P(T <= t) = 1/2 + t / (2 sqrt(2 + t^2))): p is the
    larger one-sided p, and equivalence is the 90 % interval inside the margin."""
    cdf = lambda t: 0.5 + t / (2 * math.sqrt(2 + t * t))  # noqa: E731
    mean, se = 7 / 3, math.sqrt(7) / 3
    e = equivalence_test([1.0, 2.0, 4.0], 20.0)
    assert e["p"] == pytest.approx(max(1 - cdf((mean + 20) / se), cdf((mean - 20) / se)))
    q90 = 0.9 * math.sqrt(2 / (1 - 0.81))  # P(|T| <= q) = 0.9 for df = 2
    assert (e["ci_low"], e["ci_high"]) == (pytest.approx(mean - q90 * se), pytest.approx(mean + q90 * se))
    edge = max(abs(e["ci_low"]), abs(e["ci_high"]))
    assert equivalence_test([1.0, 2.0, 4.0], edge * 1.001)["equivalent"] is True
    assert equivalence_test([1.0, 2.0, 4.0], edge * 0.999)["equivalent"] is False
    assert equivalence_test([1.0, 2.0, 4.0], edge)["p"] == pytest.approx(0.05)
    # "not separated" is not "equivalent": the t-test and TOST can both fail
    assert seed_difference([1.0, 2.0, 4.0], [0.0, 0.0, 0.0])["p_t"] > 0.05
    assert not equivalence_test([1.0, 2.0, 4.0], 3.0)["equivalent"]
    # mirrored: the lower one-sided test decides; the same p, the interval reflected
    m = equivalence_test([-1.0, -2.0, -4.0], 20.0)
    assert m["p"] == pytest.approx(e["p"]) and (m["ci_low"], m["ci_high"]) == (
        pytest.approx(-e["ci_high"]), pytest.approx(-e["ci_low"]))
    assert equivalence_test([-1.0, -2.0, -4.0], edge * 1.001)["equivalent"] is True
    assert equivalence_test([-1.0, -2.0, -4.0], edge * 0.999)["equivalent"] is False
    # no spread: the limits as se -> 0
    assert equivalence_test([0.5, 0.5], 1.0) == {"n": 2, "margin": 1.0, "alpha": 0.05, "p": 0.0, "ci_low": 0.5,
                                                 "ci_high": 0.5, "equivalent": True}
    assert equivalence_test([1.5, 1.5], 1.0)["p"] == 1.0 and equivalence_test([1.5, 1.5], 1.0)["equivalent"] is False
    for short in ([1.0], [1.0, float("nan")]):
        assert equivalence_test(short, 1.0)["equivalent"] is None and equivalence_test(short, 1.0)["p"] is None
    for margin in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="margin must be positive"):
            equivalence_test([1.0, 2.0], margin)
    with pytest.raises(ValueError, match="alpha must be in"):
        equivalence_test([1.0, 2.0], 1.0, alpha=0.6)


def _tost_success_rate(true_difference, sd, n, margin, alpha=0.05, draws=100_000, seed=0):
    """The rate at which the (1 - 2 alpha) t interval of n normal differences lies inside +-margin,
    from simulated samples (the test's definition, not the library's integral)."""
    import numpy as np
    from scipy import stats

    x = np.random.default_rng(seed).normal(true_difference, sd, (draws, n))
    half = stats.t.ppf(1 - alpha, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    mean = x.mean(axis=1)
    return float(np.mean((mean - half > -margin) & (mean + half < margin)))


def _tost_power_over_the_mean(true_difference, sd, n, margin, alpha=0.05, points=400_001):
    """The same probability integrated the other way round: over the sample mean m (normal), the
    chance that the sample sd is small enough, s < (margin - |m|) sqrt(n) / t (a chi-square cdf),
    on a fine grid; for designs too large to simulate."""
    import numpy as np
    from scipy import stats

    m = np.linspace(-margin, margin, points)
    se, df, crit = sd / math.sqrt(n), n - 1, stats.t.ppf(1 - alpha, n - 1)
    assert se > 20 * (m[1] - m[0]), "the grid is too coarse for the mean's normal law"
    s_most = (margin - np.abs(m)) * math.sqrt(n) / crit
    integrand = stats.norm.pdf(m, true_difference, se) * stats.chi2.cdf(df * (s_most / sd) ** 2, df)
    return float(np.sum((integrand[1:] + integrand[:-1]) / 2 * np.diff(m)))


def test_equivalence_power_is_the_rate_at_which_simulated_studies_are_found_within_the_margin():
    for true_difference, sd, n, margin, alpha in ((0.0, 0.0105, 6, 0.008, 0.05), (0.004, 0.0105, 12, 0.008, 0.05),
                                                  (0.0, 1.0, 3, 1.5, 0.05), (-0.3, 1.0, 20, 0.6, 0.05),
                                                  (0.0, 1.0, 2, 0.5, 0.05), (0.2, 1.0, 8, 1.0, 0.10)):
        rate = _tost_success_rate(true_difference, sd, n, margin, alpha)
        tolerance = 4 * math.sqrt(max(rate * (1 - rate), 1e-4) / 100_000)
        assert equivalence_power(true_difference, sd, n, margin, alpha) == pytest.approx(rate, abs=tolerance)
    # and the library's own test, run on simulated studies, succeeds at that rate
    import numpy as np

    studies = np.random.default_rng(1).normal(0.1, 1.0, (2_000, 8))
    found = sum(bool(equivalence_test(list(x), 1.0, alpha=0.10)["equivalent"]) for x in studies)
    power = equivalence_power(0.1, 1.0, 8, 1.0, alpha=0.10)
    assert found / 2_000 == pytest.approx(power, abs=4 * math.sqrt(power * (1 - power) / 2_000))
    # the test keeps its size: at the margin's edge it succeeds at most alpha of the time
    assert equivalence_power(0.8, 1.0, 30, 0.8) <= 0.05 and equivalence_power(-0.8, 1.0, 30, 0.8) <= 0.05
    assert equivalence_power(0.3, 1.0, 15, 0.8) == pytest.approx(equivalence_power(-0.3, 1.0, 15, 0.8))


def test_equivalence_power_holds_for_many_seeds_and_margins_many_sds_wide():
    """Where a quadrature over the sd's law misses its narrow peak (many seeds, a margin many sds
    wide, a true difference near the margin), against the integral over the mean."""
    for design in ((0.0, 1e-4, 10, 0.008), (0.0, 1e-5, 10, 0.008), (0.007, 0.0105, 900, 0.008),
                   (0.0079, 0.0105, 1000, 0.008), (0.0, 1.0, 100_000, 0.01), (0.0, 1.0, 18, 1.0),
                   (29.7, 1.0, 18, 30.0), (0.0, 1.0, 10_000, 0.1), (0.0, 1.0, 25, 50.0)):
        assert equivalence_power(*design) == pytest.approx(_tost_power_over_the_mean(*design), abs=1e-6)
    assert equivalence_power(0.0, 1e-4, 10, 0.008) == pytest.approx(1.0, abs=1e-9)
    for bad in ((0.0, 1.0, 1, 0.5), (0.0, 1.0, 2.5, 0.5), (0.0, 0.0, 5, 0.5), (0.0, -1.0, 5, 0.5),
                (0.0, 1.0, 5, 0.0), (0.0, 1.0, 5, float("inf")), (float("nan"), 1.0, 5, 0.5),
                (0.0, 1.0, float("inf"), 0.5)):
        with pytest.raises(ValueError):
            equivalence_power(*bad)
    with pytest.raises(ValueError, match="alpha must be in"):
        equivalence_power(0.0, 1.0, 5, 0.5, alpha=0.6)


def test_equivalence_seeds_needed_is_the_smallest_count_with_the_power():
    # the GPU's sd of the 3,000-update context-aware remainder and a margin of 0.008 (the CPU study's
    # plan: about 1 study in 6 finds "about 0" with 6 seeds, 17 seeds for 80 %)
    n = equivalence_seeds_needed(0.0105, 0.008)
    assert n == 17
    assert equivalence_power(0.0, 0.0105, 16, 0.008) < 0.8 <= equivalence_power(0.0, 0.0105, 17, 0.008)
    # a true difference inside the margin needs more seeds; one at or beyond it can never be shown "about 0"
    near = equivalence_seeds_needed(0.0105, 0.008, true_difference=0.0075)
    assert near > 1_000 and equivalence_power(0.0075, 0.0105, near - 1, 0.008) < 0.8 <= equivalence_power(
        0.0075, 0.0105, near, 0.008)
    assert equivalence_seeds_needed(0.0105, 0.008, true_difference=0.008) is None
    assert equivalence_seeds_needed(1.0, 0.01, most=50) is None
    assert equivalence_seeds_needed(1e-6, 0.008) == 2
    # counted up over the first seeds: the power is not monotone in n there (below alpha, where no
    # design asks)
    assert equivalence_power(0.0, 1.0, 2, 0.5) > equivalence_power(0.0, 1.0, 4, 0.5)
    assert [equivalence_seeds_needed(1.0, margin) for margin in (3.0, 2.0, 1.5)] == [3, 4, 6]
    assert equivalence_seeds_needed(1.0, 1.5, alpha=0.10) == 5  # a narrower (80 %) interval is inside sooner
    with pytest.raises(ValueError, match="alpha < power < 1"):
        equivalence_seeds_needed(1.0, 0.5, power=0.01)
    for sd, margin, true_difference in ((0.0, 0.5, 1.0), (1.0, 0.0, 1.0), (1.0, -1.0, 1.0), (-1.0, 0.5, 1.0),
                                        (1.0, 0.5, float("nan"))):
        with pytest.raises(ValueError):
            equivalence_seeds_needed(sd, margin, true_difference=true_difference)


def test_seed_difference_gives_the_detectable_difference_of_its_spread():
    st = seed_difference({1: 3.0, 2: 4.0, 3: 6.0}, {1: 2.0, 2: 2.0, 3: 2.0})
    assert paired_t_power(st["detectable_80"], math.sqrt(7 / 3), 3, T975_DF2) == pytest.approx(0.80, abs=1e-3)
    assert seed_difference([1.0], [0.0])["detectable_80"] is None  # one seed
    assert seed_difference([1.0, 1.0], [0.0, 0.0])["detectable_80"] is None  # no spread


def test_six_seeds_integrated_t_and_enumerated_wilcoxon():
    base = [20.0, 21.5, 19.0, 22.0, 20.5, 21.0]
    diffs = [1.0, -2.0, 3.0, 4.0, 5.0, 6.0]
    st = seed_difference([b + d for b, d in zip(base, diffs)], base)
    n = 6
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    se = sd / math.sqrt(n)
    t = mean / se
    assert st["mean_diff"] == pytest.approx(mean)
    assert st["t"] == pytest.approx(t)
    assert st["p_t"] == pytest.approx(t_two_sided_p(t, 5), abs=1e-7)
    q = t_quantile(0.975, 5)
    assert q == pytest.approx(2.570582, abs=1e-5)  # the table value 2.571
    assert st["ci_low"] == pytest.approx(mean - q * se, abs=1e-5)
    assert st["ci_high"] == pytest.approx(mean + q * se, abs=1e-5)
    # ranks 1..6, the negative one has rank 2: W- = 2; sign patterns with a rank sum
    # <= 2 on one side: {}, {1}, {2} -> 3 of 64, two-sided 6 / 64
    assert signed_rank_p(diffs) == pytest.approx(6 / 64)
    assert st["p_wilcoxon"] == pytest.approx(6 / 64)
    assert st["wilcoxon_can_reach_alpha"] is True and st["wilcoxon_min_p"] == pytest.approx(2 / 64)
    assert (st["better"], st["worse"]) == (5, 1)
    assert st["note"] is None
    # six seeds all better: the smallest p the test has, 2 / 64 < 0.05
    st = seed_difference([1, 2, 3, 4, 5, 6.5], [0] * 6)
    assert st["p_wilcoxon"] == pytest.approx(2 / 64) == pytest.approx(signed_rank_p([1, 2, 3, 4, 5, 6.5]))
    assert wilcoxon_seeds_needed(0.05) == 6 and wilcoxon_seeds_needed(0.01) == 8


def test_edge_cases_pairing_ties_and_undefined_values():
    # paired on the seeds both have; a tie counts neither way, Wilcoxon drops it
    st = seed_difference({1: 10.0, 2: 12.0, 3: 11.0, 9: 50.0}, {1: 10.0, 2: 11.0, 3: 10.0, 4: 0.0})
    assert st["seeds"] == [1, 2, 3] and st["diffs"] == [0.0, 1.0, 1.0]
    assert (st["better"], st["worse"], st["ties"], st["wilcoxon_n"]) == (2, 0, 1, 2)
    assert st["wilcoxon_min_p"] == pytest.approx(0.5)
    # one seed: a mean, nothing else
    st = seed_difference([12.0], [10.0])
    assert st["mean_diff"] == 2.0 and st["ci_low"] is None and st["p_t"] is None
    assert "one seed" in st["note"]
    # identical non-zero differences: no spread -> the t-test is undefined (not p = 0), and
    # so is the CI (a zero-width [+1, +1] would read as certainty that rounding produced)
    st = seed_difference([11.0, 12.0, 13.0], [10.0, 11.0, 12.0])
    assert st["p_t"] is None and "t-test undefined" in st["note"] and "no CI" in st["note"]
    assert st["mean_diff"] == pytest.approx(1.0) and st["ci_low"] is None and st["ci_high"] is None
    # no difference at all: no test
    st = seed_difference([1.0, 2.0], [1.0, 2.0])
    assert st["p_t"] is None and st["p_wilcoxon"] is None and st["ties"] == 2
    assert seed_difference([], [])["mean_diff"] is None
    with pytest.raises(ValueError):
        seed_difference([1.0], [1.0, 2.0])
    json.dumps(st, allow_nan=False)


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_a_diverged_seed_gives_no_statistics_and_is_named(bad, qc):
    assert qc.summarize([20.0, bad])["mean"] is None and qc.summarize([20.0, 21.0])["mean"] == 20.5
    """fairseq logs 'loss inf' / 'loss nan' when a training diverges: the comparison must
    not crash after hours of training, and must not average the seed away either."""
    st = seed_difference({1: 5.1, 2: bad, 3: 5.3}, {1: 5.0, 2: 5.2, 3: 5.2}, higher_is_better=False)
    assert st["mean_diff"] is None and st["ci_low"] is None and st["p_t"] is None and st["p_wilcoxon"] is None
    assert "seed(s) 2" in st["note"] and st["diffs"][1] is None and st["seeds"] == [1, 2, 3]
    json.dumps(st, allow_nan=False)
    assert "pair(s) 1" in seed_difference([bad, 1.0], [0.0, 0.5])["note"]


def test_a_curve_with_a_diverged_seed_keeps_the_point_as_a_gap_not_a_value(qc, tmp_path):
    curve = curve_summary({1: {10: 9.0, 20: 8.0}, 2: {10: 9.2, 20: math.inf}, 3: {10: 9.1, 20: 8.2}})
    assert curve["mean"][0] == pytest.approx(9.1) and curve["sd"][0] == pytest.approx(0.1)
    assert curve["mean"][1] is None and curve["min"][1] is None and curve["max"][1] is None
    assert curve["non_finite"] == {"20": [2]} and curve["per_seed"]["2"] == {"10": 9.2, "20": None}
    json.dumps(curve, allow_nan=False)
    assert qc._cell(curve, 20, 3) == "non-finite (seed 2)" and qc._cell(curve, 10, 3) == "9.100 (9.000-9.200)"
    path = str(tmp_path / "curves.png")
    plot_learning_curves({"00-base": {"valid_loss": curve}}, [("00-base", None)], path,
                         metrics=[("valid_loss", "valid loss")])
    assert os.path.getsize(path) > 1000


def tied_signed_rank_p(diffs):
    """Exact two-sided signed-rank p WITH tied |differences|: every sign pattern of the
    mid-ranks, counted when its W+ lies at least as far from n(n+1)/4 as the observed."""
    values = sorted(abs(d) for d in diffs)
    mid = {v: sum(i + 1 for i, w in enumerate(values) if w == v) / values.count(v) for v in values}
    ranks = [mid[abs(d)] for d in diffs]
    centre = sum(ranks) / 2
    observed = abs(sum(r for r, d in zip(ranks, diffs) if d > 0) - centre)
    hits = sum(abs(sum(r for r, s in zip(ranks, signs) if s) - centre) >= observed - 1e-9
               for signs in itertools.product((0, 1), repeat=len(ranks)))
    return hits / 2 ** len(ranks)


def test_the_table_prints_an_exact_wilcoxon_p_without_rounding_it_below_its_floor(qc):
    """Five seeds all ahead: p = 2 / 32 = 0.0625, the smallest 5 seeds allow; three decimals
    would print 0.062, under the floor the table's footnote states."""
    st = seed_difference([20.1, 20.3, 19.9, 20.6, 20.2], [19.0, 19.5, 19.2, 19.1, 19.8])
    assert st["p_wilcoxon"] == pytest.approx(0.0625)
    assert qc._p_wilcoxon(st) == "0.0625 †"


@pytest.mark.parametrize("diffs,expected", [([.3, .3, -.3, .5, .6, .7], 8 / 64),
                                            ([1, 1, -1, 2, 2, 3, 3, -4], 70 / 256)])
def test_wilcoxon_with_tied_differences_is_exact(diffs, expected):
    # BLEU is rounded to 2 decimals, so equal |differences| across seeds are common;
    # scipy's "exact" method ignores ties (0.094 and 0.3125 here)
    st = seed_difference(diffs, [0.0] * len(diffs))
    assert tied_signed_rank_p(diffs) == pytest.approx(expected)
    assert st["p_wilcoxon"] == pytest.approx(expected)


def test_curve_summary_keeps_update_counts_every_seed_has():
    cs = curve_summary({1: {10: 1.0, 20: 2.0, 30: 3.0}, 2: {"10": 3.0, "20": 6.0}})
    assert cs["updates"] == [10, 20] and cs["n"] == 2
    assert cs["mean"] == [2.0, 4.0] and cs["min"] == [1.0, 2.0] and cs["max"] == [3.0, 6.0]
    assert cs["sd"] == pytest.approx([math.sqrt(2), math.sqrt(8)])
    assert cs["per_seed"]["1"] == {"10": 1.0, "20": 2.0, "30": 3.0}


# ---------------------------------------------------------------------------------------
# fairseq logs and checkpoints
# ---------------------------------------------------------------------------------------

# fairseq-train output (fairseq 0.12, --no-progress-bar, tiny Tatoeba slice, transformer
# 1+1 layers of 32, --max-tokens 400: 26 updates per epoch, --save-interval-updates 5
# --validate-interval-updates 5), cut to the lines around validations; the
# 'valid on 'test' subset' line is that format for another subset
REAL_LOG = """\
2026-11-23 02:09:28 | INFO | fairseq.trainer | begin training epoch 1
2026-11-23 02:09:28 | INFO | fairseq_cli.train | Start iterating over samples
2026-11-23 02:09:28 | INFO | fairseq_cli.train | begin validation on "valid" subset
2026-11-23 02:09:28 | INFO | fairseq.tasks.fairseq_task | can_reuse_epoch_itr = True
2026-11-23 02:09:28 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.997 | nll_loss 8.963 | ppl 499.09 | wps 27197.9 | wpb 163.5 | bsz 10 | num_updates 5
2026-11-23 02:09:28 | INFO | fairseq.checkpoint_utils | Preparing to save checkpoint for epoch 1 @ 5 updates
2026-11-23 02:09:28 | INFO | fairseq.trainer | Saving checkpoint to /tmp/stats-tiny/ck2/checkpoint_1_5.pt
2026-11-23 02:09:28 | INFO | fairseq.checkpoint_utils | Saved checkpoint ck2/checkpoint_1_5.pt (epoch 1 @ 5 updates, score 8.997) (writing took 0.014892023999891535 seconds)
2026-11-23 02:09:28 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.637 | nll_loss 8.568 | ppl 379.42 | wps 22644.9 | wpb 163.5 | bsz 10 | num_updates 10 | best_loss 8.637
2026-11-23 02:09:28 | INFO | train_inner | epoch 001:     25 / 26 loss=8.676, nll_loss=8.613, ppl=391.51, wps=12145.6, ups=45.86, wpb=265.1, bsz=16.2, num_updates=25, lr=0.002, gnorm=0.718, train_wall=0, wall=2
2026-11-23 02:09:28 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.071 | nll_loss 7.951 | ppl 247.48 | wps 25670.4 | wpb 163.5 | bsz 10 | num_updates 25 | best_loss 8.071
2026-11-23 02:09:28 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.048 | nll_loss 7.926 | ppl 243.24 | wps 24963.3 | wpb 163.5 | bsz 10 | num_updates 26 | best_loss 8.048
2026-11-23 02:09:28 | INFO | valid | epoch 001 | valid on 'test' subset | loss 7.5 | nll_loss 7.4 | ppl 180.1 | wps 24963.3 | wpb 163.5 | bsz 10 | num_updates 26
2026-11-23 02:09:28 | INFO | fairseq.checkpoint_utils | Saved checkpoint ck2/checkpoint_best.pt (epoch 1 @ 26 updates, score 8.048) (writing took 0.014879711000048701 seconds)
2026-11-23 02:09:28 | INFO | fairseq_cli.train | end of epoch 1 (average epoch stats below)
2026-11-23 02:09:28 | INFO | train | epoch 001 | loss 8.646 | nll_loss 8.58 | ppl 382.81 | wps 11336.8 | ups 42.26 | wpb 268.3 | bsz 16.6 | num_updates 26 | lr 0.002 | gnorm 0.707 | train_wall 0 | wall 2
2026-11-23 02:09:28 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 7.967 | nll_loss 7.838 | ppl 228.81 | wps 24764.2 | wpb 163.5 | bsz 10 | num_updates 30 | best_loss 7.967
"""
# the same run resumed from checkpoint_1_25.pt appends a second validation at 26
RESUMED = """\
2026-11-23 02:11:24 | INFO | fairseq.trainer | Loaded checkpoint /tmp/stats-tiny/ck2/checkpoint_1_25.pt (epoch 1 @ 25 updates)
2026-11-23 02:11:24 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.049 | nll_loss 7.926 | ppl 243.24 | wps 29997.3 | wpb 163.5 | bsz 10 | num_updates 26 | best_loss 8.048
"""
# --log-format json
JSON_LOG = """\
2026-11-23 02:21:45 | INFO | train_inner | {"epoch": 1, "update": 0.077, "loss": "9.363", "nll_loss": "9.364", "ppl": "659.11", "wps": "10463.5", "ups": "42.39", "wpb": "258.5", "bsz": "17.5", "num_updates": "2", "lr": "0.002", "gnorm": "1.06", "train_wall": "0", "wall": "1"}
2026-11-23 02:21:45 | INFO | valid | {"epoch": 1, "valid_loss": "9.293", "valid_nll_loss": "9.288", "valid_ppl": "625.26", "valid_wps": "21337", "valid_wpb": "163.5", "valid_bsz": "10", "valid_num_updates": "2"}
2026-11-23 02:21:45 | INFO | valid | {"epoch": 1, "valid_loss": "9.086", "valid_nll_loss": "9.062", "valid_ppl": "534.35", "valid_wps": "20742.7", "valid_wpb": "163.5", "valid_bsz": "10", "valid_num_updates": "4", "valid_best_loss": "9.086"}
2026-11-23 02:21:45 | INFO | train | {"epoch": 1, "train_loss": "9.289", "train_nll_loss": "9.285", "train_ppl": "623.64", "train_wps": "5781.5", "train_ups": "22.71", "train_wpb": "258.8", "train_bsz": "15.8", "train_num_updates": "4", "train_lr": "0.002", "train_gnorm": "0.984", "train_train_wall": "0", "train_wall": "2"}
"""


def test_parse_valid_log_of_real_fairseq_output():
    v = parse_valid_log(REAL_LOG)
    assert list(v) == [5, 10, 25, 26, 30]  # train / train_inner / test-subset lines ignored
    assert v[5] == {"loss": 8.997, "nll_loss": 8.963, "ppl": 499.09, "epoch": 1}
    assert v[26]["loss"] == 8.048 and v[30]["epoch"] == 2
    assert parse_valid_log(REAL_LOG, subset="test") == {26: {"loss": 7.5, "nll_loss": 7.4, "ppl": 180.1, "epoch": 1}}
    assert parse_valid_log(REAL_LOG + RESUMED)[26]["loss"] == 8.049  # the last line per update count
    j = parse_valid_log(JSON_LOG)
    assert j == {2: {"loss": 9.293, "nll_loss": 9.288, "ppl": 625.26, "epoch": 1},
                 4: {"loss": 9.086, "nll_loss": 9.062, "ppl": 534.35, "epoch": 1}}
    assert parse_valid_log("no validation here\n") == {}


def test_checkpoint_names(tmp_path):
    for name in ("checkpoint_1_5.pt", "checkpoint_2_30.pt", "checkpoint_2_130.pt", "checkpoint_last.pt",
                 "checkpoint_best.pt", "checkpoint3.pt"):
        (tmp_path / name).write_text("")
    assert sorted(checkpoints_by_update(str(tmp_path))) == [5, 30, 130]
    assert checkpoint_at(str(tmp_path), 30).endswith("checkpoint_2_30.pt")
    assert checkpoint_at(str(tmp_path), 13) is None
    assert checkpoints_by_update(str(tmp_path / "missing")) == {}


def test_plot_is_written(tmp_path):
    cs = lambda m: curve_summary({1: {10: m, 20: m + 1, 30: m + 1.5}, 2: {10: m + 0.4, 20: m + 1.2, 30: m + 2}})  # noqa: E731
    curves = {"00-base": {"bleu": cs(5.0), "valid_loss": cs(-9.0)},
              "01-sys": {"bleu": cs(6.0), "valid_loss": cs(-9.5)},
              "02-empty": {"bleu": curve_summary({}), "valid_loss": curve_summary({})}}
    path = str(tmp_path / "sub" / "curves.png")
    assert plot_learning_curves(curves, [("01-sys", "00-base"), ("02-empty", "00-base")], path) == path
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    import matplotlib.image

    img = matplotlib.image.imread(path)
    assert img.shape[0] > 300 and img.shape[1] > 600
    assert not [f for f in os.listdir(tmp_path / "sub") if f != "curves.png"]


# ---------------------------------------------------------------------------------------
# quality_compare: options, training command
# ---------------------------------------------------------------------------------------

def test_parse_curve_updates_and_interval(qc):
    assert qc.parse_curve_updates("400,200 800", 1000) == [200, 400, 800]
    assert qc.parse_curve_updates("200,1000", 1000) == [200]  # the final point is always there
    assert qc.parse_curve_updates("", 1000) == []
    for bad in ("0,200", "1200"):
        with pytest.raises(ValueError):
            qc.parse_curve_updates(bad, 1000)
    assert qc.curve_interval([200, 400, 800]) == 200 and qc.curve_interval([300, 500]) == 100


def test_train_command(qc, tmp_path, monkeypatch):
    cmds = []

    def fake_run(cmd, stdout=None, stderr=None, env=None, pass_fds=()):
        cmds.append(cmd)
        return types.SimpleNamespace(returncode=0)

    monkeypatch.setattr(qc.subprocess, "run", fake_run)
    common = ["--lr", "1e-3", "--disable-validation", "--no-epoch-checkpoints"]
    log = str(tmp_path / "train.log")
    qc.train("bin", common, ["--arch", "transformer"], 800, 3, "ck", log)
    qc.train("bin", common, ["--arch", "transformer"], 800, 3, "ck", log, curve_updates=[300, 500])
    qc.train("bin", common, ["--arch", "transformer"], 500, 3, "side", log, restore_file="ck/checkpoint_1_400.pt")
    plain, curve, restore = cmds
    assert "--disable-validation" in plain and "--save-interval-updates" not in plain
    assert "--disable-validation" not in curve
    text = " ".join(curve)
    assert "--save-interval-updates 100 --keep-interval-updates -1 --validate-interval-updates 100" in text
    assert "--max-update 800 --seed 3 --save-dir ck" in text
    i = restore.index("--restore-file")
    assert restore[i + 1] == os.path.abspath("ck/checkpoint_1_400.pt")
    assert "--max-update 500" in " ".join(restore) and "--disable-validation" in restore
    with open(log) as f:  # appended, one command line per training
        assert sum(1 for line in f if "fairseq_cli.train" in line) == 3


# ---------------------------------------------------------------------------------------
# quality_compare end to end, with fakes
# ---------------------------------------------------------------------------------------

EPOCH = 25  # fake epoch length (fairseq writes no checkpoint_E_U.pt for a save that ends an epoch)
UPDATES = 60
ARCH_QUALITY = {"transformer": 0.3, "transformer_x": 0.5}


def _refs(n=80, seed=0):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) for _ in range(n)]


def _loss(arch, seed, u):
    return 10 - 3 * u / UPDATES - (0.4 if arch == "transformer_x" else 0.0) + 0.05 * seed


def _fake_checkpoint_updates(path):
    """The fakes write a checkpoint as its update count in text; a test may put a real
    torch checkpoint (with fairseq's optimizer history) in its place."""
    with open(path, "rb") as f:
        data = f.read()
    return stored_updates(path) if data.startswith(b"PK") else int(data)


class Fakes:
    """fairseq-train / fairseq-ctx-evaluate stand-ins that behave like them where the
    driver cares: checkpoint names, epoch ends, validation lines, resume."""

    def __init__(self, configs, refs, valid_refs=None):
        self.configs, self.refs, self.valid_refs = configs, refs, valid_refs
        self.train_calls, self.eval_calls, self.valid_calls = [], [], []
        self.fail_eval_at = None
        self.allow_resume = False
        self.task_logged = "ExactResumeTranslationTask"  # the class fairseq-train logs ("task: X") at its start
        self.devices = []  # (what, config, seed, the CUDA_VISIBLE_DEVICES it was given or None)
        self.at_barrier = None  # (threading.Barrier, list): trainings meet there in arrival order
        self.directions = []  # (train / test / valid, (source, target) it was given)

    def _device_of(self, what, path, extra_env):
        parts = path.split(os.sep)
        i = parts.index("runs")
        device = (extra_env or {}).get("CUDA_VISIBLE_DEVICES")
        self.devices.append((what, parts[i + 1], int(parts[i + 2][len("seed"):]), device))
        return device

    def train(self, data_bin, common, arch_args, updates, seed, save_dir, log_path, threads=0,
              curve_updates=(), restore_file=None, extra_env=None, langs=None):
        arch = arch_args[1]
        self.directions.append(("train", langs))
        device = self._device_of("train", save_dir, extra_env)
        if self.at_barrier:
            barrier, arrivals = self.at_barrier
            arrivals.append(device)
            barrier.wait(timeout=30)
        self.train_calls.append({"arch": arch, "seed": seed, "updates": updates,
                                 "curve": tuple(curve_updates), "restore": restore_file})
        last = os.path.join(save_dir, "checkpoint_last.pt")
        start = int(re.search(r"_(\d+)\.pt$", restore_file).group(1)) if restore_file else 0
        lines = [f"2026-11-25 08:00:06 | INFO | fairseq_cli.train | task: {self.task_logged}"]
        if restore_file:  # as fairseq logs it
            lines.append(f"2026-11-25 08:00:07 | INFO | fairseq.trainer | Loaded checkpoint {restore_file} "
                         f"(epoch {start // EPOCH + 1} @ {start} updates)")
        if os.path.exists(last):  # fairseq resumes from it
            assert self.allow_resume, "would resume"
            start = _fake_checkpoint_updates(last)
            lines.append(f"2026-11-25 08:00:07 | INFO | fairseq.trainer | Loaded checkpoint {last} "
                         f"(epoch {start // EPOCH + 1} @ {start} updates)")
        os.makedirs(save_dir, exist_ok=True)
        interval = math.gcd(*curve_updates) if curve_updates else 0
        validate = bool(curve_updates) or "--disable-validation" not in common
        for u in range(start + 1, updates + 1):
            epoch, end_of_epoch = (u - 1) // EPOCH + 1, u % EPOCH == 0
            saving = interval and u % interval == 0
            if validate and (saving or end_of_epoch or u == updates):
                lines.append(f"2026-11-23 02:09:28 | INFO | valid | epoch {epoch:03d} | valid on 'valid' subset | "
                             f"loss {_loss(arch, seed, u):.3f} | nll_loss 1 | ppl 2 | wps 3 | wpb 4 | bsz 5 | "
                             f"num_updates {u}")
            if saving and not end_of_epoch:
                open(os.path.join(save_dir, f"checkpoint_{epoch}_{u}.pt"), "w").close()
        with open(os.path.join(save_dir, "checkpoint_last.pt"), "w") as f:
            f.write(str(updates))
        with open(log_path, "a") as f:
            f.write("".join(line + "\n" for line in lines))
        return 0.1

    def evaluate(self, data_bin, ckpt, ref, beam, out_dir, gen_args=(), subset="test", extra_env=None,
                 src="zh", tgt="en"):
        self._device_of(subset, ckpt, extra_env)
        self.directions.append((subset, (src, tgt)))
        parts = ckpt.split(os.sep)
        i = parts.index("runs")
        name, seed = parts[i + 1], int(parts[i + 2][len("seed"):])
        base = os.path.basename(ckpt)
        m = re.match(r"checkpoint_\d+_(\d+)\.pt$", base)
        if m:
            u = int(m.group(1))
        else:  # checkpoint_last.pt: of the run, or of a to{U} side training
            u = _fake_checkpoint_updates(ckpt)
        assert os.path.basename(ref) == f"{subset}.{tgt}"  # the subset's own references
        (self.eval_calls if subset == "test" else self.valid_calls).append((name, seed, u))
        if self.fail_eval_at == u:
            raise RuntimeError("killed while scoring")
        arch = self.configs[name][1]
        refs = self.refs if subset == "test" else self.valid_refs
        # valid: another draw, and a smaller gap between the archs than on test
        rng = random.Random(seed * 1000 + u + (0 if subset == "test" else 7))
        keep = (ARCH_QUALITY[arch] if subset == "test" else 0.4 + ARCH_QUALITY[arch] / 5) * (0.5 + u / UPDATES)
        hyps = [r if rng.random() < keep else "zz yy xx" for r in refs]
        from sacrebleu.metrics import BLEU

        return {"bleu": round(BLEU().corpus_score(hyps, [refs]).score, 2), "sentences": len(refs)}, hyps


def _binarise(data_bin, split, n, src="zh", tgt="en"):
    """A binarised SPLIT of n sentences, as fairseq-preprocess writes it (its index is what
    quality_compare counts)."""
    import torch
    from fairseq.data import indexed_dataset

    for lang in (src, tgt):
        prefix = os.path.join(data_bin, f"{split}.{src}-{tgt}.{lang}")
        builder = indexed_dataset.MMapIndexedDatasetBuilder(prefix + ".bin", dtype=indexed_dataset.best_fitting_int_dtype(100))
        for i in range(n):
            builder.add_item(torch.IntTensor([4 + i % 90, 2]))
        builder.finalize(prefix + ".idx")


@pytest.fixture
def study(tmp_path):
    cfg = tmp_path / "configs"
    cfg.mkdir()
    (cfg / "00-transformer.args").write_text("--arch transformer\n")
    (cfg / "01-good.args").write_text("--arch transformer_x\n")
    (cfg / "train.common").write_text("--lr 1e-3 --disable-validation --no-epoch-checkpoints\n")
    data = tmp_path / "data"
    (data / "bin").mkdir(parents=True)
    (data / "raw").mkdir()
    refs, valid_refs = _refs(), _refs(60, seed=1)
    (data / "raw" / "test.en").write_text("".join(r + "\n" for r in refs))
    (data / "raw" / "valid.en").write_text("".join(r + "\n" for r in valid_refs))
    _binarise(str(data / "bin"), "test", len(refs))
    _binarise(str(data / "bin"), "valid", len(valid_refs))
    configs = {"00-transformer": ["--arch", "transformer"], "01-good": ["--arch", "transformer_x"]}
    out = tmp_path / "out"
    argv = ["--data-dir", str(data), "--config-dir", str(cfg), "--seeds", "1", "2", "3",
            "--updates", str(UPDATES), "--out-dir", str(out), "--n-samples", "100"]
    return types.SimpleNamespace(fakes=Fakes(configs, refs, valid_refs), argv=argv, out=out, data=data)


def _main(qc, study, *extra):
    return qc.main(study.argv + list(extra), train_fn=study.fakes.train, eval_fn=study.fakes.evaluate)


def test_end_to_end_seed_statistics_and_curves(qc, study):
    fk = study.fakes
    _main(qc, study, "--curve-updates", "20,40,50")
    # 6 runs, each trained once with checkpoints every gcd = 10 updates, plus a side
    # training to 50 (an epoch's end) from checkpoint_2_40.pt
    main_calls = [c for c in fk.train_calls if c["restore"] is None]
    assert len(main_calls) == 6 and all(c["curve"] == (20, 40, 50) and c["updates"] == UPDATES for c in main_calls)
    side = [c for c in fk.train_calls if c["restore"]]
    assert len(side) == 6 and all(c["updates"] == 50 and c["restore"].endswith("checkpoint_2_40.pt") for c in side)
    assert sorted(u for _, _, u in fk.eval_calls) == sorted([20, 40, 50, UPDATES] * 6)
    out = study.out
    assert not [f for _, _, fs in os.walk(out) for f in fs if f.endswith(".pt") or f.startswith("partial-")]

    with open(out / "quality.json") as f:
        q = json.load(f)
    st = q["comparisons"]["01-good"]["seed_level"]
    assert st["n"] == 3 and st["seeds"] == [1, 2, 3] and st["better"] == 3 and st["worse"] == 0
    bleu = {n: [q["runs"][n][str(s)]["bleu"] for s in (1, 2, 3)] for n in ("00-transformer", "01-good")}
    diffs = [a - b for a, b in zip(bleu["01-good"], bleu["00-transformer"])]
    assert st["diffs"] == pytest.approx(diffs)
    assert st["mean_diff"] == pytest.approx(sum(diffs) / 3) == pytest.approx(q["comparisons"]["01-good"]["mean_diff"])
    assert st["ci_low"] < st["mean_diff"] < st["ci_high"] and 0 <= st["p_t"] <= 1
    assert st["p_wilcoxon"] == pytest.approx(0.25) and st["wilcoxon_can_reach_alpha"] is False

    curves = q["curves"]
    assert curves["01-good"]["bleu"]["updates"] == [20, 40, 50, UPDATES]
    assert curves["01-good"]["bleu"]["n"] == 3
    assert curves["00-transformer"]["bleu"]["mean"][-1] == pytest.approx(sum(bleu["00-transformer"]) / 3)
    # validations at every 10 updates and at the epoch ends (25, 50) and the last update
    assert curves["01-good"]["valid_loss"]["updates"] == [10, 20, 25, 30, 40, 50, 60]
    assert curves["01-good"]["valid_loss"]["mean"][0] == pytest.approx(
        sum(_loss("transformer_x", s, 10) for s in (1, 2, 3)) / 3, abs=1e-3)
    assert curves["01-good"]["valid_loss"]["min"][0] == pytest.approx(_loss("transformer_x", 1, 10), abs=1e-3)
    cc = q["curve_comparisons"]["01-good"]
    assert cc["baseline"] == "00-transformer" and set(cc["bleu"]) == {"20", "40", "50", str(UPDATES)}
    assert cc["valid_loss"]["10"]["mean_diff"] == pytest.approx(-0.4, abs=1e-3)
    assert cc["valid_loss"]["10"]["better"] == 3  # a lower loss in every seed
    assert q["runs"]["01-good"]["2"]["curve"]["50"]["checkpoint"] == os.path.join("to50", "checkpoint_last.pt")
    assert q["runs"]["01-good"]["2"]["curve"]["40"]["checkpoint"] == "checkpoint_2_40.pt"
    assert q["meta"]["curve_updates"] == [20, 40, 50, UPDATES]
    assert q["meta"]["torch"] and q["meta"]["fairseq"] and "git_commit" in q["meta"]
    png = out / "curves.png"
    assert q["curve_png"] == str(png) and png.stat().st_size > 5000

    md = (out / "quality.md").read_text()
    assert "| p t | p W | seeds + / - | p bootstrap per seed |" in md
    row = next(line for line in md.splitlines() if line.startswith("| 01-good | 00-transformer |"))
    assert "| 0.25 † |" in row and "| 3 / 0 |" in row
    st = q["comparisons"]["01-good"]["seed_level"]
    assert row.endswith(f"| {st['detectable_80']:.2f} |") and "| 80 % power at |" in md
    assert "With 3 seeds the true sd is within 0.52-6.28 times the observed one" in md
    assert "cannot reach p < 0.05" in md
    assert "## Learning curves" in md and "| config | baseline | 20 | 40 | 50 | 60 |" in md
    assert "| Δ 01-good | 00-transformer |" in md and "`curves.png`" in md
    # under each curve Δ row, the difference its t-test finds with 80 % power at each point,
    # from that point's own per-seed spread
    curve_md = md.split("## Learning curves")[1]
    bleu_section = curve_md.split("### BLEU")[1].split("\n#")[0]
    power_row = next(line for line in bleu_section.splitlines() if line.startswith("| 80 % power, 01-good |"))
    expected = []
    for u in ("20", "40", "50", str(UPDATES)):
        d = cc["bleu"][u]["diffs"]
        m = sum(d) / 3
        sd = (sum((x - m) ** 2 for x in d) / 2) ** 0.5
        expected.append("-" if cc["bleu"][u]["detectable_80"] is None else f"{cc['bleu'][u]['detectable_80']:.2f}")
        if sd:  # that point's own sd (detectable_difference is checked against an integral above)
            assert cc["bleu"][u]["detectable_80"] == pytest.approx(detectable_difference(sd, 3), rel=1e-6)
    assert power_row == "| 80 % power, 01-good | 00-transformer | " + " | ".join(expected) + " |"
    valid_section = curve_md.split("### Valid loss")[1].split("\n#")[0]
    assert valid_section.count("| 80 % power, 01-good | 00-transformer |") == 1

    # resume: nothing retrained, nothing rescored
    n_train, n_eval = len(fk.train_calls), len(fk.eval_calls)
    q2 = _main(qc, study, "--curve-updates", "20,40,50")
    assert (len(fk.train_calls), len(fk.eval_calls)) == (n_train, n_eval)
    assert q2["curves"]["01-good"]["bleu"]["mean"] == curves["01-good"]["bleu"]["mean"]
    # without the option the finished points are still reported
    q3 = _main(qc, study)
    assert (len(fk.train_calls), len(fk.eval_calls)) == (n_train, n_eval)
    assert q3["curves"]["01-good"]["bleu"]["updates"] == [20, 40, 50, UPDATES]
    # a new point: each run trained again once, and every point of it scored again (final
    # included), so that no run's scores mix two trainings
    q4 = _main(qc, study, "--curve-updates", "20,30,40,50")
    new_train = [c for c in fk.train_calls[n_train:] if c["restore"] is None]
    assert len(new_train) == 6 and all(c["curve"] == (20, 30, 40, 50) for c in new_train)
    assert q4["curves"]["01-good"]["valid_loss"]["updates"] == [10, 20, 25, 30, 40, 50, 60]
    assert sorted(fk.eval_calls[n_eval:]) == sorted((n, s, u) for n in ("00-transformer", "01-good")
                                                    for s in (1, 2, 3) for u in (20, 30, 40, 50, UPDATES))
    # a new list without the old points: only its points, all from the new training
    n_eval = len(fk.eval_calls)
    q5 = _main(qc, study, "--curve-updates", "35")
    assert q5["curves"]["01-good"]["bleu"]["updates"] == [35, UPDATES]
    assert q5["curves"]["01-good"]["valid_loss"]["updates"] == [25, 35, 50, 60]
    assert sorted(fk.eval_calls[n_eval:]) == sorted((n, s, u) for n in ("00-transformer", "01-good")
                                                    for s in (1, 2, 3) for u in (35, UPDATES))


def test_valid_bleu_scores_every_checkpoint_on_valid_for_choosing_among_configs(qc, study):
    from sacrebleu.metrics import BLEU

    fk = study.fakes
    _main(qc, study, "--curve-updates", "20,40", "--valid-bleu")
    q = json.loads((study.out / "quality.json").read_text())
    # one training per run; each of its checkpoints (20, 40, final) scored on test and on valid
    assert len(fk.train_calls) == 6 and all(c["curve"] == (20, 40) for c in fk.train_calls)
    runs = [(n, s) for n in ("00-transformer", "01-good") for s in (1, 2, 3)]
    assert sorted(fk.eval_calls) == sorted((n, s, u) for n, s in runs for u in (20, 40, UPDATES))
    assert sorted(fk.valid_calls) == sorted(fk.eval_calls)
    run_dir = study.out / "runs" / "01-good" / "seed2"
    point = json.loads((run_dir / "valid" / "upd40" / "result.json").read_text())
    assert point["subset"] == "valid" and point["sentences"] == len(fk.valid_refs)
    assert point["bleu"] == pytest.approx(BLEU().corpus_score(point["hyps"], [fk.valid_refs]).score, abs=0.01)
    assert q["runs"]["01-good"]["2"]["valid_bleu"]["40"]["bleu"] == point["bleu"]
    assert q["runs"]["01-good"]["2"]["curve"]["40"]["bleu"] != point["bleu"]  # test and valid kept apart

    vb = q["curves"]["01-good"]["valid_bleu"]
    assert vb["updates"] == [20, 40, UPDATES] and vb["n"] == 3
    per_seed = {s: q["runs"]["01-good"][str(s)]["valid_bleu"][str(UPDATES)]["bleu"] for s in (1, 2, 3)}
    assert vb["mean"][-1] == pytest.approx(sum(per_seed.values()) / 3)
    diff = q["curve_comparisons"]["01-good"]["valid_bleu"][str(UPDATES)]
    base = {s: q["runs"]["00-transformer"][str(s)]["valid_bleu"][str(UPDATES)]["bleu"] for s in (1, 2, 3)}
    assert diff["diffs"] == pytest.approx([per_seed[s] - base[s] for s in (1, 2, 3)])
    assert diff["better"] == sum(per_seed[s] > base[s] for s in (1, 2, 3)) > 0  # higher BLEU is better
    assert q["meta"]["valid_bleu"] is True
    md = (study.out / "quality.md").read_text()
    before_lengths = md.split("## Output length and chrF")[0]  # that section has a Δ row of its own
    assert "### Valid BLEU" in md and before_lengths.count("| Δ 01-good | 00-transformer |") == 3

    # reported without the option, nothing rescored or retrained
    n = (len(fk.train_calls), len(fk.eval_calls), len(fk.valid_calls))
    _main(qc, study, "--curve-updates", "20,40")
    assert (len(fk.train_calls), len(fk.eval_calls), len(fk.valid_calls)) == n
    assert json.loads((study.out / "quality.json").read_text())["curves"]["01-good"]["valid_bleu"] == vb


def test_seed_and_sentence_intervals_use_each_runs_own_test_and_valid_translations(qc, study):
    from fairseq_ctx.analysis.seed_sentence_statistics import seed_and_sentence_difference
    from fairseq_ctx.evaluation.scoring import bleu_of_statistics, sentence_statistics

    fk = study.fakes
    _main(qc, study, "--valid-bleu", "--curve-updates", "20,40")
    q = json.loads((study.out / "quality.json").read_text())
    c = q["comparisons"]["01-good"]["seed_and_sentence"]
    assert set(c) == {"test", "valid", "test+valid"}
    runs = q["runs"]
    for label, n in (("test", len(fk.refs)), ("valid", len(fk.valid_refs)), ("test+valid", len(fk.refs) + len(fk.valid_refs))):
        assert c[label]["n_sentences"] == n and c[label]["seeds"] == [1, 2, 3] and c[label]["ci_low"] is not None
    # each seed's difference is the two runs' corpus BLEU on that set (as scored, to 2 decimals)
    test_diffs = [runs["01-good"][str(s)]["bleu"] - runs["00-transformer"][str(s)]["bleu"] for s in (1, 2, 3)]
    valid_diffs = [runs["01-good"][str(s)]["valid_bleu"][str(UPDATES)]["bleu"]
                   - runs["00-transformer"][str(s)]["valid_bleu"][str(UPDATES)]["bleu"] for s in (1, 2, 3)]
    assert c["test"]["per_seed"] == pytest.approx(test_diffs, abs=0.011)
    assert c["valid"]["per_seed"] == pytest.approx(valid_diffs, abs=0.011)  # the last update's, of several
    assert test_diffs != pytest.approx(valid_diffs, abs=0.5)  # the fakes make the sets differ
    gap = q["comparisons"]["01-good"]["set_gap"]
    assert gap["per_seed"] == pytest.approx([a - b for a, b in zip(c["test"]["per_seed"], c["valid"]["per_seed"])])
    # and the whole interval is the statistic of the runs' stored translations (test + valid in that order)

    def translations(name, seed):
        run_dir = study.out / "runs" / name / f"seed{seed}"
        test = json.loads((run_dir / "result.json").read_text())["hyps"]
        valid = json.loads((run_dir / "valid" / f"upd{UPDATES}" / "result.json").read_text())["hyps"]
        return (sentence_statistics(test, fk.refs, "en") + sentence_statistics(valid, fk.valid_refs, "en"))

    expected = seed_and_sentence_difference({s: translations("01-good", s) for s in (1, 2, 3)},
                                            {s: translations("00-transformer", s) for s in (1, 2, 3)},
                                            bleu_of_statistics("en"))
    assert c["test+valid"] == json.loads(json.dumps(expected))
    assert not any("valid_hyps" in r or "hyps" in r for n in runs for r in runs[n].values())
    md = (study.out / "quality.md").read_text()
    assert "## Seeds and sentences both sampled" in md
    section = md.split("## Seeds and sentences both sampled")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| 01-good | 00-transformer | ")]
    assert [row.split("|")[3].strip() for row in rows] == [f"test ({len(fk.refs)})", f"valid ({len(fk.valid_refs)})",
                                                           f"test+valid ({len(fk.refs) + len(fk.valid_refs)})"]
    t = c["test"]
    cells = [cell.strip() for cell in rows[0].split("|")]
    assert cells[5] == f"{t['mean_diff']:+.2f} [{t['ci_low']:+.2f}, {t['ci_high']:+.2f}]"
    # the seed-level interval beside it: t(S - 1) over the per-seed differences, sentences fixed
    import statistics
    from scipy import stats

    for row, label in zip(rows, ("test", "valid", "test+valid")):
        st = c[label]
        cells = [cell.strip() for cell in row.split("|")]
        half = stats.t.ppf(0.975, 2) * statistics.stdev(st["per_seed"]) / math.sqrt(3)
        assert cells[8] == f"{st['mean_diff']:+.2f} [{st['mean_diff'] - half:+.2f}, {st['mean_diff'] + half:+.2f}]"
        assert cells[9].rstrip("*") == f"{100 * st['variance_shares']['sentence']:.0f} %"
        assert cells[9].endswith("*") == ("sentence" in st["truncated"])
        assert cells[6] == f"{st['df']:.1f}" and cells[7] == f"{st['p']:.3f}"
    gap_line = next(line for line in section.splitlines() if line.startswith("- 01-good: "))
    assert gap_line.startswith(f"- 01-good: {gap['mean']:+.2f} (per seed")
    assert f"z {gap['z']:+.1f}, p {gap['p']:.3g}" in gap_line
    assert ("differ more than sentence sampling explains" in gap_line) == (gap["p"] < 0.05)


def test_seeds_without_translations_get_no_seed_and_sentence_interval_and_it_is_said(qc, study, tmp_path):
    _, report = _earlier_report(qc, study, tmp_path, "seeds12.json", "--seeds", "1", "2")
    q = _main(qc, study, "--import-runs", str(report))  # seed 3 trained here
    st = q["comparisons"]["01-good"]["seed_and_sentence"]["test"]
    assert st == {"note": "seed(s) 1, 2 have no stored translations of this set: no interval"}
    assert "seed(s) 1, 2 have no stored translations of this set" in (study.out / "quality.md").read_text()


def test_valid_bleu_added_to_a_finished_study_retrains_once_and_scores_both_subsets_from_it(qc, study, capsys):
    fk = study.fakes
    _main(qc, study, "--curve-updates", "20", "--seeds", "1", "--configs", "00-*")
    assert not (study.out / "runs" / "00-transformer" / "seed1" / "checkpoints").exists()
    n_eval = len(fk.eval_calls)
    capsys.readouterr()
    q = _main(qc, study, "--curve-updates", "20", "--seeds", "1", "--configs", "00-*", "--valid-bleu")
    # said before training, not found out hours later
    assert "1 finished run(s) will be trained again" in capsys.readouterr().err
    # the checkpoints were deleted once scored: trained again, with its checkpoint at 20, and
    # test scored again too (a retraining equals the first only on the same host and threads)
    assert len(fk.train_calls) == 2 and fk.train_calls[1]["curve"] == (20,)
    assert sorted(fk.eval_calls[n_eval:]) == sorted(fk.valid_calls) == [("00-transformer", 1, 20),
                                                                        ("00-transformer", 1, UPDATES)]
    assert q["curves"]["00-transformer"]["valid_bleu"]["updates"] == [20, UPDATES]
    # nothing more once done
    n_train, n_eval, n_valid = len(fk.train_calls), len(fk.eval_calls), len(fk.valid_calls)
    _main(qc, study, "--curve-updates", "20", "--seeds", "1", "--configs", "00-*", "--valid-bleu")
    assert (len(fk.train_calls), len(fk.eval_calls), len(fk.valid_calls)) == (n_train, n_eval, n_valid)


def test_valid_bleu_without_valid_references_fails_before_training(qc, study, capsys):
    (study.data / "raw" / "valid.en").unlink()
    with pytest.raises(SystemExit) as e:
        _main(qc, study, "--valid-bleu")
    assert e.value.code == 2 and "no raw valid references" in capsys.readouterr().err
    assert not study.fakes.train_calls


def _earlier_report(qc, study, tmp_path, name, *args):
    """Run a study, keep only its report (the out-dir is gone, as on another machine)."""
    q = _main(qc, study, *args)
    report = tmp_path / name
    os.replace(study.out / "quality.json", report)
    shutil.rmtree(study.out)
    return q, report


def test_seeds_imported_from_an_earlier_report_are_not_rerun_and_enter_the_seed_statistics(qc, study, tmp_path):
    fk = study.fakes
    first, report = _earlier_report(qc, study, tmp_path, "seeds12.json", "--curve-updates", "20,40", "--seeds", "1", "2")
    n_train, n_eval = len(fk.train_calls), len(fk.eval_calls)
    q = _main(qc, study, "--curve-updates", "20,40", "--import-runs", str(report))  # seeds 1 2 3
    assert sorted((c["arch"], c["seed"]) for c in fk.train_calls[n_train:]) == [("transformer", 3), ("transformer_x", 3)]
    assert {s for _, s, _ in fk.eval_calls[n_eval:]} == {3}
    c = q["comparisons"]["01-good"]
    assert c["seeds"] == [1, 2, 3]
    # no translations in a report: no bootstrap for the imported seeds, only for seed 3
    assert c["per_seed"][1] is None and c["per_seed"][2] is None and 0 <= c["per_seed"][3]["p_value"] <= 1
    bleu = {n: [first["runs"][n]["1"]["bleu"], first["runs"][n]["2"]["bleu"], q["runs"][n]["3"]["bleu"]]
            for n in ("00-transformer", "01-good")}
    diffs = [a - b for a, b in zip(bleu["01-good"], bleu["00-transformer"])]
    assert c["seed_level"]["n"] == 3 and c["seed_level"]["diffs"] == pytest.approx(diffs)
    assert q["summary"]["00-transformer"]["bleu"] == bleu["00-transformer"]
    for metric, ups in (("bleu", [20, 40, UPDATES]), ("valid_loss", [20, 25, 40, 50, 60])):
        assert q["curves"]["01-good"][metric]["n"] == 3 and q["curves"]["01-good"][metric]["updates"] == ups
    assert q["curves"]["01-good"]["bleu"]["per_seed"]["1"] == {str(u): p["bleu"] for u, p in
                                                               first["runs"]["01-good"]["1"]["curve"].items()}
    assert q["runs"]["01-good"]["1"]["imported_from"] == str(report) and "imported_from" not in q["runs"]["01-good"]["3"]
    assert q["meta"]["imported"] == {str(report): {"00-transformer": [1, 2], "01-good": [1, 2]}}
    md = (study.out / "quality.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| 01-good | 00-transformer |"))
    assert f"| - / - / {c['per_seed'][3]['p_value']:.3f} |" in row
    assert f"imported from `{report}`" in md and "01-good seeds 1, 2" in md

    # the combined report imports whole: nothing trained, the same statistics
    n_train = len(fk.train_calls)
    _, combined = _earlier_report(qc, study, tmp_path, "seeds123.json", "--curve-updates", "20,40",
                                  "--import-runs", str(report))
    assert len(fk.train_calls) == n_train  # seed 3 done in the out-dir, 1 and 2 imported
    q2 = _main(qc, study, "--curve-updates", "20,40", "--import-runs", str(combined))
    assert len(fk.train_calls) == n_train
    assert q2["comparisons"]["01-good"]["seed_level"] == q["comparisons"]["01-good"]["seed_level"]
    assert all(c is None for c in q2["comparisons"]["01-good"]["per_seed"].values())
    # a seed the combined report had imported itself still says where it was first imported from
    assert q2["runs"]["01-good"]["1"]["imported_from"] == str(combined)
    assert q2["runs"]["01-good"]["1"]["imported_first_from"] == str(report)
    assert "imported_first_from" not in q2["runs"]["01-good"]["3"]


def test_a_pair_from_two_reports_stays_marked_when_a_third_report_imports_both(qc, study, tmp_path):
    _, report_a = _earlier_report(qc, study, tmp_path, "a.json", "--seeds", "1", "--configs", "01-*")
    q_b, report_b = _earlier_report(qc, study, tmp_path, "b.json", "--seeds", "1", "--import-runs", str(report_a))
    assert q_b["meta"]["mixed_pairs"] == ["01-good vs 00-transformer seed 1"]  # 01 from A, 00 trained in B
    q_c = _main(qc, study, "--seeds", "1", "--import-runs", str(report_b))
    assert q_c["meta"]["mixed_pairs"] == ["01-good vs 00-transformer seed 1"]  # still A against B
    assert q_c["meta"]["imported_first"] == {str(report_a): {"01-good": [1]}}
    assert f"first imported (by the report named above) from `{report_a}`: 01-good seeds 1" in (
        study.out / "quality.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--updates", "50"], "was run with other settings"),
    (["--curve-updates", "20,30,40"], "has no test BLEU at 30 updates"),
    (["--curve-updates", "20,40", "--valid-bleu"], "has no valid BLEU at 20, valid BLEU at 40, valid BLEU at 60"),
    (["--curve-updates", "20,40", "--import-runs", "SAME"], "is in both"),
    (["--import-runs", "NOT_A_REPORT"], "not a quality_compare report"),
    (["EDIT_ONE_REFERENCE"], "scored on other test references"),
    (["DROP_ONE_REFERENCE"], "scored on other test references"),
    (["OTHER_DATA"], "trained on other data"),
    (["OTHER_TORCH"], "made with other versions (torch 1.0 there"),
])
def test_an_imported_run_that_does_not_fit_fails_before_training(qc, study, tmp_path, capsys, args, message):
    _, report = _earlier_report(qc, study, tmp_path, "seeds1.json", "--curve-updates", "20,40", "--seeds", "1")
    (tmp_path / "not-a-report.json").write_text("[]")
    test_refs = study.data / "raw" / "test.en"
    lines = test_refs.read_text().splitlines(keepends=True)
    if "EDIT_ONE_REFERENCE" in args:  # same number of sentences, other text
        test_refs.write_text("".join(lines[:-1]) + "an other reference\n")
    if "DROP_ONE_REFERENCE" in args:  # the data prepared again with one sentence less
        test_refs.write_text("".join(lines[:-1]))
        for path in (study.data / "bin").glob("test.*"):
            path.unlink()
        _binarise(str(study.data / "bin"), "test", len(lines) - 1)
    if "OTHER_DATA" in args:  # the binarised data changed since the report
        (study.data / "bin" / "dict.en.txt").write_text("w1 5\n")
    if "OTHER_TORCH" in args:
        r = json.loads(report.read_text())
        r["meta"]["torch"] = "1.0"
        report.write_text(json.dumps(r))
    args = [x for x in args if not x.endswith(("_REFERENCE", "_DATA", "_TORCH"))]
    args = [{"SAME": str(report), "NOT_A_REPORT": str(tmp_path / "not-a-report.json")}.get(x, x) for x in args]
    n_train = len(study.fakes.train_calls)
    with pytest.raises(SystemExit) as e:
        _main(qc, study, "--import-runs", str(report), *args)
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert len(study.fakes.train_calls) == n_train and not (study.out / "runs").exists()


@pytest.mark.parametrize("bad, message", [("missing.json", "not a quality_compare report"),
                                          ("empty.json", "not a quality_compare report"),
                                          ("runs-a-list.json", "its runs and meta are not mappings"),
                                          ("config-runs-a-list.json", "its runs of 00-transformer are not a mapping"),
                                          ("seed-a-list.json", "00-transformer seed 1 is not a run record"),
                                          ("other-torch.json", "made with other versions (torch 1.0 there"),
                                          ("twice", "is in both")])
def test_an_import_that_cannot_fit_fails_before_the_data_is_prepared(qc, study, tmp_path, monkeypatch, capsys,
                                                                      bad, message):
    _, report = _earlier_report(qc, study, tmp_path, "seeds1.json", "--seeds", "1")
    r = json.loads(report.read_text())
    (tmp_path / "empty.json").write_text("{}")
    (tmp_path / "runs-a-list.json").write_text(json.dumps(dict(r, runs=[])))
    (tmp_path / "config-runs-a-list.json").write_text(json.dumps(dict(r, runs=dict(r["runs"], **{"00-transformer": []}))))
    (tmp_path / "seed-a-list.json").write_text(json.dumps(dict(r, runs=dict(r["runs"], **{"00-transformer": {"1": []}}))))
    (tmp_path / "other-torch.json").write_text(json.dumps(dict(r, meta=dict(r["meta"], torch="1.0"))))
    imports = [str(report), str(report)] if bad == "twice" else [str(tmp_path / bad)]
    prepared, run = [], qc.subprocess.run

    def data_preparation_recorded(cmd, **kwargs):
        if cmd[:2] == ["bash", qc.TATOEBA_SCRIPT]:
            return prepared.append(cmd)
        return run(cmd, **kwargs)  # git, asked for the commit

    monkeypatch.setattr(qc.subprocess, "run", data_preparation_recorded)
    with pytest.raises(SystemExit) as e:  # no data yet: main() would otherwise prepare it (minutes) first
        _main(qc, study, "--data-dir", str(tmp_path / "no-data-yet"), "--seeds", "1",
              *[w for path in imports for w in ("--import-runs", path)])
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert prepared == []


@pytest.mark.parametrize("split, damage, message", [
    ("test", "fewer", "test.zh-en.zh.idx holds 79 sentences, "),
    ("valid", "fewer", "valid.zh-en.zh.idx holds 59 sentences, "),
    ("test", "missing", "no binarised test split of zh -> en in "),
])
def test_raw_and_binarised_data_of_two_preparations_fail_before_training(qc, study, capsys, split, damage, message):
    """Every scored checkpoint is checked sentence by sentence against the raw references:
    found only then, a mismatch would cost every training of the study."""
    for path in (study.data / "bin").glob(f"{split}.*"):
        path.unlink()
    if damage == "fewer":
        _binarise(str(study.data / "bin"), split, {"test": 79, "valid": 59}[split])
    with pytest.raises(SystemExit) as e:
        _main(qc, study, "--valid-bleu")
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert study.fakes.train_calls == []


def test_the_direction_asked_for_reaches_every_training_and_scoring(qc, study):
    _main(qc, study, "--seeds", "1", "--valid-bleu", "--curve-updates", "20")
    assert {d for d in study.fakes.directions} == {("train", ("zh", "en")), ("test", ("zh", "en")),
                                                    ("valid", ("zh", "en"))}
    # en -> zh on the same zh-en data: fairseq also reads test.zh-en.en as the source of en-zh
    for split, n in (("test", 80), ("valid", 60)):
        (study.data / "raw" / f"{split}.zh").write_text("".join(r + "\n" for r in _refs(n, seed=int(split == "valid"))))
    study.fakes.directions.clear()
    _main(qc, study, "--seeds", "1", "--valid-bleu", "--src", "en", "--tgt", "zh", "--out-dir", str(study.out) + "-en-zh")
    assert {d for d in study.fakes.directions} == {("train", ("en", "zh")), ("test", ("en", "zh")),
                                                    ("valid", ("en", "zh"))}


def test_an_out_dir_holds_the_runs_of_one_data_set(qc, study, capsys):
    _main(qc, study, "--seeds", "1")
    n_train = len(study.fakes.train_calls)
    (study.data / "bin" / "dict.en.txt").write_text("w1 5\n")  # prepared again: another vocabulary
    with pytest.raises(SystemExit) as e:
        _main(qc, study, "--seeds", "1")
    err = capsys.readouterr().err
    assert e.value.code == 2 and "holds runs of other data" in err and "data_sha256" in err
    assert len(study.fakes.train_calls) == n_train  # nothing "done already" from the other data


@pytest.mark.parametrize("case", ["other data", "no report", "other direction", "not a record"])
def test_an_out_dir_from_before_data_json_is_checked_before_its_runs_are_adopted(qc, study, capsys, case):
    _main(qc, study, "--seeds", "1")
    n_train = len(study.fakes.train_calls)
    data_json = study.out / "data.json"
    data_json.unlink()  # made by an earlier version
    if case == "other data":  # its report names the data its runs were trained on
        (study.data / "bin" / "dict.en.txt").write_text("w1 5\n")
    if case == "no report":
        (study.out / "quality.json").unlink()
    if case == "not a record":
        data_json.write_text("{}")
    args = ["--src", "en", "--tgt", "zh"] if case == "other direction" else []
    if case == "other direction":
        for split, n in (("test", 80), ("valid", 60)):
            (study.data / "raw" / f"{split}.zh").write_text("".join(r + "\n" for r in _refs(n)))
    if case == "no report":  # nothing to check against: adopted, and said
        _main(qc, study, "--seeds", "1")
        assert "no report to check their data against" in capsys.readouterr().err
        assert len(study.fakes.train_calls) == n_train and json.loads(data_json.read_text())["src"] == "zh"
        return
    with pytest.raises(SystemExit) as e:
        _main(qc, study, "--seeds", "1", *args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(study.fakes.train_calls) == n_train
    assert {"other data": "data_sha256 of its quality.json differs", "other direction": "made before --src / --tgt",
            "not a record": "is not a data record"}[case] in err


@pytest.mark.parametrize("where, words", [("train.common", "--lr 1e-3 --disable-validation -s en"),
                                          ("01-good.args", "--arch transformer_x --target-lang zh")])
def test_settings_that_name_another_direction_are_refused(qc, study, capsys, where, words):
    (study.out.parent / "configs" / where).write_text(words + "\n")
    with pytest.raises(SystemExit) as e:
        _main(qc, study, "--seeds", "1")
    assert e.value.code == 2 and "set the direction with --src / --tgt" in capsys.readouterr().err
    assert study.fakes.train_calls == []


def test_data_is_prepared_with_the_scripts_own_pair_and_the_direction(qc, study, tmp_path, monkeypatch):
    prepared, run = [], qc.subprocess.run

    def data_preparation_recorded(cmd, **kwargs):
        if cmd[:2] == ["bash", qc.TATOEBA_SCRIPT]:
            prepared.append(cmd[2:])
            raise SystemExit("recorded")  # the test stops here
        return run(cmd, **kwargs)

    monkeypatch.setattr(qc.subprocess, "run", data_preparation_recorded)
    for src, tgt, pair in (("zh", "en", "zh-en"), ("en", "zh", "zh-en"), ("en", "ja", "ja-en")):
        with pytest.raises(SystemExit):
            _main(qc, study, "--data-dir", str(tmp_path / "new"), "--src", src, "--tgt", tgt)
        assert prepared[-1][:6] == ["--pair", pair, "--src", src, "--tgt", tgt]


def _preparations_recorded(qc, monkeypatch, rc=0):
    prepared, run = [], qc.subprocess.run

    def recorded(cmd, **kwargs):
        if cmd[:2] == ["bash", qc.TATOEBA_SCRIPT]:
            prepared.append(cmd[2:])
            if rc:
                return types.SimpleNamespace(returncode=rc)
            raise SystemExit("recorded")  # the test stops here
        return run(cmd, **kwargs)

    monkeypatch.setattr(qc.subprocess, "run", recorded)
    return prepared


@pytest.mark.parametrize("lack", ["raw", "bin and raw"])
def test_a_data_dir_of_ones_own_is_never_filled_with_tatoeba(qc, study, monkeypatch, capsys, lack):
    """A user's data without the raw references: preparing Tatoeba into it would score their
    model's output against Tatoeba references (same count: silently)."""
    prepared = _preparations_recorded(qc, monkeypatch)
    shutil.rmtree(study.data / "raw")
    if lack == "bin and raw":
        shutil.rmtree(study.data / "bin")
        (study.data / "README").write_text("my corpus\n")
    before = sorted(p.name for p in study.data.iterdir())
    with pytest.raises(SystemExit) as e:
        _main(qc, study)
    err = capsys.readouterr().err
    assert e.value.code == 2 and not prepared and not study.fakes.train_calls
    assert f"lacks {'' if lack == 'raw' else str(study.data / 'bin') + '/ and '}{study.data / 'raw' / 'test.en'}" in err
    assert sorted(p.name for p in study.data.iterdir()) == before


def test_a_data_dir_another_script_prepared_is_not_handed_to_tatoeba(qc, study, monkeypatch, capsys):
    prepared = _preparations_recorded(qc, monkeypatch)
    shutil.rmtree(study.data / "raw")
    (study.data / "settings").write_text("corpus=wmt14 pair=en-de merges=32000\n")  # prepare-wmt.sh's kind
    with pytest.raises(SystemExit) as e:
        _main(qc, study)
    assert e.value.code == 2 and not prepared and "lacks" in capsys.readouterr().err


def test_a_tatoeba_preparation_that_was_cut_off_is_resumed(qc, study, monkeypatch, tmp_path):
    prepared = _preparations_recorded(qc, monkeypatch)
    data = tmp_path / "cut"
    (data / "raw.partial").mkdir(parents=True)
    (data / "settings").write_text("pair=zh-en src=zh tgt=en merges=3000 valid=1000 test=1000 limit=all\n")
    with pytest.raises(SystemExit, match="recorded"):
        _main(qc, study, "--data-dir", str(data))
    assert prepared and prepared[0][prepared[0].index("--out") + 1] == str(data)


def test_a_pair_tatoeba_does_not_have_fails_in_one_line_and_a_failed_preparation_trains_nothing(
        qc, study, monkeypatch, tmp_path, capsys):
    prepared = _preparations_recorded(qc, monkeypatch, rc=2)
    with pytest.raises(SystemExit) as e:
        _main(qc, study, "--data-dir", str(tmp_path / "new-de"), "--src", "de", "--tgt", "en")
    assert e.value.code == 2 and not prepared and "has zh-en and ja-en only (not de -> en)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        _main(qc, study, "--data-dir", str(tmp_path / "new"))
    assert len(prepared) == 1 and "data preparation failed" in str(e.value.code) and not study.fakes.train_calls


def test_a_valid_loss_that_diverged_is_a_gap_in_the_report_and_the_json_stays_strict(qc, study, monkeypatch):
    loss = _loss

    def diverged_in_seed_2(arch, seed, u):
        return math.inf if (arch, seed, u) == ("transformer_x", 2, UPDATES) else loss(arch, seed, u)

    monkeypatch.setitem(globals(), "_loss", diverged_in_seed_2)
    _main(qc, study, "--curve-updates", "20,40")
    text = (study.out / "quality.json").read_text()
    q = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in quality.json"))
    assert q["runs"]["01-good"]["2"]["valid"][str(UPDATES)]["loss"] is None
    assert q["curves"]["01-good"]["valid_loss"]["non_finite"] == {str(UPDATES): [2]}
    assert "seed(s) 2" in q["curve_comparisons"]["01-good"]["valid_loss"][str(UPDATES)]["note"]
    assert "non-finite (seed 2)" in (study.out / "quality.md").read_text()


def test_a_diverged_training_stops_with_one_message_and_keeps_the_finished_runs(qc, study, capsys):
    train = study.fakes.train

    def diverges(data_bin, common, arch_args, updates, seed, save_dir, *args, **kwargs):
        if arch_args[1] == "transformer_x" and seed == 2:
            raise RuntimeError(f"training failed (rc 1), log {save_dir}/../train.log:\n"
                               "FloatingPointError: gradients are Nan/Inf")
        return train(data_bin, common, arch_args, updates, seed, save_dir, *args, **kwargs)

    with pytest.raises(SystemExit) as e:
        qc.main(study.argv + ["--seeds", "1", "2"], train_fn=diverges, eval_fn=study.fakes.evaluate)
    assert "01-good seed 2 failed (training failed (rc 1), log" in str(e.value.code)
    assert "its training diverged" in str(e.value.code)
    assert "rerun without seed 2 (--seeds)" in str(e.value.code) and "FloatingPointError" in capsys.readouterr().err
    assert (study.out / "runs" / "01-good" / "seed1" / "result.json").exists()
    assert not (study.out / "quality.json").exists() and not (study.out / "quality.md").exists()


def test_a_config_dir_without_shared_settings_is_a_usage_error(qc, study, capsys):
    (pathlib.Path(study.argv[study.argv.index("--config-dir") + 1]) / "train.common").unlink()
    with pytest.raises(SystemExit) as e:
        _main(qc, study)
    assert e.value.code == 2 and "no training settings file" in capsys.readouterr().err


def test_a_gpu_whose_name_cannot_be_read_is_still_pinned_without_a_false_warning(qc, study, monkeypatch, capsys):
    unnamed = "unnamed GPU (its name could not be read: RuntimeError)"
    monkeypatch.setattr(qc, "_GPU_PROBE", {"result": (unnamed, 2, [unnamed, "NVIDIA H100 80GB HBM3"])})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    _main(qc, study, "--seeds", "1", "--jobs", "2")
    err = capsys.readouterr().err
    assert "2 GPUs: each run sees one" in err
    assert "runs are not given one GPU each" not in err and "models" not in err


def test_a_report_is_written_whole_or_not_at_all(qc, study, monkeypatch):
    q = _main(qc, study, "--seeds", "1")
    before = (study.out / "quality.json").read_text()
    markdown_before = (study.out / "quality.md").read_text()
    assert json.loads(before)["meta"] == q["meta"]

    dump = json.dump

    def killed_while_writing_the_report(obj, f, **kwargs):
        if not (isinstance(obj, dict) and "comparisons" in obj):
            return dump(obj, f, **kwargs)  # the runs' own records
        f.write('{"meta": ')
        raise KeyboardInterrupt

    monkeypatch.setattr(qc.json, "dump", killed_while_writing_the_report)
    with pytest.raises(KeyboardInterrupt):
        _main(qc, study, "--seeds", "1", "2")
    assert (study.out / "runs" / "00-transformer" / "seed2" / "result.json").exists()  # got as far as the report
    assert (study.out / "quality.json").read_text() == before  # the earlier report, whole
    assert (study.out / "quality.md").read_text() == markdown_before  # and its markdown, not the new one
    assert not [p for p in os.listdir(study.out) if p.startswith("partial-")]

    # killed while the markdown is written: the new JSON must not already have replaced the old
    monkeypatch.setattr(qc.json, "dump", dump)
    real_atomic_write = qc.atomic_write

    @contextlib.contextmanager
    def killed_while_writing_the_markdown(path, *args, **kwargs):
        with real_atomic_write(path, *args, **kwargs) as f:
            if str(path).endswith(".md"):
                f.write("# Quality")
                raise KeyboardInterrupt
            yield f

    monkeypatch.setattr(qc, "atomic_write", killed_while_writing_the_markdown)
    with pytest.raises(KeyboardInterrupt):
        _main(qc, study, "--seeds", "1", "2")
    assert (study.out / "quality.json").read_text() == before
    assert (study.out / "quality.md").read_text() == markdown_before


def test_import_of_other_versions_only_when_asked_and_named_in_the_report(qc, study, tmp_path):
    _, report = _earlier_report(qc, study, tmp_path, "seeds1.json", "--seeds", "1")
    r = json.loads(report.read_text())
    r["meta"]["fairseq"] = "0.9.0"
    report.write_text(json.dumps(r))
    q = _main(qc, study, "--seeds", "1", "--import-runs", str(report), "--import-other-versions")
    assert q["meta"]["import_sources"][str(report)]["fairseq"] == "0.9.0"
    assert "fairseq 0.9.0" in (study.out / "quality.md").read_text()


def test_forgetting_import_runs_fails_instead_of_training_the_imported_seeds_again(qc, study, tmp_path, capsys):
    _, report = _earlier_report(qc, study, tmp_path, "seeds1.json", "--seeds", "1")
    _main(qc, study, "--seeds", "1", "2", "--import-runs", str(report))
    n_train = len(study.fakes.train_calls)
    with pytest.raises(SystemExit) as e:
        _main(qc, study, "--seeds", "1", "2")
    assert e.value.code == 2 and f"imported from {report} the last time" in capsys.readouterr().err
    assert len(study.fakes.train_calls) == n_train


def test_a_seed_run_here_wins_over_the_report_and_mixed_pairs_are_named(qc, study, tmp_path):
    fk = study.fakes
    _, report = _earlier_report(qc, study, tmp_path, "seeds12.json", "--seeds", "1", "2")
    r = json.loads(report.read_text())
    del r["runs"]["01-good"]["2"]  # the report lacks the system's seed 2: run here
    report.write_text(json.dumps(r))
    _main(qc, study, "--seeds", "1", "--configs", "01-*")  # seed 1 of the system run here first
    n_train = len(fk.train_calls)
    q = _main(qc, study, "--seeds", "1", "2", "--import-runs", str(report))
    assert [(c["arch"], c["seed"]) for c in fk.train_calls[n_train:]] == [("transformer_x", 2)]
    runs = q["runs"]
    assert "imported_from" not in runs["01-good"]["1"] and "imported_from" not in runs["01-good"]["2"]
    assert runs["00-transformer"]["1"]["imported_from"] == runs["00-transformer"]["2"]["imported_from"] == str(report)
    c = q["comparisons"]["01-good"]
    # both pairs cross (baseline imported, system here): no bootstrap, and both named
    assert c["per_seed"] == {1: None, 2: None} and c["bootstrap_seeds"] == []
    assert q["meta"]["mixed_pairs"] == ["01-good vs 00-transformer seed 1", "01-good vs 00-transformer seed 2"]
    md = (study.out / "quality.md").read_text()
    assert "trained in different places" in md and "| 0 / 0 of 0 |" in md


def test_kept_checkpoints_are_scored_again_with_another_beam_not_trained_again(qc, study):
    fk = study.fakes
    first = _main(qc, study, "--seeds", "1", "--curve-updates", "20,40", "--keep-checkpoints")
    n_train, n_eval = len(fk.train_calls), len(fk.eval_calls)
    q = _main(qc, study, "--seeds", "1", "--curve-updates", "20,40", "--keep-checkpoints", "--beam", "4")
    assert len(fk.train_calls) == n_train  # the same training: its checkpoints are scored again
    assert sorted(fk.eval_calls[n_eval:]) == sorted((n, 1, u) for n in ("00-transformer", "01-good")
                                                    for u in (20, 40, UPDATES))
    run = q["runs"]["00-transformer"]["1"]
    assert "beam=4" in run["settings"] and "beam=5" in first["runs"]["00-transformer"]["1"]["settings"]
    assert run["train_seconds"] == first["runs"]["00-transformer"]["1"]["train_seconds"]
    # scored once more without --keep-checkpoints: they are deleted afterwards ...
    _main(qc, study, "--seeds", "1", "--curve-updates", "20,40", "--beam", "3")
    assert len(fk.train_calls) == n_train
    assert not (study.out / "runs" / "00-transformer" / "seed1" / "checkpoints").exists()
    # ... so another beam then has nothing to score: trained again
    _main(qc, study, "--seeds", "1", "--curve-updates", "20,40", "--beam", "2")
    assert len(fk.train_calls) == n_train + 2


def test_kept_side_checkpoints_of_epoch_end_points_are_scored_again_not_retrained(qc, study):
    fk = study.fakes
    _main(qc, study, "--seeds", "1", "--configs", "00-*", "--curve-updates", "20,40,50", "--keep-checkpoints")
    assert [c["updates"] for c in fk.train_calls] == [UPDATES, 50]  # 50 ends an epoch: a side training
    n_eval = len(fk.eval_calls)
    _main(qc, study, "--seeds", "1", "--configs", "00-*", "--curve-updates", "20,40,50", "--keep-checkpoints",
          "--beam", "4")
    assert len(fk.train_calls) == 2 and sorted(u for *_, u in fk.eval_calls[n_eval:]) == [20, 40, 50, UPDATES]


def test_kept_checkpoints_under_the_older_key_are_scored_again_with_another_beam(qc, study):
    """trained.json / started.json written before training and scoring settings were told
    apart hold the whole settings, with the beam of their time: another beam finds the same
    training in them, and the kept checkpoints are scored, not deleted."""
    fk = study.fakes
    _main(qc, study, "--seeds", "1", "--configs", "00-*", "--keep-checkpoints")
    ck = study.out / "runs" / "00-transformer" / "seed1" / "checkpoints"
    for name in ("trained.json", "started.json"):
        record = json.loads((ck / name).read_text())
        record["settings"] = record["settings"].replace(f"updates={UPDATES} ", f"updates={UPDATES} beam=5 ", 1).replace(
            " args=", " gen= args=", 1)
        (ck / name).write_text(json.dumps(record))
    _main(qc, study, "--seeds", "1", "--configs", "00-*", "--keep-checkpoints", "--beam", "4")
    assert len(fk.train_calls) == 1 and (ck / "checkpoint_last.pt").exists()


def test_a_beam_change_without_kept_checkpoints_says_it_trains_again(qc, study, capsys):
    _main(qc, study, "--seeds", "1", "--configs", "00-*")
    capsys.readouterr()
    _main(qc, study, "--seeds", "1", "--configs", "00-*", "--beam", "4")
    assert ("1 run(s) trained with these settings were scored with another beam or generation options and their "
            "checkpoints are gone") in capsys.readouterr().err
    assert len(study.fakes.train_calls) == 2


def test_scoring_interrupted_resumes_without_retraining(qc, study):
    fk = study.fakes
    fk.fail_eval_at = 40
    with pytest.raises(SystemExit, match="killed while scoring"):
        _main(qc, study, "--curve-updates", "20,40", "--seeds", "1", "--configs", "00-*")
    run_dir = study.out / "runs" / "00-transformer" / "seed1"
    assert (run_dir / "result.json").exists() and (run_dir / "curve" / "upd20" / "result.json").exists()
    assert not (run_dir / "curve" / "upd40" / "result.json").exists()
    assert (run_dir / "checkpoints" / "checkpoint_2_40.pt").exists()  # kept until scored
    fk.fail_eval_at = None
    n_train = len(fk.train_calls)
    q = _main(qc, study, "--curve-updates", "20,40", "--seeds", "1", "--configs", "00-*")
    assert len(fk.train_calls) == n_train and fk.eval_calls[-1] == ("00-transformer", 1, 40)
    assert q["curves"]["00-transformer"]["bleu"]["updates"] == [20, 40, UPDATES]
    assert q["runs"]["00-transformer"]["1"]["trained_with"]["host"]  # kept from the training
    assert not (run_dir / "checkpoints").exists()


def test_a_resumed_training_is_marked_so_its_seconds_are_not_read_as_the_whole(qc, study):
    fk = study.fakes
    fk.fail_eval_at = UPDATES
    for seed in ("1", "2"):  # one at a time: a failure stops runs not yet started
        with pytest.raises(SystemExit, match="killed while scoring"):
            _main(qc, study, "--seeds", seed, "--configs", "00-*")
    # seed 1 killed while training after its checkpoint at update 25 (started.json and
    # checkpoint_last.pt, no trained.json): fairseq resumes from 25
    ck1 = study.out / "runs" / "00-transformer" / "seed1" / "checkpoints"
    (ck1 / "trained.json").unlink()
    (ck1 / "checkpoint_last.pt").write_text("25")
    # seed 2 killed before its first checkpoint: trained from scratch, nothing to mark
    ck2 = study.out / "runs" / "00-transformer" / "seed2" / "checkpoints"
    (ck2 / "trained.json").unlink()
    (ck2 / "checkpoint_last.pt").unlink()
    fk.fail_eval_at, fk.allow_resume = None, True
    n_train = len(fk.train_calls)
    q = _main(qc, study, "--seeds", "1", "2", "--configs", "00-*")
    assert len(fk.train_calls) == n_train + 2
    assert q["runs"]["00-transformer"]["1"]["resumed_at_update"] == 25
    assert "resumed_at_update" not in q["runs"]["00-transformer"]["2"]


def _kill_after_training(qc, study, seed, last_at):
    """A run killed while training, after fairseq saved checkpoint_last.pt at ``last_at``:
    started.json and the checkpoint are there, trained.json is not."""
    fk = study.fakes
    fk.fail_eval_at, fk.allow_resume = UPDATES, True
    with pytest.raises(SystemExit, match="killed while scoring"):
        _main(qc, study, "--seeds", str(seed), "--configs", "00-*")
    ck = study.out / "runs" / "00-transformer" / f"seed{seed}" / "checkpoints"
    (ck / "trained.json").unlink()
    if last_at is None:
        (ck / "checkpoint_last.pt").unlink()
    else:
        (ck / "checkpoint_last.pt").write_text(str(last_at))
    fk.fail_eval_at = None


def test_an_interrupted_run_started_under_the_older_key_still_resumes(qc, study):
    """started.json written before training and scoring settings were told apart holds the
    whole settings (beam and generation options too): such a run resumes, not restarts."""
    _kill_after_training(qc, study, 1, 25)
    started = study.out / "runs" / "00-transformer" / "seed1" / "checkpoints" / "started.json"
    key = json.loads(started.read_text())
    assert key["settings"].startswith(f"updates={UPDATES} common=")  # no beam in the training key
    key["settings"] = key["settings"].replace(f"updates={UPDATES} ", f"updates={UPDATES} beam=5 ", 1).replace(
        " args=", " gen= args=", 1)
    del key["attempts"]  # recorded from 2026-11-26 on
    started.write_text(json.dumps(key))
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*")
    assert q["runs"]["00-transformer"]["1"]["resumed_at_update"] == 25
    assert q["runs"]["00-transformer"]["1"]["settings"] == key["settings"]  # the older key was the whole settings
    assert q["runs"]["00-transformer"]["1"]["earlier_attempts"] == [
        {"note": "not recorded (the training started before attempts were recorded)"}]


def test_a_run_resumed_twice_records_the_last_resumption(qc, study):
    _kill_after_training(qc, study, 1, 25)  # first training killed at 25
    _kill_after_training(qc, study, 1, 40)  # resumed from 25, killed again at 40
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*")
    log = (study.out / "runs" / "00-transformer" / "seed1" / "train.log").read_text()
    assert re.findall(r"@ (\d+) updates", log) == ["25", "40"]
    run = q["runs"]["00-transformer"]["1"]
    assert run["resumed_at_update"] == 40
    # where every attempt ran: the first, the one resumed at 25 (both killed), the one that finished
    assert len(run["earlier_attempts"]) == 2 and all(a["host"] and a["started"] for a in run["earlier_attempts"])
    assert run["trained_with"]["started"] >= run["earlier_attempts"][-1]["started"]


def test_a_run_resumed_in_a_later_epoch_under_translation_is_named_in_the_report(qc, study, capsys):
    """fairseq's translation groups the batches of a training resumed in epoch E > 1 with --seed + E:
    the report names such runs (not the uninterrupted ones); translation_exact_resume's are not."""
    _kill_after_training(qc, study, 1, 30)  # epoch 2 of the fake (25 updates an epoch)
    _kill_after_training(qc, study, 2, 20)  # still epoch 1: grouped as before under any task
    study.fakes.task_logged = "TranslationTask"
    capsys.readouterr()
    for again in (False, True):  # and a report of runs done already (records written before are read again)
        q = _main(qc, study, "--seeds", "1", "2", "--configs", "00-*")
        one, two = q["runs"]["00-transformer"]["1"], q["runs"]["00-transformer"]["2"]
        assert one["resumptions"] == [{"update": 30, "epoch": 2, "task": "TranslationTask",
                                       "batches_as_uninterrupted": False, "why": "grouped anew with --seed + 2"}]
        assert two["resumptions"] == [{"update": 20, "epoch": 1, "task": "TranslationTask",
                                       "batches_as_uninterrupted": True}]
        named = "00-transformer seed 1 (at 30 updates, epoch 2, TranslationTask: grouped anew with --seed + 2)"
        assert q["meta"]["runs_regrouped"] == [named] and q["meta"]["runs_regrouping_unknown"] is None
        md = (study.out / "quality.md").read_text()
        assert "runs resumed with other batches than the uninterrupted training's" in md and named in md
        assert "seed 2 (at 20" not in md
        err = capsys.readouterr().err
        assert f"[quality] warning: run(s) resumed with other batches than the uninterrupted training's: {named}" in err
        assert ("done already" in err) == again


def test_a_run_resumed_in_a_later_epoch_with_the_exact_task_is_not_named(qc, study):
    _kill_after_training(qc, study, 1, 30)
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*")
    assert q["runs"]["00-transformer"]["1"]["resumptions"] == [
        {"update": 30, "epoch": 2, "task": "ExactResumeTranslationTask", "batches_as_uninterrupted": True}]
    assert q["meta"]["runs_regrouped"] is None and q["meta"]["runs_regrouping_unknown"] is None
    assert "runs resumed with other batches" not in (study.out / "quality.md").read_text()


def test_a_run_resumed_under_another_task_is_named_as_not_known(qc, study):
    _kill_after_training(qc, study, 1, 30)
    study.fakes.task_logged = "TranslationMultiSimpleEpochTask"
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*")
    assert q["meta"]["runs_regrouped"] is None
    assert q["meta"]["runs_regrouping_unknown"] == [
        "00-transformer seed 1 (at 30 updates, epoch 2, TranslationMultiSimpleEpochTask)"]
    assert "runs whose batches after a resumption are not known" in (study.out / "quality.md").read_text()


@pytest.mark.parametrize("task, regrouped", [("TranslationTask", True), ("ExactResumeTranslationTask", False)])
def test_the_side_training_of_a_curve_point_is_read_too(qc, study, task, regrouped):
    """A curve point at an epoch's end is trained again from the checkpoint before it (50 from
    checkpoint_2_40.pt, epoch 2) in a side directory: that resumption is the point's, on test and
    on valid, kept with the point (a later side training to the same point does not change it)."""
    study.fakes.task_logged = task
    args = ("--seeds", "1", "--configs", "00-*", "--curve-updates", "20,40,50", "--keep-checkpoints")
    q = _main(qc, study, *args, "--valid-bleu")
    run = q["runs"]["00-transformer"]["1"]
    for part in ("curve", "valid_bleu"):
        assert [(r["update"], r["epoch"], r["task"], r["batches_as_uninterrupted"])
                for r in run[part][50]["resumptions"]] == [(40, 2, task, not regrouped)], part
        assert "resumptions" not in run[part][40]
    named = f"00-transformer seed 1 (the side training of its point 50: at 40 updates, epoch 2, {task}"
    assert [r for r in q["meta"]["runs_regrouped"] or [] if r.startswith(named)] == ([named + ": grouped anew "
                                                                                       "with --seed + 2)"] if regrouped else [])
    # another side training to 50 appended to its log (here under the other task): the scored point keeps its own
    side_log = study.out / "runs" / "00-transformer" / "seed1" / "train.to50.log"
    other = "ExactResumeTranslationTask" if regrouped else "TranslationTask"
    side_log.write_text(side_log.read_text() + side_log.read_text().replace(task, other))
    q = _main(qc, study, *args, "--valid-bleu")
    assert q["runs"]["00-transformer"]["1"]["curve"][50]["resumptions"][0]["task"] == task
    # a point scored before the side training's resumption was recorded with it: every side training of its log
    point = study.out / "runs" / "00-transformer" / "seed1" / "curve" / "upd50" / "result.json"
    rec = json.loads(point.read_text())
    del rec["resumptions"]
    point.write_text(json.dumps(rec))
    q = _main(qc, study, *args, "--valid-bleu")
    assert [r["task"] for r in q["runs"]["00-transformer"]["1"]["curve"][50]["resumptions"]] == [task, other]
    assert any(r.startswith("00-transformer seed 1 (the side training of its point 50") for r in q["meta"]["runs_regrouped"])


def test_an_imported_run_without_recorded_resumptions_is_named_as_not_known(qc):
    rec = {"bleu": 1.0, "imported_from": "old.json"}
    assert qc.runs_regrouped({"00-transformer": {1: rec}}, [1]) == (
        [], ["00-transformer seed 1 (imported from old.json: resumptions not recorded)"])
    assert qc.runs_regrouped({"00-transformer": {1: dict(rec, resumptions=[])}}, [1]) == ([], [])


@pytest.mark.parametrize("settings, expected", [
    ("updates=60 beam=5 common=--max-tokens 4096 args=--arch lstm seed=1", False),
    ("updates=60 beam=5 common=--update-epoch-batch-itr True --max-tokens 4096 args=--arch lstm seed=1", True),
    ("updates=60 beam=5 common=--update-epoch-batch-itr=False --max-tokens 4096 args=--arch lstm seed=1", False),
    ("updates=60 beam=5 common=--max-tokens 4096 --grouped-shuffling args=--arch lstm seed=1", True),
])
def test_a_runs_resumptions_are_told_from_its_settings(qc, tmp_path, settings, expected):
    """The options in a run's settings string (the first glued to "common=") that batch every epoch."""
    (tmp_path / "train.log").write_text(
        "2026-11-29 11:52:10 | INFO | fairseq_cli.train | task: TranslationTask\n"
        "2026-11-29 11:52:11 | INFO | fairseq.trainer | Loaded checkpoint c.pt (epoch 4 @ 504 updates)\n")
    assert [r["batches_as_uninterrupted"] for r in qc._resumptions_of_run(str(tmp_path), settings)] == [expected]


def test_a_run_restarted_from_scratch_is_not_marked_by_an_earlier_resumption_in_its_log(qc, study):
    _kill_after_training(qc, study, 1, 25)  # killed at 25
    _kill_after_training(qc, study, 1, None)  # resumed (the log says so), killed, checkpoint lost
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*")
    assert "Loaded checkpoint" not in (study.out / "runs" / "00-transformer" / "seed1" / "train.log").read_text()
    assert "resumed_at_update" not in q["runs"]["00-transformer"]["1"]
    assert "earlier_attempts" not in q["runs"]["00-transformer"]["1"]  # started over: one attempt
    assert study.fakes.train_calls[-1]["updates"] == UPDATES


def test_each_run_records_where_and_with_what_it_trained(qc, study):
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*", "--threads", "1")
    with_ = q["runs"]["00-transformer"]["1"]["trained_with"]
    assert with_["threads"] == 1 and with_["host"] and with_["torch"] and "git_commit" in with_
    assert with_ == json.loads((study.out / "runs" / "00-transformer" / "seed1" / "result.json").read_text())[
        "trained_with"]


def test_the_model_code_fingerprint_follows_models_and_modules_only(qc, tmp_path):
    package = tmp_path / "pkg"
    for folder in ("models", "modules", "models/sub", "analysis"):
        (package / folder).mkdir(parents=True)
    for path in ("models/a.py", "modules/b.py", "models/sub/c.py", "analysis/d.py"):
        (package / path).write_text("x = 1\n")
    first = qc.model_code_sha256(str(package))
    (package / "analysis" / "d.py").write_text("x = 2\n")
    (package / "models" / "notes.txt").write_text("not code\n")
    assert qc.model_code_sha256(str(package)) == first
    os.symlink(package / "models" / "gone.py", package / "models" / ".#a.py")  # an editor's lock: dangling
    assert qc.model_code_sha256(str(package)) == first
    (package / "models" / "sub" / "c.py").write_text("x = 2\n")
    assert qc.model_code_sha256(str(package)) != first and len(first) == 16
    assert qc.model_code_sha256() == qc._software()["model_code"]


def test_runs_reused_after_the_model_code_changed_are_named_in_the_report(qc, study, monkeypatch, capsys):
    """'done already' runs (and imported ones) are reused by their settings; edited model code
    is not in those, so a comparison would silently mix two versions of an architecture."""
    q = _main(qc, study, "--seeds", "1", "2")
    code = q["meta"]["model_code"]
    assert q["meta"]["model_code_runs"] is None and q["runs"]["01-good"]["1"]["trained_with"]["model_code"] == code
    capsys.readouterr()
    monkeypatch.setattr(qc, "model_code_sha256", lambda package_dir=None: "edited0000000000")
    shutil.rmtree(study.out / "runs" / "01-good" / "seed2")  # trained again, with the edited code
    q = _main(qc, study, "--seeds", "1", "2")
    err = capsys.readouterr().err
    # the stock transformer's runs never execute fairseq_ctx's model code: not flagged
    assert q["meta"]["model_code_runs"] == {code: ["01-good seed 1"], "edited0000000000": ["01-good seed 2"]}
    assert f"1 run(s) trained with other model code ({code}; this code: edited0000000000): 01-good seed 1" in err
    md = (study.out / "quality.md").read_text()
    assert "warning: runs trained with different model code" in md and f"{code}: 01-good seed 1" in md
    # a run from before the record: named as unchecked, not as equal
    record = study.out / "runs" / "01-good" / "seed1" / "result.json"
    rec = json.loads(record.read_text())
    del rec["trained_with"]["model_code"]
    record.write_text(json.dumps(rec))
    q = _main(qc, study, "--seeds", "1", "2")
    assert q["meta"]["model_code_unrecorded"] == ["01-good seed 1"] and q["meta"]["model_code_runs"] is None
    assert "1 run(s) of fairseq_ctx architectures trained before the model code was recorded" in (
        study.out / "quality.md").read_text()


def test_provenance_names_the_gpu_unless_the_settings_say_cpu(qc, study, monkeypatch):
    import torch

    # the real probe (a subprocess) agrees with torch here: None on a machine without one
    expected = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    assert qc._visible_gpu() == expected
    monkeypatch.setattr(qc, "_visible_gpu", lambda: "NVIDIA Test GPU")
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*")
    assert q["runs"]["00-transformer"]["1"]["trained_with"]["gpu"] == "NVIDIA Test GPU"
    (study.out.parent / "configs" / "01-good.args").write_text("--arch transformer_x --cpu\n")
    study.fakes.configs["01-good"] = ["--arch", "transformer_x", "--cpu"]
    q = _main(qc, study, "--seeds", "1", "--configs", "01-*")
    assert q["runs"]["01-good"]["1"]["trained_with"]["gpu"] is None  # fairseq-train --cpu


def _probe_answers(monkeypatch, qc, *answers):
    """subprocess.run stand-ins for the GPU probe, one per call: an exception to raise or
    (returncode, stdout, stderr)."""
    calls = []

    def fake_run(cmd, capture_output=None, text=None, timeout=None):
        answer = answers[len(calls)]
        calls.append(cmd)
        if isinstance(answer, BaseException):
            raise answer
        return types.SimpleNamespace(returncode=answer[0], stdout=answer[1], stderr=answer[2])

    monkeypatch.setattr(qc, "_GPU_PROBE", {})
    monkeypatch.setattr(qc.subprocess, "run", fake_run)
    return calls


@pytest.mark.parametrize("answer, named", [
    ("timeout", "unknown (the GPU probe timed out)"),
    ((1, "", "Traceback ...\nRuntimeError: CUDA driver initialization failed\n"),
     "unknown (the GPU probe failed: ['RuntimeError: CUDA driver initialization failed'])"),
    ((0, "torch warns here\n", ""), "unknown (the GPU probe failed: exit status 0, output 'torch warns here')"),
])
def test_a_failed_gpu_probe_is_named_asked_once_and_pins_nothing(qc, monkeypatch, capsys, answer, named):
    import subprocess

    calls = _probe_answers(monkeypatch, qc, subprocess.TimeoutExpired("python", 120) if answer == "timeout" else answer)
    assert qc._visible_gpu() == named
    assert qc.gpus_to_spread_over() is None and qc._visible_gpu() == named
    assert len(calls) == 1  # not waited for again at every run


@pytest.mark.parametrize("visible, expected", [(None, ["0", "1", "2"]), ("4,6,7", ["4", "6", "7"]),
                                               ("GPU-a1,GPU-b2,GPU-c3", ["GPU-a1", "GPU-b2", "GPU-c3"])])
def test_the_devices_runs_are_spread_over_are_those_visible(qc, monkeypatch, visible, expected):
    _probe_answers(monkeypatch, qc, (0, 'fairseq-ctx-gpus:["NVIDIA Test GPU", "NVIDIA Test GPU", "NVIDIA Test GPU"]\n', ""))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert qc.gpus_to_spread_over() == expected
    assert qc.gpus_to_spread_over(all_gpus_per_run=True) is None


def test_mig_instances_are_spread_over_as_listed(qc, monkeypatch):
    # a process sees only the first MIG instance listed: the probe counts one
    _probe_answers(monkeypatch, qc, (0, 'fairseq-ctx-gpus:["NVIDIA A100 MIG 1g.10gb"]\n', ""))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-aaa,MIG-bbb")
    assert qc.gpus_to_spread_over() == ["MIG-aaa", "MIG-bbb"]


def test_a_device_list_that_disagrees_with_the_probe_is_not_pinned_and_said(qc, monkeypatch):
    _probe_answers(monkeypatch, qc, (0, 'fairseq-ctx-gpus:["NVIDIA Test GPU", "NVIDIA Test GPU"]\n', ""))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,7")  # 7 does not exist: CUDA stops there
    said = []
    assert qc.gpus_to_spread_over(log=said.append) is None
    assert len(said) == 1 and "lists 3 devices but 2 are visible" in said[0]


def test_a_gpu_is_free_again_when_its_run_ends(qc):
    slots = qc.GpuSlots(["a", "b"])
    with slots.one([]) as first:
        with slots.one([]) as second:
            assert (first, second) == ("a", "b")
        with slots.one([]) as third:  # b was given back; a is still busy
            assert third == "b"
    assert slots.busy == {"a": 0, "b": 0}
    with slots.one(["--distributed-world-size", "2"]) as several, slots.one(["--cpu"]) as cpu:
        assert several is None and cpu is None  # one GPU could not hold them


def test_one_visible_gpu_or_none_is_not_pinned(qc, monkeypatch):
    _probe_answers(monkeypatch, qc, (0, 'UserWarning: a warning torch printed first\nfairseq-ctx-gpus:["NVIDIA Test GPU"]\nanother line after\n', ""))
    assert qc.gpus_to_spread_over() is None and qc._visible_gpu() == "NVIDIA Test GPU"
    _probe_answers(monkeypatch, qc, (0, "fairseq-ctx-gpus:[]\n", ""))
    assert qc.gpus_to_spread_over() is None and qc._visible_gpu() is None


def test_on_a_multi_gpu_node_each_run_trains_and_is_scored_on_one_gpu_of_its_own(qc, study, monkeypatch, capsys):
    import threading

    monkeypatch.setattr(qc, "_GPU_PROBE", {"result": ("NVIDIA Test GPU", 2)})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    fk = study.fakes
    fk.at_barrier = (threading.Barrier(2), [])
    # 25 updates end an epoch: each run also trains to 25 in a side directory (recovery)
    q = _main(qc, study, "--seeds", "1", "2", "--jobs", "2", "--valid-bleu", "--curve-updates", "25")
    err = capsys.readouterr().err
    assert "2 GPUs: each run sees one (CUDA_VISIBLE_DEVICES 4, 5)" in err and "idle" not in err
    arrivals = fk.at_barrier[1]
    # the trainings met in pairs: the two of a pair ran at the same time, on different GPUs
    assert len(arrivals) == 8 and all({arrivals[i], arrivals[i + 1]} == {"4", "5"} for i in range(0, 8, 2))
    assert sum(1 for w, *_ in fk.devices if w == "train") == 8
    for name in ("00-transformer", "01-good"):
        for seed in (1, 2):
            used = {d for _, n, s, d in fk.devices if (n, s) == (name, seed)}
            assert len(used) == 1, (name, seed, fk.devices)  # its training, test and valid scoring
            assert q["runs"][name][str(seed)]["trained_with"]["gpu"] == (
                f"NVIDIA Test GPU (x2 visible), this run on CUDA_VISIBLE_DEVICES={used.pop()} (one GPU per run)")
    assert {w for w, *_ in fk.devices} == {"train", "test", "valid"}


def test_on_a_node_of_mixed_gpus_each_run_names_the_model_it_was_pinned_to(qc, study, monkeypatch, capsys):
    import threading

    monkeypatch.setattr(qc, "_GPU_PROBE", {"result": ("NVIDIA A100-SXM4-80GB", 2,
                                                      ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"])})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    study.fakes.at_barrier = (threading.Barrier(2), [])  # the two trainings run at the same time
    q = _main(qc, study, "--seeds", "1", "--jobs", "2")
    pinned = {n: d for w, n, _, d in study.fakes.devices if w == "train"}
    model = {"4": "NVIDIA A100-SXM4-80GB", "5": "NVIDIA H100 80GB HBM3"}
    assert sorted(pinned.values()) == ["4", "5"]
    for name, device in pinned.items():
        assert q["runs"][name]["1"]["trained_with"]["gpu"] == (
            f"{model[device]}, this run on CUDA_VISIBLE_DEVICES={device} (one GPU per run)")
    assert "the GPUs are of 2 models (NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3)" in capsys.readouterr().err
    # MIG entries: the probe sees only the first one listed, so the model is not claimed per entry
    # not pinned (--all-gpus-per-run): every model it trains on
    assert qc._visible_gpu() == "NVIDIA A100-SXM4-80GB + NVIDIA H100 80GB HBM3 (x2 visible)"
    monkeypatch.setattr(qc, "_GPU_PROBE", {"result": ("NVIDIA A100 MIG 1g.10gb", 1, ["NVIDIA A100 MIG 1g.10gb"])})
    assert qc._pinned_gpu_name(["MIG-a", "MIG-b"], "MIG-b") is None
    # the probe names every visible GPU, in CUDA's order
    _probe_answers(monkeypatch, qc, (-11, 'fairseq-ctx-gpus:["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]\n', "Segmentation fault at exit\n"))
    assert qc._probe_gpu_names() == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
    assert qc._probe_gpus() == ("NVIDIA A100-SXM4-80GB", 2)


@pytest.mark.parametrize("how", ["--all-gpus-per-run", "--cpu in common", "--cpu in one config"])
def test_runs_are_not_pinned_when_asked_to_use_all_gpus_or_the_cpu(qc, study, monkeypatch, how):
    monkeypatch.setattr(qc, "_GPU_PROBE", {"result": ("NVIDIA Test GPU", 2)})
    extra = ["--all-gpus-per-run"] if how == "--all-gpus-per-run" else []
    if how == "--cpu in common":
        (study.out.parent / "configs" / "train.common").write_text("--lr 1e-3 --disable-validation --cpu\n")
    if how == "--cpu in one config":
        (study.out.parent / "configs" / "01-good.args").write_text("--arch transformer_x --cpu\n")
    _main(qc, study, "--seeds", "1", "--jobs", "2", *extra)
    pinned = {n: d for _, n, _, d in study.fakes.devices}
    assert pinned == ({"00-transformer": "0", "01-good": None} if how == "--cpu in one config"
                      else {"00-transformer": None, "01-good": None})


def test_fewer_jobs_than_gpus_is_said(qc, study, monkeypatch, capsys):
    monkeypatch.setattr(qc, "_GPU_PROBE", {"result": ("NVIDIA Test GPU", 4)})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    _main(qc, study, "--seeds", "1", "--configs", "00-*")
    assert "--jobs 1 leaves 3 of the 4 GPUs idle" in capsys.readouterr().err


def test_runs_trained_on_all_gpus_are_not_paired_or_reused_with_one_device_runs(qc, study, monkeypatch):
    monkeypatch.setattr(qc, "_GPU_PROBE", {"result": ("NVIDIA Test GPU", 2)})
    q1 = _main(qc, study, "--seeds", "1")  # one GPU per run
    n_train = len(study.fakes.train_calls)
    q2 = _main(qc, study, "--seeds", "1", "--all-gpus-per-run")  # twice the batch: trained again
    assert len(study.fakes.train_calls) == n_train + 2
    assert "gpus_per_run=2" in q2["runs"]["00-transformer"]["1"]["settings"]
    assert "gpus_per_run" not in q1["runs"]["00-transformer"]["1"]["settings"]
    _main(qc, study, "--seeds", "1")
    assert len(study.fakes.train_calls) == n_train + 4  # and back: the one-GPU runs of settings of their own


def test_the_gpu_given_to_a_run_reaches_fairseq_train_and_generate(qc, tmp_path, monkeypatch):
    import fairseq_ctx.evaluation.generate as generate_module

    envs = []

    cmds = []

    def fake_run(cmd, env=None, **kwargs):  # both modules call the one subprocess.run
        envs.append((cmd[cmd.index("-m") + 1], env))
        cmds.append(cmd)
        return types.SimpleNamespace(returncode=0, stdout="H-0\t-0.1\thello world\n", stderr="")

    assert generate_module.subprocess is qc.subprocess
    monkeypatch.setattr(qc.subprocess, "run", fake_run)
    pin = {"CUDA_VISIBLE_DEVICES": "5"}
    qc.train("bin", [], ["--arch", "transformer"], 10, 1, str(tmp_path / "ck"), str(tmp_path / "train.log"),
             extra_env=pin, langs=("en", "zh"))
    train_cmd = " ".join(cmds[0])
    assert "--source-lang en --target-lang zh" in train_cmd  # not left to the first file name fairseq finds
    (tmp_path / "test.en").write_text("hello world\n")
    (tmp_path / "ck.pt").touch()
    qc.evaluate(str(tmp_path), str(tmp_path / "ck.pt"), str(tmp_path / "test.en"), 5, str(tmp_path / "ev"),
                extra_env=pin)
    assert [(what, env["CUDA_VISIBLE_DEVICES"]) for what, env in envs] == [("fairseq_cli.train", "5"),
                                                                            ("fairseq_cli.generate", "5")]
    assert all("PATH" in env for _, env in envs)  # on top of this process's environment


@pytest.mark.parametrize("words, depends", [
    (["--lr-scheduler", "inverse_sqrt"], False),
    ([], False),
    (["--lr-scheduler", "cosine"], True),
    (["--lr-scheduler=tri_stage"], True),
    (["--lr-scheduler", "reduce_lr_on_plateau"], True),
    (["--lr-scheduler", "cosine", "--lr-scheduler", "inverse_sqrt"], False),  # the last one counts
    (["--lr-scheduler", "polynomial_decay"], True),  # its length defaults to --max-update
    (["--lr-scheduler", "polynomial_decay", "--total-num-update", "5000"], False),
    (["--lr-scheduler=polynomial_decay", "--total-num-update=5000"], False),
])
def test_which_schedules_depend_on_max_update(qc, words, depends):
    assert qc.lr_depends_on_max_update(["--lr", "1e-3", *words]) is depends


def test_a_checkpoint_cut_off_while_written_is_not_resumed(qc, study, capsys, tmp_path):
    """A run killed while fairseq copied checkpoint_last.pt (in place, not atomically)
    leaves a truncated zip: resuming from it would fail on every rerun, so the run is
    trained again from the start (Fakes.train asserts it finds no checkpoint)."""
    import torch

    _kill_after_training(qc, study, 1, 25)
    last = study.out / "runs" / "00-transformer" / "seed1" / "checkpoints" / "checkpoint_last.pt"
    whole = tmp_path / "whole.pt"
    torch.save({"model": torch.zeros(1000)}, whole)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(whole.read_bytes()[:-200])  # the zip's directory is at the end
    assert written_to_the_end(str(whole)) and not written_to_the_end(str(cut))
    last.write_bytes(cut.read_bytes())
    study.fakes.allow_resume = False
    n_train = len(study.fakes.train_calls)
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*")
    assert len(study.fakes.train_calls) == n_train + 1 and study.fakes.train_calls[-1]["restore"] is None
    assert "resumed_at_update" not in q["runs"]["00-transformer"]["1"]
    captured = capsys.readouterr()
    assert "was cut off while it was written" in captured.out + captured.err


@pytest.mark.parametrize("damage", ["empty", "3 bytes", "100 bytes", "half", "last byte missing",
                                    "zeros", "zeroed middle", "no data.pkl"])
def test_damaged_checkpoints_are_told_from_whole_ones(qc, tmp_path, damage):
    import io
    import zipfile

    import torch

    whole = tmp_path / "whole.pt"
    torch.save({"model": torch.arange(20000.0)}, whole)
    data = whole.read_bytes()
    assert written_to_the_end(str(whole))
    if damage == "no data.pkl":  # a whole zip, but not one torch.save wrote
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as z:
            z.writestr("archive/other", b"x")
        damaged = buffer.getvalue()
    else:
        middle = len(data) // 2
        damaged = {"empty": b"", "3 bytes": data[:3], "100 bytes": data[:100], "half": data[:middle],
                   "last byte missing": data[:-1], "zeros": bytes(len(data)),
                   "zeroed middle": data[:middle] + bytes(4096) + data[middle + 4096:]}[damage]
    path = tmp_path / "damaged.pt"
    path.write_bytes(damaged)
    assert not written_to_the_end(str(path))


def test_a_cut_off_last_checkpoint_resumes_from_the_newest_whole_one(qc, study, tmp_path, capsys):
    """With curve points fairseq writes checkpoint_E_U.pt atomically and copies it to
    checkpoint_last.pt: when the copy is cut off, the run resumes from the newest whole
    checkpoint_E_U.pt instead of training again from the start."""
    import torch

    fk = study.fakes
    fk.fail_eval_at, fk.allow_resume = UPDATES, True
    curve = ("--curve-updates", "10,20,40")
    with pytest.raises(SystemExit, match="killed while scoring"):
        _main(qc, study, "--seeds", "1", "--configs", "00-*", *curve)
    ck = study.out / "runs" / "00-transformer" / "seed1" / "checkpoints"
    (ck / "trained.json").unlink()
    by_update = {int(re.search(r"_(\d+)\.pt$", p.name).group(1)): p for p in ck.glob("checkpoint_*_*.pt")}
    for u in [u for u in by_update if u > 40]:  # killed after update 40
        by_update.pop(u).unlink()
    assert sorted(by_update) == [10, 20, 30, 40]  # (50 ended an epoch: no checkpoint_E_50.pt)
    for u in (10, 20, 30):
        torch.save({"optimizer_history": [{"num_updates": u}]}, by_update[u])  # as fairseq stores it
    by_update[40].write_bytes(b"PK\x03\x04" + bytes(50))  # damaged too: the newest whole one is 30
    (ck / "checkpoint_last.pt").write_bytes(b"PK\x03")  # cut off during the copy
    fk.fail_eval_at = None
    n_train = len(fk.train_calls)
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*", *curve)
    assert len(fk.train_calls) == n_train + 1
    assert q["runs"]["00-transformer"]["1"]["resumed_at_update"] == 30
    captured = capsys.readouterr()
    assert "resuming from checkpoint_2_30.pt" in captured.out + captured.err


def test_stale_checkpoints_of_other_settings_are_not_resumed(qc, study):
    # a training killed under other settings left checkpoint_last.pt: fairseq would
    # resume from it; the driver starts afresh (Fakes.train asserts there is none)
    ck = study.out / "runs" / "00-transformer" / "seed1" / "checkpoints"
    ck.mkdir(parents=True)
    (ck / "checkpoint_last.pt").write_text("7")
    (ck / "started.json").write_text(json.dumps({"settings": "other", "curve_updates": []}))
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*")
    assert len(study.fakes.train_calls) == 1 and q["runs"]["00-transformer"]["1"]["bleu"] >= 0
    assert not (study.out / "curves.png").exists()  # no curve: no plot, no section
    assert "## Learning curves" not in (study.out / "quality.md").read_text()


def test_an_epoch_end_point_is_not_recovered_under_a_schedule_that_depends_on_max_update(qc, study):
    """Training to U with --max-update U from an earlier checkpoint follows another
    learning-rate curve under cosine / tri_stage: refused with one message, not joined."""
    (study.out.parent / "configs" / "train.common").write_text(
        "--lr 1e-3 --lr-scheduler cosine --disable-validation --no-epoch-checkpoints\n")
    with pytest.raises(SystemExit, match="--lr-scheduler cosine depends on --max-update"):
        _main(qc, study, "--curve-updates", f"10,{EPOCH}", "--seeds", "1", "--configs", "00-*")
    assert not any(call["restore"] for call in study.fakes.train_calls)


# ---------------------------------------------------------------------------------------
# real fairseq, tiny
# ---------------------------------------------------------------------------------------

def _tiny_config_dir(path, schedule_and_batch):
    """A config dir with one 1+1-layer, d = 32 transformer and the given optimisation options."""
    path.mkdir()
    (path / "00-transformer.args").write_text(
        "--arch transformer --encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 "
        "--decoder-embed-dim 32 --encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 "
        "--encoder-attention-heads 2 --decoder-attention-heads 2\n")
    (path / "train.common").write_text(
        f"--optimizer adam --lr 2e-3 {schedule_and_batch} --criterion label_smoothed_cross_entropy "
        "--label-smoothing 0.1 --required-batch-size-multiple 1 --no-epoch-checkpoints --disable-validation "
        "--num-workers 0 --log-interval 1 --no-progress-bar\n")
    return path


def test_real_tiny_curve_with_a_point_at_an_epoch_end(qc, tiny_corpus, tmp_path):
    """fairseq-train's own checkpoint names and validation lines, and a curve point that
    falls on the end of an epoch (no checkpoint_E_U.pt there): trained to it again from
    the previous checkpoint, and scored like the others (all test sentences)."""
    cfg = _tiny_config_dir(tmp_path / "configs", "--max-tokens 400")
    out = tmp_path / "out"
    argv = ["--data-dir", str(tiny_corpus), "--config-dir", str(cfg), "--seeds", "1", "--updates", "30",
            "--out-dir", str(out), "--threads", "1", "--", "--max-len-b", "5"]
    run_dir = out / "runs" / "00-transformer" / "seed1"
    q = qc.main(argv[:-3] + ["--curve-updates", "10"] + argv[-3:])
    log = (run_dir / "train.log").read_text()
    epoch_ends = [int(m.group(1)) for m in re.finditer(
        r"\| train \| epoch \d+ \|.*\| num_updates (\d+)\b", log)]
    epoch_len = epoch_ends[0] if epoch_ends and epoch_ends[0] < 30 else None
    if epoch_len is None or epoch_len in (10, 20):
        pytest.skip(f"the tiny corpus's epoch ({epoch_ends}) is not a point this test can aim at")
    valid = q["curves"]["00-transformer"]["valid_loss"]
    assert {10, 20, 30, epoch_len} <= set(valid["updates"])  # every 10 updates, the epoch end, the last
    assert q["curves"]["00-transformer"]["bleu"]["updates"] == [10, 30]
    # the epoch's end as a new point (with one before it): retrained (checkpoints were
    # deleted) saving every gcd(before, end) updates; fairseq writes no checkpoint_1_E.pt
    # at the epoch's end, so it is trained again to E from the previous save
    before = epoch_len - 3 if epoch_len - 3 != 10 else epoch_len - 1
    q = qc.main(argv[:-3] + ["--curve-updates", f"10,{before},{epoch_len}"] + argv[-3:])
    assert (run_dir / f"train.to{epoch_len}.log").exists()
    assert "Loaded checkpoint" in (run_dir / f"train.to{epoch_len}.log").read_text()
    point = json.loads((run_dir / "curve" / f"upd{epoch_len}" / "result.json").read_text())
    assert point["updates"] == epoch_len and point["sentences"] == 21 and len(point["hyps"]) == 21
    assert point["checkpoint"] == os.path.join(f"to{epoch_len}", "checkpoint_last.pt")
    assert q["curves"]["00-transformer"]["bleu"]["updates"] == [10, before, epoch_len, 30]
    assert not [f for _, _, fs in os.walk(out) for f in fs if f.endswith(".pt")]
    assert (out / "curves.png").stat().st_size > 0


def test_a_run_another_comparison_holds_is_refused_before_any_training(qc, study, capsys):
    """Two comparisons on one out-dir (launched twice, or two seed sets at once) would train one
    checkpoint directory together: the second finds the run's lock taken and starts nothing.
    Finished runs need no lock, so a report of them can still be written meanwhile."""
    import fcntl

    fk = study.fakes
    _main(qc, study, "--seeds", "1")
    trained = len(fk.train_calls)
    seed2 = study.out / "runs" / "01-good" / "seed2"
    seed2.mkdir(parents=True)
    with open(seed2 / ".lock", "w") as other:  # another open file: flock holds it against this process too
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other.write("fairseq-ctx-quality-compare pid 4242 on node7\n")
        other.flush()
        with pytest.raises(SystemExit) as e:
            _main(qc, study, "--seeds", "1", "2")
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "seed2 is in use by fairseq-ctx-quality-compare pid 4242 on node7" in err and "nothing was started" in err
        assert len(fk.train_calls) == trained  # not even 00-transformer seed 2, whose lock was free
        report = _main(qc, study, "--seeds", "1", "--json", str(study.out / "seed1.json"))
        assert set(report["runs"]["01-good"]) == {"1"} and len(fk.train_calls) == trained
    _main(qc, study, "--seeds", "1", "2")  # released: it trains
    assert {(c["arch"], c["seed"]) for c in fk.train_calls[trained:]} == {("transformer", 2), ("transformer_x", 2)}


def test_a_report_another_comparison_writes_is_refused_before_any_training(qc, study, capsys):
    """Two comparisons on one out-dir with the default report paths: the one that finishes last
    would replace the other's report (a whole file, of the other comparison). The second finds
    the reports' locks taken (here quality.json's and quality.md's, held by other open files) and
    starts nothing, naming both; with its own --json / --markdown it runs (no curve is asked for,
    so the default plot path, which the other one holds too, is not in its way). The locks lie
    in OUT_DIR/.report-locks, none beside the reports."""
    import contextlib
    import fcntl
    import hashlib

    fk = study.fakes
    locks = study.out / ".report-locks"
    locks.mkdir(parents=True)
    with contextlib.ExitStack() as others:
        for name in ("quality.json", "quality.md", "curves.png"):
            key = hashlib.sha256(str(study.out / name).encode()).hexdigest()[:16]
            other = others.enter_context(open(locks / f"{key}.lock", "w"))
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            other.write(f"pid 4242 on node7 ({name})\n")
            other.flush()
        with pytest.raises(SystemExit) as e:
            _main(qc, study, "--seeds", "1")
        assert e.value.code == 2 and fk.train_calls == []
        err = capsys.readouterr().err
        assert (f"another comparison on {study.out} is writing {study.out / 'quality.json'} (by pid 4242 on node7 "
                f"(quality.json)); {study.out / 'quality.md'} (by pid 4242 on node7 (quality.md)): pass other") in err
        assert "curves.png" not in err and "nothing was started" in err
        own = [f"--{flag}={study.out / name}" for flag, name in (("json", "mine.json"), ("markdown", "mine.md"))]
        report = _main(qc, study, "--seeds", "1", *own)
        assert set(report["runs"]["01-good"]) == {"1"} and (study.out / "mine.md").exists()
        assert not (study.out / "quality.md").exists()
    _main(qc, study, "--seeds", "1")  # released: the default report is written
    assert (study.out / "quality.md").exists()
    assert not [f for f in os.listdir(study.out) if f.endswith(".lock")]


def test_every_run_is_locked_while_the_comparison_trains_and_freed_after(qc, study):
    """Each run's lock is held from before the first training to the end (also after a failed
    one): a second comparison cannot take a run this one is about to train or is training."""
    import fcntl

    def locked(run_dir):
        with open(os.path.join(run_dir, ".lock"), "a") as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False

    runs = [str(study.out / "runs" / n / f"seed{s}") for n in ("00-transformer", "01-good") for s in (1, 2)]
    seen = []

    def train_probing_the_locks(data_bin, common, arch_args, updates, seed, save_dir, *args, **kwargs):
        seen.append([locked(d) for d in runs])
        if seed == 2:
            raise RuntimeError("training failed")
        return study.fakes.train(data_bin, common, arch_args, updates, seed, save_dir, *args, **kwargs)

    with pytest.raises(SystemExit, match="training failed"):
        qc.main(study.argv + ["--seeds", "1", "2"], train_fn=train_probing_the_locks, eval_fn=study.fakes.evaluate)
    assert seen and all(all(flags) for flags in seen)  # every run, from the first training on
    assert not any(locked(d) for d in runs)


def test_a_training_that_finished_after_its_driver_was_gone_is_not_trained_again(qc, study, monkeypatch):
    """Driver killed, its fairseq-train went on to --max-update (checkpoint_last.pt there, no
    trained.json): fairseq-train started again would take one more update and overwrite it, so
    the run is scored as it is, recorded as trained by the attempt that started it."""
    _kill_after_training(qc, study, 1, UPDATES)
    monkeypatch.setattr(qc, "stored_updates", _fake_checkpoint_updates)  # at --updates exactly: not "more"
    first = json.loads((study.out / "runs" / "00-transformer" / "seed1" / "checkpoints" / "started.json")
                       .read_text())["attempts"]

    def finished_fake(save_dir, max_update):  # the fakes' checkpoint_last.pt holds its update count as text
        updates = int((pathlib.Path(save_dir) / "checkpoint_last.pt").read_text())
        return updates if updates >= max_update else None

    monkeypatch.setattr(qc, "finished_at", finished_fake)
    log = study.out / "runs" / "00-transformer" / "seed1" / "train.log"
    with open(log, "a") as f:  # what fairseq-train logged as it ended, after the driver was gone
        f.write("2026-11-26 06:00:00 | INFO | fairseq_cli.train | done training in 321.5 seconds\n")
    trained = len(study.fakes.train_calls)
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*")
    assert len(study.fakes.train_calls) == trained  # not started again
    run = q["runs"]["00-transformer"]["1"]
    assert run["train_seconds"] == 321.5 and "resumed_at_update" not in run  # it had started fresh
    assert run["trained_with"] == first[-1] and "earlier_attempts" not in run



def _extend(qc, study, monkeypatch, *extra):
    """A first comparison at 40 updates with its checkpoints kept, then the same at UPDATES."""
    monkeypatch.setattr(qc, "stored_updates", _fake_checkpoint_updates)  # the fakes' checkpoints hold text
    first = _main(qc, study, "--seeds", "1", "--configs", "00-*", "--updates", "40", "--curve-updates", "20",
                  "--valid-bleu", *extra)
    study.fakes.allow_resume = True
    return first


def test_a_kept_shorter_training_is_continued_and_its_scores_become_curve_points(qc, study, monkeypatch, capsys):
    fk = study.fakes
    first = _extend(qc, study, monkeypatch, "--keep-checkpoints")
    n_train, n_test, n_valid = len(fk.train_calls), len(fk.eval_calls), len(fk.valid_calls)
    capsys.readouterr()
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*", "--curve-updates", "20,40", "--valid-bleu")
    assert "1 run(s) continue their kept training of fewer updates to 60" in capsys.readouterr().err
    # one training, continued from the kept checkpoint of update 40 (the fake asserts resumption is allowed)
    assert len(fk.train_calls) == n_train + 1 and fk.train_calls[-1]["updates"] == UPDATES
    log = (study.out / "runs" / "00-transformer" / "seed1" / "train.log").read_text()
    assert re.findall(r"@ (\d+) updates", log) == ["40"]
    # only the new final checkpoint is translated: 20 and 40 were scored in the first comparison
    assert fk.eval_calls[n_test:] == [("00-transformer", 1, UPDATES)]
    assert fk.valid_calls[n_valid:] == [("00-transformer", 1, UPDATES)]
    run, before = q["runs"]["00-transformer"]["1"], first["runs"]["00-transformer"]["1"]
    assert run["extended_from_updates"] == 40 and run["resumed_at_update"] == 40
    assert run["curve"][40]["bleu"] == before["bleu"] and run["curve"][20]["bleu"] == before["curve"][20]["bleu"]
    assert run["valid_bleu"][40]["bleu"] == before["valid_bleu"][40]["bleu"]
    assert q["curves"]["00-transformer"]["bleu"]["updates"] == [20, 40, UPDATES]
    assert len(run["earlier_attempts"]) == 1 and run["earlier_attempts"][0] == before["trained_with"]
    assert not (study.out / "runs" / "00-transformer" / "seed1" / "checkpoints").exists()  # not kept this time


def test_a_continuation_cut_off_leaves_no_record_that_passes_its_checkpoint_off_as_the_shorter_run(
        qc, study, monkeypatch):
    """The continuation of a kept 40-update training is killed at update 50 (checkpoint_last.pt
    then holds 50 updates), resumed and killed again at 55. The continuation asked for again
    resumes from 55 and is still recorded as continued from 40; a comparison at 40 updates
    after such a cut must train again, not score the longer checkpoint as 40."""
    fk = study.fakes
    _extend(qc, study, monkeypatch, "--keep-checkpoints")
    real_train = fk.train

    def killed_at(u):
        def train(data_bin, common, arch_args, updates, seed, save_dir, log_path, *args, **kwargs):
            real_train(data_bin, common, arch_args, u, seed, save_dir, log_path, *args, **kwargs)
            raise RuntimeError("training failed (killed)")
        return train

    for u in (50, 55):
        monkeypatch.setattr(fk, "train", killed_at(u))
        with pytest.raises(SystemExit, match="killed"):
            qc.main(study.argv + ["--seeds", "1", "--configs", "00-*", "--curve-updates", "20,40",
                                  "--keep-checkpoints"], train_fn=fk.train, eval_fn=fk.evaluate)
    monkeypatch.setattr(fk, "train", real_train)
    n_train, n_test = len(fk.train_calls), len(fk.eval_calls)
    again = _main(qc, study, "--seeds", "1", "--configs", "00-*", "--curve-updates", "20,40")  # resumed from 55
    assert len(fk.train_calls) == n_train + 1 and fk.eval_calls[n_test:] == [("00-transformer", 1, UPDATES)]
    run = again["runs"]["00-transformer"]["1"]
    assert run["resumed_at_update"] == 55 and run["extended_from_updates"] == 40 and len(run["earlier_attempts"]) == 3
    # the same cut-off continuation, then a comparison at 40 updates: trained again from the start
    _extend(qc, study, monkeypatch, "--keep-checkpoints")
    monkeypatch.setattr(fk, "train", killed_at(50))
    with pytest.raises(SystemExit, match="killed"):
        qc.main(study.argv + ["--seeds", "1", "--configs", "00-*", "--curve-updates", "20,40", "--keep-checkpoints"],
                train_fn=fk.train, eval_fn=fk.evaluate)
    monkeypatch.setattr(fk, "train", real_train)
    fk.allow_resume = False  # the fake fails if fairseq would resume from the 50-update checkpoint
    n_train = len(fk.train_calls)
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*", "--updates", "40", "--curve-updates", "20")
    assert len(fk.train_calls) == n_train + 1 and fk.train_calls[-1]["updates"] == 40
    assert fk.eval_calls[-2:] == [("00-transformer", 1, 40), ("00-transformer", 1, 20)]
    assert "extended_from_updates" not in q["runs"]["00-transformer"]["1"]


@pytest.mark.parametrize("case, common, message", [
    ("not kept", "", "its checkpoints were not kept, or are not those of a finished training of that length"),
    ("cosine", "--lr-scheduler cosine", "would not be the run trained to 60 from the start under --lr-scheduler cosine"),
    ("patience", "--patience 2", "under --patience 2"),
    ("fp16", "--fp16", "under --fp16"),
    ("reset", "--reset-dataloader", "under --reset-dataloader"),
    ("restore", "--restore-file init.pt", "under --restore-file"),
    ("restore=", "--restore-file=init.pt", "under --restore-file"),
    ("no optimizer state", "--no-save-optimizer-state", "under --no-save-optimizer-state"),
    ("ordered-indices seed", "--update-ordered-indices-seed", "under --update-ordered-indices-seed"),
    ("overrides=", "--optimizer-overrides={'lr':[1e-3]}", "under --optimizer-overrides"),
])
def test_a_shorter_run_that_cannot_be_continued_exactly_is_trained_from_the_start_and_it_is_said(
        qc, study, monkeypatch, capsys, case, common, message):
    """fairseq restores optimizer, schedule, data position and per-update seeds, but not the
    early-stopping count or the fp16 / amp loss scalers' counters, and --reset-* / a
    --restore-file act at every start: under those a continuation is another run."""
    if common:
        path = study.data.parent / "configs" / "train.common"
        path.write_text(path.read_text().strip() + f" {common}\n")
    _extend(qc, study, monkeypatch, *(["--keep-checkpoints"] if case != "not kept" else []))
    study.fakes.allow_resume = False  # the fake fails if fairseq would resume from a kept checkpoint
    capsys.readouterr()
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*", "--curve-updates", "20,40")
    err = capsys.readouterr().err
    assert ("00-transformer seed 1: its training of 40 updates is not continued; trained again from the start to "
            f"{UPDATES}: ") in err and message in err, err
    assert study.fakes.train_calls[-1]["updates"] == UPDATES and "continue their kept training" not in err
    assert "extended_from_updates" not in q["runs"]["00-transformer"]["1"]


def test_a_kept_checkpoint_that_is_not_of_the_finished_training_is_not_continued(qc, study, monkeypatch, capsys):
    """trained.json says 40 updates, checkpoint_last.pt holds 30 (put back by hand, say): not
    a continuation of the scored run; trained again from the start."""
    _extend(qc, study, monkeypatch, "--keep-checkpoints")
    (study.out / "runs" / "00-transformer" / "seed1" / "checkpoints" / "checkpoint_last.pt").write_text("30")
    study.fakes.allow_resume = False
    _main(qc, study, "--seeds", "1", "--configs", "00-*", "--curve-updates", "20,40")
    assert study.fakes.train_calls[-1]["updates"] == UPDATES and "is not continued" in capsys.readouterr().err


def test_the_shorter_runs_final_score_stays_as_a_point_when_the_longer_curve_does_not_ask_for_it(
        qc, study, monkeypatch):
    fk = study.fakes
    first = _extend(qc, study, monkeypatch, "--keep-checkpoints")
    n_test = len(fk.eval_calls)
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*", "--valid-bleu")  # no curve points asked for
    run = q["runs"]["00-transformer"]["1"]
    assert run["extended_from_updates"] == 40 and fk.eval_calls[n_test:] == [("00-transformer", 1, UPDATES)]
    assert run["curve"][40]["bleu"] == first["runs"]["00-transformer"]["1"]["bleu"]  # not thrown away
    assert run["curve"][20]["bleu"] == first["runs"]["00-transformer"]["1"]["curve"][20]["bleu"]
    point = json.loads((study.out / "runs" / "00-transformer" / "seed1" / "curve" / "upd40" / "result.json").read_text())
    assert point["hyps"] and point["checkpoint"] == "checkpoint_last.pt (before it was continued)"


def test_a_point_at_the_shorter_count_asked_on_a_new_subset_is_scored_from_a_copy_of_its_checkpoint(
        qc, study, monkeypatch):
    """The first comparison saved no checkpoint at 40 but its last one and scored no valid BLEU;
    the longer one asks for 40 with --valid-bleu: checkpoint_last.pt at 40 is copied before it
    is continued, and valid is scored from that copy, with no training to 40 again."""
    fk = study.fakes
    monkeypatch.setattr(qc, "stored_updates", _fake_checkpoint_updates)
    _main(qc, study, "--seeds", "1", "--configs", "00-*", "--updates", "40", "--keep-checkpoints")
    fk.allow_resume = True
    n_train, n_valid = len(fk.train_calls), len(fk.valid_calls)
    _main(qc, study, "--seeds", "1", "--configs", "00-*", "--curve-updates", "40", "--valid-bleu",
          "--keep-checkpoints")
    assert len(fk.train_calls) == n_train + 1  # the continuation only
    assert sorted(fk.valid_calls[n_valid:]) == [("00-transformer", 1, 40), ("00-transformer", 1, UPDATES)]
    ck = study.out / "runs" / "00-transformer" / "seed1" / "checkpoints"
    copies = [f for f in os.listdir(ck) if re.fullmatch(r"checkpoint_\d+_40\.pt", f)]
    assert len(copies) == 1 and (ck / copies[0]).read_text() == "40" and not list(ck.glob("*.partial"))


def test_real_tiny_continuation_is_the_run_trained_to_the_end_from_the_start(qc, tiny_corpus, tmp_path):
    """fairseq itself: a kept 8-update training continued to 16 updates ends with the same
    weights, bit for bit, and the same translations as a 16-update training from the start
    (inverse_sqrt: a schedule that does not depend on --max-update; one machine, one thread)."""
    import torch

    cfg = _tiny_config_dir(tmp_path / "configs", "--lr-scheduler inverse_sqrt --warmup-updates 4 --dropout 0.1 "
                           "--max-tokens 300")

    def compare(out, *args):
        return qc.main(["--data-dir", str(tiny_corpus), "--config-dir", str(cfg), "--seeds", "1", "--out-dir",
                        str(out), "--threads", "1", "--keep-checkpoints", *args, "--", "--max-len-b", "5"])

    compare(tmp_path / "continued", "--updates", "8")
    continued = compare(tmp_path / "continued", "--updates", "16", "--curve-updates", "8")
    whole = compare(tmp_path / "whole", "--updates", "16", "--curve-updates", "8")
    a, b = continued["runs"]["00-transformer"]["1"], whole["runs"]["00-transformer"]["1"]
    assert a["extended_from_updates"] == 8 and "extended_from_updates" not in b
    # fairseq did continue the kept training (a training from the start would match too)
    assert a["resumed_at_update"] == 8 and "resumed_at_update" not in b
    log = (tmp_path / "continued" / "runs" / "00-transformer" / "seed1" / "train.log").read_text()
    assert re.findall(r"Loaded checkpoint .* @ (\d+) updates", log) == ["8"]
    # read from fairseq's own log: the continuation ran under the exact-resume task
    assert [(r["update"], r["task"], r["batches_as_uninterrupted"]) for r in a["resumptions"]] == [
        (8, "ExactResumeTranslationTask", True)] and b["resumptions"] == []
    assert a["bleu"] == b["bleu"] and a["curve"][8]["bleu"] == b["curve"][8]["bleu"]
    hyps = [json.loads((out / "runs" / "00-transformer" / "seed1" / "result.json").read_text())["hyps"]
            for out in (tmp_path / "continued", tmp_path / "whole")]
    assert hyps[0] == hyps[1] and len(hyps[0]) == TINY_TEST_SENTENCES
    weights = [torch.load(out / "runs" / "00-transformer" / "seed1" / "checkpoints" / "checkpoint_last.pt",
                          map_location="cpu", weights_only=False)["model"] for out in (tmp_path / "continued",
                                                                                        tmp_path / "whole")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    # and the weights at 8 updates (the whole run's curve checkpoint) are not those at 16
    at_8 = qc._checkpoints_by_update(str(tmp_path / "whole" / "runs" / "00-transformer" / "seed1" / "checkpoints"))[8]
    at_8 = torch.load(at_8, map_location="cpu", weights_only=False)
    assert at_8["optimizer_history"][-1]["num_updates"] == 8
    assert not all(torch.equal(at_8["model"][k], weights[1][k]) for k in weights[1])


def test_a_checkpoint_of_more_updates_than_the_records_say_is_never_scored_as_the_shorter_run(
        qc, study, monkeypatch, capsys):
    """The records of a finished 40-update run (trained.json, started.json) beside a
    checkpoint_last.pt of 50 updates (a continuation cut off before any record was rewritten,
    by an older version or by hand): asked for 40 updates again with another beam (kept
    checkpoints are scored again, not retrained), the run is trained again rather than scored
    from the longer checkpoint."""
    fk = study.fakes
    _extend(qc, study, monkeypatch, "--keep-checkpoints")
    (study.out / "runs" / "00-transformer" / "seed1" / "checkpoints" / "checkpoint_last.pt").write_text("50")
    fk.allow_resume = False
    n_train = len(fk.train_calls)
    _main(qc, study, "--seeds", "1", "--configs", "00-*", "--updates", "40", "--curve-updates", "20", "--valid-bleu",
          "--keep-checkpoints", "--beam", "4")
    assert len(fk.train_calls) == n_train + 1 and fk.train_calls[-1]["updates"] == 40
    assert "its checkpoint_last.pt is of 50 updates, more than 40; trained again from the start" in capsys.readouterr().err
    assert not [c for c in fk.valid_calls if c[2] == 50] and not [c for c in fk.eval_calls if c[2] == 50]


def test_a_finished_training_that_stopped_early_is_scored_again_as_it_is_not_trained_further(
        qc, study, monkeypatch):
    """--patience (or --max-epoch, --stop-time-hours) ended a training at 50 of 60 updates,
    its checkpoints kept: another beam scores that checkpoint again, and fairseq is not started
    on it (it would not know it had stopped, and train on)."""
    fk = study.fakes
    monkeypatch.setattr(qc, "stored_updates", _fake_checkpoint_updates)
    real_train = fk.train

    def stopped_at_50(data_bin, common, arch_args, updates, seed, save_dir, log_path, *args, **kwargs):
        real_train(data_bin, common, arch_args, 50, seed, save_dir, log_path, *args, **kwargs)
        return 0.1

    monkeypatch.setattr(fk, "train", stopped_at_50)
    qc.main(study.argv + ["--seeds", "1", "--configs", "00-*", "--keep-checkpoints"], train_fn=fk.train,
            eval_fn=fk.evaluate)
    n_train = len(fk.train_calls)
    q = qc.main(study.argv + ["--seeds", "1", "--configs", "00-*", "--keep-checkpoints", "--beam", "4"],
                train_fn=fk.train, eval_fn=fk.evaluate)
    assert len(fk.train_calls) == n_train and fk.eval_calls[-1] == ("00-transformer", 1, 50)
    assert "beam=4" in q["runs"]["00-transformer"]["1"]["settings"]


def test_a_continuation_that_fairseq_did_not_resume_fails_and_is_trained_from_the_start_next_time(
        qc, study, monkeypatch):
    """fairseq started the 'continuation' from update 0 (an option that drops the optimizer
    state, say): not the run it continues; the comparison stops with one message and a rerun
    trains that run from the start."""
    fk = study.fakes
    _extend(qc, study, monkeypatch, "--keep-checkpoints")
    real_train = fk.train

    def started_over(data_bin, common, arch_args, updates, seed, save_dir, log_path, *args, **kwargs):
        os.remove(os.path.join(save_dir, "checkpoint_last.pt"))  # as if fairseq ignored it
        return real_train(data_bin, common, arch_args, updates, seed, save_dir, log_path, *args, **kwargs)

    monkeypatch.setattr(fk, "train", started_over)
    with pytest.raises(SystemExit, match="did not resume at 40 updates"):
        qc.main(study.argv + ["--seeds", "1", "--configs", "00-*", "--keep-checkpoints"], train_fn=fk.train,
                eval_fn=fk.evaluate)
    monkeypatch.setattr(fk, "train", real_train)
    fk.allow_resume = False  # the next run must not resume from what that attempt left
    q = _main(qc, study, "--seeds", "1", "--configs", "00-*")
    assert fk.train_calls[-1]["updates"] == UPDATES and "extended_from_updates" not in q["runs"]["00-transformer"]["1"]


# ---------------------------------------------------------------------------------------
# --train-loss: the train-set loss beside the valid loss
# ---------------------------------------------------------------------------------------

def _fake_train_set_loss(calls, fail=()):
    """A train_set_loss stand-in: the losses of a run's final checkpoint from its config and
    seed, in fairseq_ctx.analysis.subset_loss's format; ``fail``: (config, seed) pairs whose
    measurement fails."""
    def measure(data_bin, ckpt, log_path, threads=0, extra_env=None, langs=None):
        parts = ckpt.split(os.sep)
        i = parts.index("runs")
        name, seed = parts[i + 1], int(parts[i + 2][len("seed"):])
        assert os.path.basename(ckpt) == "checkpoint_last.pt" and os.path.exists(ckpt)
        calls.append((name, seed, (extra_env or {}).get("CUDA_VISIBLE_DEVICES")))
        if (name, seed) in fail:
            raise RuntimeError("train-set loss failed (rc 1), log x.log:\nCUDA out of memory")
        train, valid = _fake_fit(name, seed)
        return {"checkpoint_updates": UPDATES, "device": "cpu", "dtype": "float32", "loss_per": "token",
                "subsets": {"train": {"name": "train", "loss": train, "nll_loss": train - 1, "sentences": 400,
                                      "tokens": 4000, "skipped": 2, "dataset_sentences": 402},
                            "valid": {"name": "valid", "loss": valid, "nll_loss": valid - 1.5, "sentences": 60,
                                      "tokens": 600, "skipped": 0, "dataset_sentences": 60}}}
    return measure


def _fake_fit(name, seed):
    """(train, valid) loss: 01-good fits its training data better by 0.3 - 0.02 * seed and is
    0.1 better on valid."""
    good = name == "01-good"
    return 6.0 + 0.03 * seed - (0.3 - 0.02 * seed if good else 0.0), 7.0 + 0.05 * seed - (0.1 if good else 0.0)


def _fit_main(qc, study, calls, *extra, fail=()):
    return qc.main(study.argv + list(extra), train_fn=study.fakes.train, eval_fn=study.fakes.evaluate,
                   train_loss_fn=_fake_train_set_loss(calls, fail))


def test_train_loss_is_reported_beside_the_valid_loss_with_seed_level_differences(qc, study):
    """--train-loss: every run's final checkpoint measured once (train and valid in one pass);
    the report has both losses, the NLLs, valid - train and their seed-paired differences
    against the baseline (written here from the fakes' numbers); a gap has no better / worse."""
    calls = []
    q = _fit_main(qc, study, calls, "--train-loss")
    assert sorted(c[:2] for c in calls) == [(n, s) for n in ("00-transformer", "01-good") for s in (1, 2, 3)]
    for name in ("00-transformer", "01-good"):
        for seed in (1, 2, 3):
            run, (train, valid) = q["runs"][name][str(seed)], _fake_fit(name, seed)
            assert run["train_loss"] == {UPDATES: {"loss": train, "nll_loss": pytest.approx(train - 1),
                                                   "sentences": 400, "skipped": 2, "checkpoint_updates": UPDATES,
                                                   "loss_per": "token"}}
            assert run["fit_gap"][UPDATES] == {"loss": pytest.approx(valid - train), "valid_loss": pytest.approx(valid),
                                               "nll_loss": pytest.approx(valid - 1.5 - (train - 1)),
                                               "valid_nll_loss": pytest.approx(valid - 1.5),
                                               "valid_sentences": 60, "valid_skipped": 0}
    diff = q["curve_comparisons"]["01-good"]["train_loss"][UPDATES]
    want = [_fake_fit("01-good", s)[0] - _fake_fit("00-transformer", s)[0] for s in (1, 2, 3)]
    assert diff["mean_diff"] == pytest.approx(sum(want) / 3) and diff["n"] == 3 and diff["better"] == 3
    gap = q["curve_comparisons"]["01-good"]["fit_gap"][UPDATES]
    # valid 0.1 lower, train 0.3 - 0.02 s lower: the gap 0.2 - 0.02 s higher, counted as higher, not worse
    assert gap["mean_diff"] == pytest.approx(0.2 - 0.04) and gap["higher"] == 3 and "worse" not in gap
    assert "higher_is_better" not in gap
    md = (study.out / "quality.md").read_text()
    section = md[md.index("## Fit and generalisation (--train-loss)"):]
    # columns: train loss, valid loss, valid - train, train NLL, valid NLL, valid - train NLL
    assert ("| 00-transformer | (baseline) | 1, 2, 3 | 6.060 (6.030-6.090) | 7.100 (7.050-7.150) | "
            "1.040 (1.020-1.060) | 5.060 (5.030-5.090) | 5.600 (5.550-5.650) | 0.540 (0.520-0.560) |") in section
    train_diffs = [-0.28, -0.26, -0.24]  # 01-good - 00-transformer: -(0.3 - 0.02 s)
    t = statistics.stdev(train_diffs) / math.sqrt(3) * 4.302653
    train_cell = f"-0.260 [{-0.26 - t:+.3f}, {-0.26 + t:+.3f}] (0 / 3)"
    gap_cell = f"+0.160 [{0.16 - t:+.3f}, {0.16 + t:+.3f}] (3 / 0)"
    valid_cell = "-0.100 (0 / 3)"  # no spread over the seeds: no interval
    assert (f"| Δ 01-good | 00-transformer | 1, 2, 3 | {train_cell} | {valid_cell} | {gap_cell} | {train_cell} | "
            f"{valid_cell} | {gap_cell} |") in section
    # the difference each Δ's t-test finds with 80 % power (sd 0.02 over 3 seeds; none without spread)
    power = next(line for line in section.splitlines() if line.startswith("| 80 % power, 01-good | 00-transformer | 1, 2, 3 |"))
    cells = [c.strip() for c in power.split("|")[4:-1]]
    assert [c == "-" for c in cells] == [False, True, False, False, True, False]
    assert paired_t_power(float(cells[0]), 0.02, 3, T975_DF2) == pytest.approx(0.80, abs=0.01)
    assert len(set(cells[i] for i in (0, 2, 3, 5))) == 1
    assert "- pairs over the length limits left out: 00-transformer seed 1: 2 training / 0 valid;" in section
    assert q["meta"]["train_loss"] is True and "## Learning curves" not in md
    # measured once: a rerun neither trains nor measures again
    n_train = len(study.fakes.train_calls)
    _fit_main(qc, study, calls, "--train-loss")
    assert len(calls) == 6 and len(study.fakes.train_calls) == n_train


def test_train_loss_of_finished_runs_from_kept_checkpoints_only_never_by_training_again(qc, study, capsys):
    """--train-loss asked of runs finished without it: measured on their kept final checkpoint
    (--keep-checkpoints) if it is this training's; where the checkpoints are gone, or are another
    training's, the run is not trained again for a diagnostic: the log names it and the report
    has no train-set loss for it (and no Δ row)."""
    calls = []
    _fit_main(qc, study, calls, "--seeds", "1", "2", "--configs", "00-*", "--keep-checkpoints")
    _fit_main(qc, study, calls, "--seeds", "1", "2", "--configs", "01-*")
    other = study.out / "runs" / "00-transformer" / "seed2" / "checkpoints" / "trained.json"
    other.write_text(json.dumps({**json.loads(other.read_text()), "settings": "updates=60 common=other"}))
    n_train = len(study.fakes.train_calls)
    capsys.readouterr()
    q = _fit_main(qc, study, calls, "--seeds", "1", "2", "--train-loss")
    assert len(study.fakes.train_calls) == n_train
    assert [c[:2] for c in calls] == [("00-transformer", 1)]
    err = capsys.readouterr().err
    assert "no train-set loss (--train-loss) for 3 finished run(s)" in err
    assert "00-transformer seed 2 (no kept final checkpoint of this training)" in err
    assert "01-good seed 1 (no kept final checkpoint of this training)" in err
    assert "train_loss" in q["runs"]["00-transformer"]["1"] and "train_loss" not in q["runs"]["01-good"]["1"]
    assert "train_loss" not in q["curve_comparisons"].get("01-good", {})
    md = (study.out / "quality.md").read_text()
    fit = md.split("## Fit and generalisation (--train-loss)")[1]
    assert "| 00-transformer | (baseline) | 1 |" in fit and "| Δ 01-good |" not in fit
    # kept by the user: still there after the measurement
    assert (study.out / "runs" / "00-transformer" / "seed1" / "checkpoints" / "checkpoint_last.pt").exists()


def test_a_failed_train_loss_loses_no_score_and_is_measured_on_the_rerun(qc, study, capsys):
    """A measurement that fails (out of memory, say) stops nothing: the run's scores stand, the
    others go on, the log names it, and its checkpoints are kept so that a rerun measures them
    without training (and then deletes them: they were kept only for that)."""
    calls = []
    q = _fit_main(qc, study, calls, "--seeds", "1", "--train-loss", fail={("01-good", 1)})
    err = capsys.readouterr().err
    assert "01-good seed 1: train-set loss failed (train-set loss failed (rc 1), log x.log:)" in err
    assert "no train-set loss (--train-loss) for 1 run(s) trained or scored now: 01-good seed 1 (failed:" in err
    assert q["runs"]["01-good"]["1"]["bleu"] is not None and "train_loss" not in q["runs"]["01-good"]["1"]
    ck = study.out / "runs" / "01-good" / "seed1" / "checkpoints"
    assert (ck / "checkpoint_last.pt").exists()
    assert not (study.out / "runs" / "00-transformer" / "seed1" / "checkpoints").exists()
    assert (study.out / "runs" / "01-good" / "seed1" / "train_loss" / "KEPT").exists()
    n_train = len(study.fakes.train_calls)
    q = _fit_main(qc, study, calls, "--seeds", "1", "--train-loss")
    assert len(study.fakes.train_calls) == n_train and [c[:2] for c in calls[-1:]] == [("01-good", 1)]
    assert "train_loss" in q["runs"]["01-good"]["1"] and not ck.exists()
    assert not (study.out / "runs" / "01-good" / "seed1" / "train_loss" / "KEPT").exists()


def test_checkpoints_the_user_kept_stay_after_a_failed_and_a_later_train_loss(qc, study):
    """Checkpoints kept on purpose (--keep-checkpoints) are never deleted by --train-loss, also
    when a first measurement of them failed and a later one, without --keep-checkpoints,
    succeeds."""
    calls = []
    _fit_main(qc, study, calls, "--seeds", "1", "--configs", "00-*", "--keep-checkpoints")
    _fit_main(qc, study, calls, "--seeds", "1", "--configs", "00-*", "--train-loss", fail={("00-transformer", 1)})
    q = _fit_main(qc, study, calls, "--seeds", "1", "--configs", "00-*", "--train-loss")
    assert "train_loss" in q["runs"]["00-transformer"]["1"] and len(calls) == 2
    assert (study.out / "runs" / "00-transformer" / "seed1" / "checkpoints" / "checkpoint_last.pt").exists()


def test_a_kept_run_another_comparison_holds_is_not_measured_and_is_named(qc, study, capsys):
    """The measurement of a kept run takes the run's lock: a run another comparison is scoring
    is left alone and named."""
    import fcntl

    calls = []
    _fit_main(qc, study, calls, "--seeds", "1", "--configs", "00-*", "--keep-checkpoints")
    capsys.readouterr()
    with open(study.out / "runs" / "00-transformer" / "seed1" / ".lock", "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        q = _fit_main(qc, study, calls, "--seeds", "1", "--configs", "00-*", "--train-loss")
    assert not calls and "train_loss" not in q["runs"]["00-transformer"]["1"]
    assert "00-transformer seed 1 (in use by another comparison)" in capsys.readouterr().err


def test_a_run_trained_again_is_measured_again_and_a_continued_one_keeps_its_shorter_point(qc, study, monkeypatch):
    """Train-set losses belong to one training: a run trained again (new curve points without
    kept checkpoints) drops its old measurement and is measured again; a kept training continued
    to more updates keeps the measurement of its shorter part, at that update count."""
    calls = []
    _fit_main(qc, study, calls, "--seeds", "1", "--configs", "00-*", "--train-loss")
    _fit_main(qc, study, calls, "--seeds", "1", "--configs", "00-*", "--train-loss", "--curve-updates", "20")
    assert [c[:2] for c in calls] == [("00-transformer", 1)] * 2
    monkeypatch.setattr(qc, "stored_updates", _fake_checkpoint_updates)
    out2 = study.out.parent / "out2"
    argv = [a if a != str(study.out) else str(out2) for a in study.argv]
    qc.main(argv + ["--seeds", "1", "--configs", "00-*", "--updates", "40", "--keep-checkpoints", "--train-loss"],
            train_fn=study.fakes.train, eval_fn=study.fakes.evaluate, train_loss_fn=_fake_train_set_loss(calls))
    study.fakes.allow_resume = True
    q = qc.main(argv + ["--seeds", "1", "--configs", "00-*", "--keep-checkpoints", "--train-loss"],
                train_fn=study.fakes.train, eval_fn=study.fakes.evaluate, train_loss_fn=_fake_train_set_loss(calls))
    assert sorted(q["runs"]["00-transformer"]["1"]["train_loss"]) == [40, UPDATES]


def test_imported_runs_keep_their_train_loss_and_those_without_are_named(qc, study, capsys):
    """A report's train-set losses come along with its imported runs (keys as update counts);
    imported runs without one are named, not silently left out."""
    calls = []
    _fit_main(qc, study, calls, "--seeds", "1", "--train-loss", "--json", str(study.out / "with.json"))
    _fit_main(qc, study, calls, "--seeds", "2", "--json", str(study.out / "without.json"))
    fresh = study.out.parent / "fresh"
    argv = [a if a != str(study.out) else str(fresh) for a in study.argv]
    capsys.readouterr()
    q = qc.main(argv + ["--seeds", "1", "2", "--train-loss", "--import-runs", str(study.out / "with.json"),
                        "--import-runs", str(study.out / "without.json")],
                train_fn=study.fakes.train, eval_fn=study.fakes.evaluate, train_loss_fn=_fake_train_set_loss(calls))
    assert q["runs"]["01-good"]["1"]["train_loss"][UPDATES]["loss"] == _fake_fit("01-good", 1)[0]
    assert q["curve_comparisons"]["01-good"]["train_loss"][UPDATES]["n"] == 1
    assert f"01-good seed 2 (imported from {study.out / 'without.json'} without one)" in capsys.readouterr().err


def test_each_train_loss_runs_on_its_run_s_gpu(qc, study, monkeypatch):
    """On a node with several GPUs the measurement sees the GPU its run trained on, one each."""
    monkeypatch.setattr(qc, "_GPU_PROBE", {"result": ("NVIDIA H100 80GB HBM3", 2, ["NVIDIA H100 80GB HBM3"] * 2)})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    calls = []
    _fit_main(qc, study, calls, "--seeds", "1", "2", "--jobs", "2", "--train-loss")
    trained_on = {(n, s): d for what, n, s, d in study.fakes.devices if what == "train"}
    assert len(calls) == 4 and all(d in ("0", "1") and trained_on[(n, s)] == d for n, s, d in calls)


def test_real_tiny_train_set_loss_is_the_eval_mode_loss_of_every_training_sentence(qc, tiny_corpus, tmp_path,
                                                                                   monkeypatch):
    """fairseq itself: the train-set and valid losses quality_compare reports equal the
    label-smoothed loss, written here from its definition (Szegedy et al.: (1 - eps) NLL + eps
    times the mean of -log p over the vocabulary, as fairseq spreads eps: eps / (V - 1) on every
    other word), of the final model in eval mode over every sentence of the subset, in base 2;
    valid - train is their difference. A model with fewer positions than some pairs need leaves
    those pairs out, as fairseq-train does, and counts them."""
    import torch
    from fairseq import checkpoint_utils

    cfg = _tiny_config_dir(tmp_path / "configs", "--max-tokens 400 --dropout 0.3")
    out = tmp_path / "out"
    q = qc.main(["--data-dir", str(tiny_corpus), "--config-dir", str(cfg), "--seeds", "1", "--updates", "12",
                 "--out-dir", str(out), "--threads", "1", "--keep-checkpoints", "--train-loss",
                 "--", "--max-len-b", "5"])
    run = q["runs"]["00-transformer"]["1"]
    ckpt = out / "runs" / "00-transformer" / "seed1" / "checkpoints" / "checkpoint_last.pt"
    models, saved, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(ckpt)], arg_overrides={"data": str(tiny_corpus / "bin")})
    model = models[0].eval()
    eps, pad = saved.criterion.label_smoothing, task.target_dictionary.pad()

    def reference(subset, limit=None):
        """(loss, nll, sentences in it, sentences left out) from the definition."""
        task.load_dataset(subset)
        data = task.dataset(subset)
        # fairseq's source / target lengths count the end-of-sentence token
        keep = [i for i in range(len(data)) if limit is None or (len(data.src[i]) <= limit and len(data.tgt[i]) <= limit)]
        loss_sum, nll_sum, tokens = 0.0, 0.0, 0
        with torch.no_grad():
            for start in range(0, len(keep), 16):
                batch = data.collater([data[i] for i in keep[start:start + 16]])
                lprobs = torch.log_softmax(model(**batch["net_input"])[0].double(), dim=-1)
                target = batch["target"]
                mask = target.ne(pad)
                nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
                vocab = lprobs.size(-1)
                each = (1 - eps - eps / (vocab - 1)) * nll + eps / (vocab - 1) * -lprobs.sum(-1)
                loss_sum += each[mask].sum().item()
                nll_sum += nll[mask].sum().item()
                tokens += int(mask.sum())
        return loss_sum / tokens / math.log(2), nll_sum / tokens / math.log(2), len(keep), len(data) - len(keep)

    train_ref, valid_ref = reference("train"), reference("valid")
    train = run["train_loss"][12]
    assert (train["sentences"], train["skipped"]) == (train_ref[2], 0) and train_ref[2] == len(task.dataset("train"))
    assert train["loss"] == pytest.approx(train_ref[0], abs=1e-4)
    assert train["nll_loss"] == pytest.approx(train_ref[1], abs=1e-4)
    gap = run["fit_gap"][12]
    assert gap["valid_loss"] == pytest.approx(valid_ref[0], abs=1e-4)
    assert gap["loss"] == pytest.approx(valid_ref[0] - train_ref[0], abs=2e-4)
    assert gap["nll_loss"] == pytest.approx(valid_ref[1] - train_ref[1], abs=2e-4)
    record = json.loads((out / "runs" / "00-transformer" / "seed1" / "train_loss" / "upd12.json").read_text())
    assert record["checkpoint_updates"] == 12 and record["dtype"] == "float32" and record["device"] == "cpu"

    # the same weights under length limits of 12 tokens: the pairs fairseq-train would leave out
    # (over the model's or the task's positions, or over --max-tokens: training pairs only) are
    # left out and counted; under --sentence-avg the loss is per sentence
    state = torch.load(ckpt, map_location="cpu", weights_only=False)

    def variant(name, settings):
        changed = copy.deepcopy(state)
        for (section, key), value in settings.items():
            part = changed["cfg"][section]
            if isinstance(part, argparse.Namespace):  # fairseq keeps a legacy model's config as a Namespace
                setattr(part, key, value)
            else:
                part[key] = value
        path = tmp_path / f"{name}.pt"
        torch.save(changed, path)
        return qc.train_set_loss(str(tiny_corpus / "bin"), str(path), str(tmp_path / f"{name}.log"), threads=1,
                                 langs=("zh", "en"))

    def same(found, ref):
        assert (found["sentences"], found["skipped"]) == ref[2:]
        assert found["loss"] == pytest.approx(ref[0], abs=1e-4) and found["nll_loss"] == pytest.approx(ref[1], abs=1e-4)

    train_12, valid_12 = reference("train", 12), reference("valid", 12)
    assert train_12[2] > 0 and train_12[3] > 0 and valid_12[3] > 0  # some pairs in, some out
    for name, settings in (("model", {("model", "max_source_positions"): 12, ("model", "max_target_positions"): 12}),
                           ("task", {("task", "max_source_positions"): 12, ("task", "max_target_positions"): 12})):
        found = variant(name, settings)["subsets"]
        same(found["train"], train_12)
        same(found["valid"], valid_12)
    found = variant("max_tokens", {("dataset", "max_tokens"): 12})["subsets"]
    same(found["train"], train_12)
    same(found["valid"], valid_ref[:2] + (len(task.dataset("valid")), 0))  # valid has no --max-tokens limit
    found = variant("sentence_avg", {("criterion", "sentence_avg"): True})
    sentences = len(task.dataset("train"))
    tokens = sum(len(task.dataset("train").tgt[i]) for i in range(sentences))
    assert found["loss_per"] == "sentence"
    assert found["subsets"]["train"]["loss"] == pytest.approx(train_ref[0] * tokens / sentences, rel=1e-5)
    assert found["subsets"]["train"]["nll_loss"] == pytest.approx(train_ref[1], abs=1e-4)  # still per token

    # a batch that comes back with a sentence fewer stops the measurement: the sums must hold
    # every sentence of the subset but those over the length limits
    from fairseq.tasks.translation import TranslationTask

    from fairseq_ctx.analysis import subset_loss

    real = TranslationTask.valid_step

    def one_sentence_fewer(self, sample, model, criterion):
        loss, size, log = real(self, sample, model, criterion)
        return loss, size, {**log, "nsentences": log["nsentences"] - 1}

    monkeypatch.setattr(TranslationTask, "valid_step", one_sentence_fewer)
    with pytest.raises(RuntimeError, match=r"train: \d+ sentences in the loss and 0 skipped, but the subset has"):
        subset_loss.subset_losses(str(ckpt), str(tiny_corpus / "bin"), ("train",))


def test_a_report_names_the_software_its_runs_were_trained_with_where_it_is_not_its_own(qc, study, monkeypatch):
    """A report assembled on one machine from runs trained on another records its own
    process's versions in meta; the runs' versions and GPU are then named beside them."""
    q = _main(qc, study, "--seeds", "1", "2", "3")
    assert q["meta"]["runs_software"] is None and q["meta"]["runs_software_unrecorded"] is None
    assert "the runs were trained with" not in (study.out / "quality.md").read_text()
    meta = q["meta"]
    here = f"torch {meta['torch']}, fairseq {meta['fairseq']}, sacrebleu {meta['sacrebleu']}, python {meta['python']}"
    gpu_here = qc._visible_gpu()
    here_gpu = here + (f", on {gpu_here}" if gpu_here else ", no GPU")
    records = {(name, seed): study.out / "runs" / name / f"seed{seed}" / "result.json"
               for name in ("00-transformer", "01-good") for seed in (1, 2, 3)}
    original = {key: path.read_text() for key, path in records.items()}

    def edit(key, **changes):
        rec = json.loads(original[key])
        rec["trained_with"].update(changes)
        records[key].write_text(json.dumps(rec))

    def restore():
        for key, path in records.items():
            path.write_text(original[key])

    # another torch on a (pinned) H200: named with the GPU model, beside this process's group
    edit(("01-good", 2), torch="2.11.0+cu130", gpu="NVIDIA H200, this run on CUDA_VISIBLE_DEVICES=3 (one GPU per run)")
    q = _main(qc, study, "--seeds", "1", "2")
    elsewhere = here.replace(f"torch {meta['torch']}", "torch 2.11.0+cu130") + ", on NVIDIA H200"
    assert q["meta"]["runs_software"] == {elsewhere: ["01-good seed 2"],
                                          here_gpu: ["00-transformer seed 1", "00-transformer seed 2", "01-good seed 1"]}
    md = (study.out / "quality.md").read_text()
    assert "are those of the process that wrote it, not of every run" in md and f"{elsewhere}: 01-good seed 2" in md
    # each version alone
    for field in ("fairseq", "sacrebleu", "python"):
        restore()
        edit(("00-transformer", 1), **{field: "0.0.other"})
        q = _main(qc, study, "--seeds", "1", "2")
        assert list(q["meta"]["runs_software"].get(here_gpu.replace(f"{field} {meta[field]}", f"{field} 0.0.other"))
                    ) == ["00-transformer seed 1"], field
    # a run outside --seeds is not this report's
    restore()
    edit(("01-good", 3), torch="9.9")
    assert _main(qc, study, "--seeds", "1", "2")["meta"]["runs_software"] is None
    # the attempt a resumed run continued is named too
    rec = json.loads(original[("01-good", 1)])
    rec["earlier_attempts"] = [{**rec["trained_with"], "torch": "9.9"}]
    records[("01-good", 1)].write_text(json.dumps(rec))
    q = _main(qc, study, "--seeds", "1", "2")
    assert q["meta"]["runs_software"][here_gpu.replace(f"torch {meta['torch']}", "torch 9.9")] == ["01-good seed 1"]
    assert "01-good seed 1" in q["meta"]["runs_software"][here_gpu]
    # the same versions, every run on a GPU this process does not see: named; seen: not
    restore()
    for key in records:
        edit(key, gpu="NVIDIA H200")
    monkeypatch.setattr(qc, "_visible_gpu", lambda: None)
    q = _main(qc, study, "--seeds", "1", "2")
    assert list(q["meta"]["runs_software"]) == [here + ", on NVIDIA H200"]
    monkeypatch.setattr(qc, "_visible_gpu", lambda: "NVIDIA H200")
    assert _main(qc, study, "--seeds", "1", "2")["meta"]["runs_software"] is None
    monkeypatch.setattr(qc, "_visible_gpu", lambda: "NVIDIA H200 (x8 visible)")  # a node of 8
    assert _main(qc, study, "--seeds", "1", "2")["meta"]["runs_software"] is None
    # on that node: runs data-parallel over all 8, and runs pinned to one whose own model was
    # not read, are on the same hardware as this process
    for gpu in ("NVIDIA H200 (x8 visible)",
                "NVIDIA H200 (x8 visible), this run on CUDA_VISIBLE_DEVICES=5 (one GPU per run)"):
        for key in records:
            edit(key, gpu=gpu)
        assert _main(qc, study, "--seeds", "1", "2")["meta"]["runs_software"] is None, gpu
    # on a node of mixed GPUs, runs pinned to either model are on this process's hardware
    monkeypatch.setattr(qc, "_visible_gpu", lambda: "NVIDIA A100 + NVIDIA H200 (x2 visible)")
    assert _main(qc, study, "--seeds", "1", "2")["meta"]["runs_software"] is None
    edit(("01-good", 1), gpu="NVIDIA L4, this run on CUDA_VISIBLE_DEVICES=1 (one GPU per run)")
    assert _main(qc, study, "--seeds", "1", "2")["meta"]["runs_software"][here + ", on NVIDIA L4"] == ["01-good seed 1"]
    edit(("01-good", 1), gpu=gpu)
    monkeypatch.setattr(qc, "_visible_gpu", lambda: None)
    assert list(_main(qc, study, "--seeds", "1", "2")["meta"]["runs_software"]) == [here + ", on NVIDIA H200"]
    # a run with no record is listed as such
    rec = json.loads(original[("00-transformer", 2)])
    del rec["trained_with"]
    records[("00-transformer", 2)].write_text(json.dumps(rec))
    q = _main(qc, study, "--seeds", "1", "2")
    assert q["meta"]["runs_software_unrecorded"] == ["00-transformer seed 2"]
    assert "1 run(s) with no record of the software or GPU" in (study.out / "quality.md").read_text()


def test_a_report_gives_output_length_and_chrf_per_run_and_seed_paired_and_imported_seeds_keep_them(
        qc, study, tmp_path):
    """BLEU moves with output length where outputs are short: the report gives each run's
    brevity penalty, length ratio, BLEU without BP and chrF of its final test translations,
    their seed-paired differences, and keeps them in the JSON so that imported seeds have them."""
    from sacrebleu.metrics import BLEU, CHRF

    q = _main(qc, study)
    refs = (study.data / "raw" / "test.en").read_text().splitlines()
    by_hand = {}
    for name in ("00-transformer", "01-good"):
        for seed in (1, 2, 3):
            hyps = json.loads((study.out / "runs" / name / f"seed{seed}" / "result.json").read_text())["hyps"]
            c, r = sum(len(h.split()) for h in hyps), sum(len(x.split()) for x in refs)
            bleu = BLEU().corpus_score(hyps, [refs])
            # the precisions from the n-gram counts, with sacreBLEU's "exp" smoothing of an order with no match
            precisions, halvings = [], 1
            for matched, total in zip(bleu.counts, bleu.totals):
                halvings *= 2 if matched == 0 else 1
                precisions.append(matched / total if matched else 1 / (halvings * total))
            by_hand[name, seed] = {"bp": 1.0 if c > r else math.exp(1 - r / c), "ratio": c / r,
                                   "bleu_without_bp": 100 * math.exp(sum(map(math.log, precisions)) / 4),
                                   "chrf": CHRF().corpus_score(hyps, [refs]).score}
            found = q["runs"][name][str(seed)]["length"]
            assert found["sys_len"] == c and found["ref_len"] == r
            assert found["bp"] == pytest.approx(by_hand[name, seed]["bp"], abs=1e-4)
            assert found["ratio"] == pytest.approx(c / r, abs=1e-4)
            assert found["bleu_without_bp"] == pytest.approx(by_hand[name, seed]["bleu_without_bp"], abs=0.01)
            assert found["chrf"] == pytest.approx(by_hand[name, seed]["chrf"], abs=0.01)
    md = (study.out / "quality.md").read_text()
    section = md.split("## Output length and chrF (final test translations)")[1]
    delta_row = next(line for line in section.splitlines() if line.startswith("| Δ 01-good | 00-transformer | 1, 2, 3 |"))
    assert q["length_comparisons"]["01-good"]["baseline"] == "00-transformer"
    for field, column, nd in (("bp", 3, 3), ("ratio", 4, 3), ("bleu_without_bp", 5, 2), ("chrf", 6, 2)):
        diff = statistics.fmean(by_hand["01-good", s][field] - by_hand["00-transformer", s][field] for s in (1, 2, 3))
        shown = float(delta_row.split("|")[column + 1].split()[0])
        assert shown == pytest.approx(diff, abs=1.5 * 10 ** -nd), field
        in_json = q["length_comparisons"]["01-good"][field]
        assert in_json["seeds"] == [1, 2, 3] and in_json["mean_diff"] == pytest.approx(diff, abs=1.5 * 10 ** -nd), field
    # imported seeds keep them; a seed imported from a report without them has none and is named by the seeds column
    report = tmp_path / "earlier.json"
    report.write_text((study.out / "quality.json").read_text())
    shutil.rmtree(study.out)
    q2 = _main(qc, study, "--import-runs", str(report))
    assert q2["runs"]["01-good"]["2"]["length"] == q["runs"]["01-good"]["2"]["length"]
    old = json.loads(report.read_text())
    del old["runs"]["01-good"]["2"]["length"]
    # figures written before the chrF signature was kept, and a run with no output (no BLEU without BP)
    del old["runs"]["01-good"]["3"]["length"]["chrf_signature"]
    old["runs"]["00-transformer"]["3"]["length"]["bleu_without_bp"] = None
    report.write_text(json.dumps(old))
    shutil.rmtree(study.out)
    _main(qc, study, "--import-runs", str(report))
    section = (study.out / "quality.md").read_text().split("## Output length and chrF")[1]
    assert "| 01-good | 00-transformer | 1, 3 |" in section and "| Δ 01-good | 00-transformer | 1, 3 |" in section


def test_the_kind_of_machine_separates_thread_counts_and_unpinned_multi_gpu_runs_and_leaves_unnamed_ones_out(qc):
    """What splits a seed pair: a CPU run on 2 threads against one on 1 (sums split
    differently), an unpinned run on a node of 8 GPUs (data-parallel over all 8) against a
    run pinned to one of them, a record from before the GPU was recorded against a CPU run.
    What is not a kind of machine: a GPU the probe could not name, one GPU of a node of mixed
    models whose own model was not read; those runs are named, not compared."""
    def rec(**trained_with):
        return {"trained_with": trained_with}

    epyc = dict(cpu="AMD EPYC", gpu=None)
    results = {
        "00-transformer": {1: rec(**epyc, threads=1), 2: rec(cpu="x", gpu="NVIDIA H200 (x8 visible)", threads=1),
                           3: rec(cpu="x", gpu="unknown (the GPU probe timed out)", threads=1),
                           4: rec(cpu="AMD EPYC", threads=1), 5: rec(**epyc, threads="default (2 cores)")},
        "01-good": {1: rec(**epyc, threads=2),
                    2: rec(cpu="x", gpu="NVIDIA H200 (x8 visible), this run on CUDA_VISIBLE_DEVICES=3 (one GPU per run)",
                           threads=1),
                    3: rec(cpu="x", gpu="NVIDIA H200 + unnamed GPU (its name could not be read: RuntimeError) "
                                        "(x2 visible)", threads=1),
                    4: rec(**epyc, threads=1),
                    5: rec(cpu="x", gpu="NVIDIA A100 + NVIDIA H200 (x8 visible), this run on CUDA_VISIBLE_DEVICES=2 "
                                        "(one GPU per run)", threads=1)}}
    machines, split, unknown = qc.runs_by_machine(results, {"00-transformer": None, "01-good": "00-transformer"})
    assert split == ["01-good vs 00-transformer seed 1: CPU AMD EPYC, 2 threads / CPU AMD EPYC, 1 thread",
                     "01-good vs 00-transformer seed 2: NVIDIA H200 / NVIDIA H200 (x8 visible)",
                     "01-good vs 00-transformer seed 4: CPU AMD EPYC, 1 thread / CPU AMD EPYC, 1 thread (GPU not "
                     "recorded)"]
    assert unknown == ["00-transformer seed 3", "01-good seed 3", "01-good seed 5"]
    assert machines == {"CPU AMD EPYC, 1 thread": ["00-transformer seed 1", "01-good seed 4"],
                        "CPU AMD EPYC, 1 thread (GPU not recorded)": ["00-transformer seed 4"],
                        "CPU AMD EPYC, 2 threads": ["01-good seed 1"],
                        "CPU AMD EPYC, threads default (2 cores)": ["00-transformer seed 5"],
                        "NVIDIA H200": ["01-good seed 2"], "NVIDIA H200 (x8 visible)": ["00-transformer seed 2"]}
    # one kind throughout: nothing listed, nothing split
    same = {name: {1: rec(**epyc, threads=1)} for name in ("00-transformer", "01-good")}
    assert qc.runs_by_machine(same, {"00-transformer": None, "01-good": "00-transformer"}) == (None, [], [])


def test_a_run_without_threads_records_the_count_it_trains_with(qc, monkeypatch):
    """No --threads: the subprocess inherits OMP_NUM_THREADS, else takes torch's default; the
    record names that number, so that it compares with a --threads N run."""
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert qc._run_provenance(0, ["--cpu"])["threads"] == 3
    assert qc._run_provenance(2, ["--cpu"])["threads"] == 2
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert qc._run_provenance(0, ["--cpu"])["threads"] == torch.get_num_threads()


def test_a_report_names_the_machines_its_runs_ran_on_and_warns_of_seed_pairs_split_across_them(qc, study):
    """CPU and GPU models order floating-point sums differently, so a seed's run retrains
    differently on another kind of machine: a report whose runs span several kinds lists
    them, and a seed pair whose two runs ran on different kinds is a warning (its paired
    difference includes the machine's)."""
    q = _main(qc, study, "--seeds", "1", "2", "3")
    assert q["meta"]["runs_machines"] is None and q["meta"]["machine_split_pairs"] is None
    records = {(name, seed): study.out / "runs" / name / f"seed{seed}" / "result.json"
               for name in ("00-transformer", "01-good") for seed in (1, 2, 3)}

    def edit(key, **changes):
        rec = json.loads(records[key].read_text())
        rec["trained_with"].update(changes)
        records[key].write_text(json.dumps(rec))

    for seed in (1, 2, 3):  # seeds 1-2 on one CPU model, seed 3 on another: listed, no split pair
        for name in ("00-transformer", "01-good"):
            edit((name, seed), gpu=None, threads=1, cpu="Intel(R) Xeon(R) Processor" if seed < 3 else "AMD EPYC")
    q = _main(qc, study, "--seeds", "1", "2", "3")
    assert q["meta"]["runs_machines"] == {
        "CPU AMD EPYC, 1 thread": ["00-transformer seed 3", "01-good seed 3"],
        "CPU Intel(R) Xeon(R) Processor, 1 thread": ["00-transformer seed 1", "00-transformer seed 2",
                                                     "01-good seed 1", "01-good seed 2"]}
    assert q["meta"]["machine_split_pairs"] is None
    md = (study.out / "quality.md").read_text()
    assert ("  - CPU AMD EPYC, 1 thread: 00-transformer seed 3; 01-good seed 3\n"
            "  - CPU Intel(R) Xeon(R) Processor, 1 thread: 00-transformer seeds 1, 2; 01-good seeds 1, 2\n") in md
    assert "different kinds of machine**" not in md
    # seed 2's system on a (pinned) GPU, its baseline on the CPU: a split pair
    edit(("01-good", 2), gpu="NVIDIA H200, this run on CUDA_VISIBLE_DEVICES=1 (one GPU per run)")
    q = _main(qc, study, "--seeds", "1", "2", "3")
    assert q["meta"]["machine_split_pairs"] == [
        "01-good vs 00-transformer seed 2: NVIDIA H200 / CPU Intel(R) Xeon(R) Processor, 1 thread"]
    assert "01-good seed 2" in q["meta"]["runs_machines"]["NVIDIA H200"]
    assert "seed pairs whose two runs were trained on different kinds of machine" in (study.out / "quality.md").read_text()
    # a resumed run's earlier attempt on another machine counts: seed 1's baseline began on the EPYC
    rec = json.loads(records[("00-transformer", 1)].read_text())
    rec["earlier_attempts"] = [{**rec["trained_with"], "cpu": "AMD EPYC"}]
    records[("00-transformer", 1)].write_text(json.dumps(rec))
    q = _main(qc, study, "--seeds", "1", "2", "3")
    assert "01-good vs 00-transformer seed 1: CPU Intel(R) Xeon(R) Processor, 1 thread / CPU AMD EPYC, 1 thread + " \
           "CPU Intel(R) Xeon(R) Processor, 1 thread" in q["meta"]["machine_split_pairs"]
    # a GPU the probe could not name: the run is named, not compared
    edit(("01-good", 3), gpu="unknown (the GPU probe timed out)")
    q = _main(qc, study, "--seeds", "1", "2", "3")
    assert q["meta"]["runs_machine_unrecorded"] == ["01-good seed 3"]
    assert "1 run(s) with a training attempt whose kind of machine cannot be told" in (study.out / "quality.md").read_text()
    # only this report's seeds count
    assert _main(qc, study, "--seeds", "1")["meta"]["machine_split_pairs"] == [
        "01-good vs 00-transformer seed 1: CPU Intel(R) Xeon(R) Processor, 1 thread / CPU AMD EPYC, 1 thread + "
        "CPU Intel(R) Xeon(R) Processor, 1 thread"]


def test_a_config_fairseq_train_would_reject_stops_the_comparison_before_any_training(qc, tiny_corpus, tmp_path,
                                                                                      monkeypatch):
    """Every config's model is built (fairseq's parser, the data's dictionaries, the run's
    --max-update) before the first training: a bad option in one arm is one error naming it,
    not a failure after the other arms have trained."""
    cfg = _tiny_config_dir(tmp_path / "configs", "--max-tokens 400")
    dims = (cfg / "00-transformer.args").read_text().split()[2:]
    (cfg / "01-cross_agg-bad_iters.args").write_text(
        " ".join(["--arch", "transformer_cross_agg", *dims, "--routing-iters", "0"]) + "\n")
    (cfg / "02-cross_agg-two_stops.args").write_text(
        " ".join(["--arch", "transformer_cross_agg", *dims, "--routing-stop-gradient",
                  "--routing-stop-gradient-updates", "20"]) + "\n")
    (cfg / "03-unknown_option.args").write_text(" ".join(["--arch", "transformer", *dims, "--no-such-option"]) + "\n")
    # parsed and built, refused by the lr scheduler fairseq-train builds at its first update
    (cfg / "05-schedule_without_phases.args").write_text(
        " ".join(["--arch", "transformer", *dims, "--lr-scheduler", "tri_stage"]) + "\n")
    # refused by fairseq's conversion of the options to its config (fairseq-train's cli_main)
    (cfg / "06-schedule_without_length.args").write_text(
        " ".join(["--arch", "transformer", *dims, "--lr-scheduler", "polynomial_decay"]) + "\n")
    (cfg / "04-cross_agg-good.args").write_text(
        " ".join(["--arch", "transformer_cross_agg", *dims, "--routing-stop-gradient-updates", "40"]) + "\n")
    out = tmp_path / "out"
    argv = ["--data-dir", str(tiny_corpus), "--config-dir", str(cfg), "--seeds", "1", "--updates", "30",
            "--out-dir", str(out), "--threads", "1"]
    with pytest.raises(SystemExit) as exit_info:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            qc.main(argv)
    assert exit_info.value.code == 2
    message = err.getvalue()
    assert "nothing was trained" in message
    assert "01-cross_agg-bad_iters: ValueError: --routing-iters must be >= 1, got 0" in message
    assert "02-cross_agg-two_stops: ValueError: --routing-stop-gradient stops" in message
    assert re.search(r"03-unknown_option: ValueError: fairseq could not parse .*--no-such-option", message)
    assert "05-schedule_without_phases: AssertionError: please specify steps or phase_ratio" in message
    assert "06-schedule_without_length: ConfigCompositionException: Error merging override " \
           "lr_scheduler.total_num_update=null" in message
    assert "00-transformer" not in message.split("nothing was trained")[1]
    assert "04-cross_agg-good" not in message  # N past the budget: a warning, built
    assert not list(out.glob("runs/*/seed*/train.log"))  # nothing trained

    # only configs with something left to train or score are built: once the transformer's run
    # is finished, model code that would now reject its config does not hold up its report
    assert qc.main(argv + ["--configs", "00-*"])["summary"]["00-transformer"]["bleu"]
    built = []

    def rejecting_everything(configs, **kwargs):
        built.extend(configs)
        return {name: "ValueError: rejected by newer model code" for name in configs}

    monkeypatch.setattr(qc, "build_errors", rejecting_everything)
    with contextlib.redirect_stderr(io.StringIO()) as err:
        report = qc.main(argv + ["--configs", "00-*"])
    assert "done already" in err.getvalue() and built == []
    assert report["summary"]["00-transformer"]["bleu"]
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        qc.main(argv + ["--configs", "00-*", "04-*"])  # 04 has a run to train: built, and refused
    assert built == ["04-cross_agg-good"]


def test_each_curve_power_row_carries_its_own_metric_and_update_counts_figure(qc):
    """The '80 % power' row under each Δ row of the learning-curve tables: at each update count the
    figure of that metric's per-seed differences there (BLEU 2 decimals, valid loss 3), '-' where
    they have no spread; distinct spreads per metric and point, so a row that took another point's
    or another metric's figure fails."""
    seeds = (1, 2, 3)
    bleu = {"00-transformer": {s: {800: 20.0 + s, 1200: 22.0 + s} for s in seeds},
            "01-good": {s: {800: 20.5 + s + 0.3 * s * s, 1200: 22.2 + s + 0.9 * s} for s in seeds}}
    valid = {"00-transformer": {s: {800: 5.3 + 0.01 * s, 1200: 4.9 + 0.01 * s} for s in seeds},
             "01-good": {s: {800: 5.31 + 0.01 * s + 0.004 * s * s, 1200: 4.9 + 0.01 * s - 0.02} for s in seeds}}
    results = {name: {s: {"curve": {u: {"bleu": b} for u, b in bleu[name][s].items()},
                          "valid": {u: {"loss": v} for u, v in valid[name][s].items()}} for s in seeds}
               for name in bleu}
    curves, comparisons = qc.learning_curves(results, {"01-good": "00-transformer", "00-transformer": None}, list(seeds))
    meta = {"test_sentences": 10, "beam": 5}
    md = "\n".join(qc.curve_markdown(curves, comparisons, {"01-good": "00-transformer", "00-transformer": None}, meta))

    def power_row(title):
        section = md.split(f"### {title}")[1].split("\n#")[0]
        return next(line for line in section.splitlines() if line.startswith("| 80 % power, 01-good | 00-transformer |"))

    for title, series, digits in (("BLEU", bleu, 2), ("Valid loss", valid, 3)):
        cells = []
        for u in (800, 1200):
            diffs = [series["01-good"][s][u] - series["00-transformer"][s][u] for s in seeds]
            m = sum(diffs) / 3
            sd = (sum((d - m) ** 2 for d in diffs) / 2) ** 0.5
            # detectable_difference itself is checked against an integral above
            cells.append("-" if sd < 1e-9 else f"{detectable_difference(sd, 3):.{digits}f}")
        assert power_row(title) == "| 80 % power, 01-good | 00-transformer | " + " | ".join(cells) + " |"
    assert power_row("Valid loss").endswith("| - |")  # a constant difference at 1,200: no spread
    assert "'-': fewer than 2 seeds or no spread" in md
