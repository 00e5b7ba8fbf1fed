"""Real-data quality comparison: every config of configs/demo/*.args (shipped in
fairseq_ctx/configs/) vs its stock baseline.

Each config is trained with the demo's training settings (configs/demo/train.common),
the SAME fixed update budget and each of the seeds (default 3), on the Tatoeba zh-en data
prepared by `fairseq-ctx-prepare-data tatoeba`; every checkpoint translates the whole test set
through fairseq-ctx-evaluate (``--required-batch-size-multiple 1``, every sentence
checked, detokenised, sacreBLEU against the raw references). Reported per config: BLEU
per seed, mean, sample standard deviation, min-max; per system vs its baseline: the mean
difference, and sacreBLEU's paired bootstrap resampling test (``paired_bs``, 1000
resamples, sacreBLEU's fixed seed 12345) per seed (system seed s vs baseline seed s).
There is no pooled bootstrap over the seeds' concatenated outputs: it would resample each
source sentence's outputs from different seeds as independent sentences and give too small
a p; the seed-level statistics below are the test across seeds.

Baselines: a config whose ``--arch`` is a stock fairseq arch (``transformer``, ``lstm``, a
Transformer-Big such as ``transformer_vaswani_wmt_en_de_big``) is a baseline; another config
is compared with the baseline of its family (fairseq_ctx/families.py: arch name starting with
``lstm`` -> the lstm baseline; a Transformer-Big, ``transformer*_big`` -> the stock Big one,
``transformer_vaswani_wmt_en_de_big`` first, none where no stock Big is among the configs;
else the transformer one). Override with ``--pair SYSTEM=BASELINE`` (config names without
``.args``).

Seed-level statistics (fairseq_ctx/analysis/seed_statistics.py), beside the bootstraps:
per system, the seed-paired mean BLEU difference with its 95 % t confidence interval, a
paired t-test and an exact Wilcoxon signed-rank test over seeds (the bootstrap measures
test-set sampling for fixed outputs; these measure what another training seed would do),
and the numbers of seeds better / worse than the baseline. Seeds and sentences both sampled
(fairseq_ctx/analysis/seed_sentence_statistics.py): the mean difference with an interval
under seed AND test-sentence sampling (variance components of the crossed seed x sentence
design), on test, and with --valid-bleu on valid and on both sets together.

Learning curves (``--curve-updates 200,400,800``): the training also saves checkpoints
every gcd(list) updates (``--save-interval-updates``, fairseq's checkpoint_E_U.pt) and
validates there (``--disable-validation`` is dropped, ``--validate-interval-updates``),
each listed update count is scored with the same evaluation as the final checkpoint (all
test sentences), and the valid loss is read from each run's train.log. Reported: mean and
min-max over seeds per update count (markdown, JSON ``curves``) and OUT_DIR/curves.png.
The final update count is always the curve's last point (the final score).

Output length and chrF: for each run's final test translations, BLEU's brevity penalty, the
output / reference length ratio, BLEU without its brevity penalty and chrF
(``evaluation.scoring.length_statistics``; run record "length", kept in the report so that
imported seeds keep it), per config and seed-paired per system ("Output length and chrF",
JSON ``length_comparisons``): where outputs are shorter than the references BLEU moves with
their length. The columns are read together, not as a split of BLEU into independent causes:
a shorter output also tends to have higher precisions, and chrF (β = 2) falls with it too.

Choosing among configs (``--valid-bleu``): every scored checkpoint is also translated and
scored on the valid subset (DATA_DIR/raw/valid.TGT, same evaluation), reported as a
"Valid BLEU" curve with seed-paired differences; choose on it and report test once, so the
choice is not fitted to the test set.

Fit or generalisation (``--train-loss``): each run's final checkpoint is also measured on
the training subset and on valid in one pass (``train_set_loss`` ->
``fairseq_ctx.analysis.subset_loss``: eval mode, fp32, the training's criterion, every sentence
counted, the pairs fairseq-train left out left out the same way and counted), reported with valid
- train, the NLLs and seed-paired differences ("Fit and generalisation"). A system behind on
valid and on the training data fits its training data worse; one level or ahead on the
training data generalises worse. Finished runs are measured from their kept checkpoints
(``--keep-checkpoints``), never trained again for it; a failed measurement keeps the run's
scores and checkpoints (a rerun measures them).

Before anything trains, the model of every config with a run left to train or score is
built as fairseq-train would build it (fairseq's training parser, the data's dictionaries,
``--max-update UPDATES``; on the meta device, seconds): a config fairseq-train would reject
stops the comparison with one error naming it and its reason, before the first training.

Finished runs and finished curve points (same settings) are not redone, so an
interrupted comparison resumes (an out-dir holds the runs of one data set and direction,
recorded in OUT_DIR/data.json: other data is refused, not scored as if the same; a run that
another comparison is training or scoring is refused before anything starts, so two seed sets
can train in one out-dir at once, each with its own ``--json`` / ``--markdown`` / ``--curve-png``:
a comparison whose report files another one is writing is refused before it starts); asking
for new curve points (or ``--valid-bleu``) of
finished runs retrains them and scores every point of the run again (final included):
the same seed retrains bit for bit only on the same host and thread count, so no run's
scores mix two trainings. With ``--keep-checkpoints``, a rerun with another ``--beam`` or
generation options scores the kept checkpoints again instead of training (the report and
each run's scores are overwritten: pass other ``--json`` / ``--markdown`` / ``--curve-png``),
and a rerun with a larger ``--updates`` continues each kept training from its last
checkpoint instead of starting again: fairseq restores optimizer, schedule, data position
and per-update seeds, and every training runs as ``--task translation_exact_resume`` (unless
the settings name a task), which groups a resumed training's batches as its first epoch did,
so a continuation, in whatever epoch it starts, is the run trained to the new count from the
start (bit for bit on one machine and thread count, CPU fp32; tested with --update-freq
inside epoch 1, and with --update-freq and validation across epochs); an interrupted training
resumed later is the same case ("resumed_at_update"). With fairseq's ``translation``
(settings naming it, and runs resumed before the task existed, 2026-11-29, which stay other
runs however they are continued now) one that starts in a later epoch E is not: fairseq
builds a process's batches once, grouping sentences of equal length with --seed + the epoch
it starts in, so from E on the same batch lengths hold other sentences (a valid run of that
seed, not the same one); each run records every resumption fairseq logged for it, with its epoch,
task and whether its batches went on as the uninterrupted training's ("resumptions", in the run
and in a curve point trained again to an epoch's end; fairseq_ctx/resumptions.py), and the report
names the runs whose did not. Every score of the shorter run stays, its final one as a curve
point (each run records "extended_from_updates"). Not where fairseq's resumption is not exact:
a schedule whose length is --max-update (cosine, tri_stage, reduce_lr_on_plateau,
polynomial_decay without --total-num-update), --patience (its count is not saved), fp16 /
bf16 / amp (loss-scaler counters not saved; bf16 not verified), --reset-* and
--optimizer-overrides, a --restore-file (read again at every start), --update-ordered-indices-seed
(batches regrouped with another seed). Those runs, and runs
without kept checkpoints, are trained again from the start, and the reason is said first.

Seeds run elsewhere (another machine, an earlier out-dir that is gone): ``--import-runs
REPORT.json`` takes those seeds' records from an earlier report of the same settings,
so that e.g. seed 5 is run here and reported with seeds 1-4; the report keeps no
translations, so imported seeds enter the seed-level statistics and curves but get no
bootstrap, and the report names what was imported.

GPUs: fairseq-train trains on every GPU it sees (data-parallel, N times the tokens per update
of the settings' one-device batch). On a node with several, each run (its training and its
scoring) therefore sees one GPU of its own (CUDA_VISIBLE_DEVICES, recorded in the run's
"trained_with"); ``--jobs N`` runs N at a time, spread over the GPUs. ``--all-gpus-per-run``
gives every run all of them instead. Runs of one comparison on a GPU and on the CPU (or on
two machines) are not bit-comparable: pair seeds made in one place. A report whose runs span
several kinds of machine (GPU model, or CPU model and thread count for CPU trainings; every
attempt of a resumed run) lists which runs ran where (JSON ``meta.runs_machines``) and warns of
each seed pair whose two runs ran on different kinds (``meta.machine_split_pairs``); runs whose
machine is not recorded are named (``meta.runs_machine_unrecorded``).

A run resumed after an interruption whose checkpoint_last.pt was cut off while fairseq
copied it resumes from the newest whole checkpoint (fairseq_ctx/checkpoint_repair.py).

    fairseq-ctx-quality-compare --updates 2000 --seeds 1 2 3 \\
        --out-dir work/quality --markdown work/quality/table.md

Tiny smoke budget (minutes on 2 CPU cores): ``--updates 20 --configs '00-*' '01-*'``.
"""
import argparse
import concurrent.futures
import contextlib
import functools
import glob
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time

from .atomic import atomic_write
from .checkpoint_repair import (
    FAIRSEQ_DONE, finished_at, finished_before_the_exit, restore_last_from_newest_whole, stored_updates,
    written_to_the_end,
)
from .evaluation.defaults import PAPER_DEFAULTS
from .families import FAMILY_ARCH, STOCK_ARCHS, family_of, first_of_family
from .paths import CONFIGS, PACKAGE_DIR, TATOEBA_SCRIPT, WORK_DIR, script_env
from .resumptions import resumptions_in_log
from .run_lock import RunInUse, RunLock, held_fds
from .reproduce.train import EXACT_RESUME_TASK, RESUMPTION_BREAKERS, option_value, read_args_file

DEMO = PAPER_DEFAULTS["demo"]  # evaluated with the demo's settings

TRANSLATIONS = ("hyps", "valid_hyps")  # a run's outputs (test, valid at the last update): kept out of reports


def arch_of(args):
    for i, a in enumerate(args):
        if a in ("--arch", "-a") and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--arch="):
            return a.split("=", 1)[1]
    raise ValueError(f"no --arch in {args}")


def baseline_warnings(configs, baselines):
    """What a reader of the comparison should know of its pairs (assign_baselines): a system with no
    baseline, or one compared with a stock arch other than the one its family's systems are built
    on (a Transformer-Big system with transformer_wmt_en_de_big_t2t, pre-norm with dropout 0.1:
    the difference mixes those settings with the mechanism)."""
    for name, base in baselines.items():
        arch = arch_of(configs[name])
        if base is None and arch not in STOCK_ARCHS:
            yield f"{name} has no baseline among the selected configs"
        elif base is not None and arch not in STOCK_ARCHS and arch_of(configs[base]) != FAMILY_ARCH[family_of(arch)]:
            yield (f"{name} ({arch}) is compared with {base} ({arch_of(configs[base])}), not with the stock arch "
                   f"its family is built on ({FAMILY_ARCH[family_of(arch)]})")


def assign_baselines(configs, pairs=None):
    """configs: {name: args}. Returns {name: baseline name or None (a baseline)}."""
    base_of_family = first_of_family([(name, arch_of(configs[name])) for name in sorted(configs)
                                      if arch_of(configs[name]) in STOCK_ARCHS])
    out = {}
    for name in configs:
        arch = arch_of(configs[name])
        if arch in STOCK_ARCHS and base_of_family.get(STOCK_ARCHS[arch]) == name:
            out[name] = None
        else:
            out[name] = base_of_family.get(family_of(arch))
    for text in pairs or []:
        sys_name, equals, base = text.partition("=")
        if not equals:
            raise ValueError(f"--pair {text}: SYSTEM=BASELINE, two config names")
        unknown = [n for n in (sys_name, base) if n not in configs]
        if unknown:
            raise ValueError(f"--pair {text}: {', '.join(map(repr, unknown))} not among the selected configs "
                             f"({', '.join(sorted(configs))})")
        out[sys_name] = base
    return out


# ---------------------------------------------------------------------------------------
# Training and evaluation (real)
# ---------------------------------------------------------------------------------------

def curve_interval(curve_updates):
    """--save-interval-updates that saves a checkpoint at every listed update count."""
    return functools.reduce(math.gcd, [int(u) for u in curve_updates])


def parse_curve_updates(text, updates):
    """'200,400,800' -> sorted update counts below ``updates`` (the final one is always
    on the curve: it is the final checkpoint)."""
    if not text:
        return []
    points = sorted({int(x) for x in re.split(r"[,\s]+", str(text).strip()) if x})
    bad = [u for u in points if u <= 0 or u > updates]
    if bad:
        raise ValueError(f"curve update counts {bad} are not within 1..{updates} (--updates)")
    return [u for u in points if u < updates]


# fairseq schedulers whose learning rate at an update depends on --max-update (cosine's
# period, tri_stage's phases) or on the validation history (reduce_lr_on_plateau)
MAX_UPDATE_SCHEDULES = ("cosine", "tri_stage", "reduce_lr_on_plateau")


# options under which fairseq's resumption of a training is not the training run through,
# beside those that break any resumption (reproduce.train.RESUMPTION_BREAKERS: --reset-*,
# --no-save-optimizer-state, a --restore-file read again at every start): state it does not
# save (the fp16 / amp loss scalers' overflow counters; bf16 not verified) or replaces
NOT_RESUMED_EXACTLY = ("--fp16", "--memory-efficient-fp16", "--bf16", "--memory-efficient-bf16", "--amp",
                       "--optimizer-overrides")


def continuation_blockers(words):
    """Why fairseq's continuation of a finished training of these arguments to a larger
    --max-update would not be the training run to that count from the start (empty: it would
    be): a schedule whose length is --max-update, --patience (its count is not saved),
    RESUMPTION_BREAKERS and NOT_RESUMED_EXACTLY ('--opt value' and '--opt=value' alike)."""
    flags = [w.split("=", 1)[0] for w in words]
    found = [o for o in (*RESUMPTION_BREAKERS, *NOT_RESUMED_EXACTLY) if o in flags
             and not (o == "--restore-file" and option_value(words, o) == "checkpoint_last.pt")]  # fairseq's default
    patience = option_value(words, "--patience")
    if patience is not None and patience.lstrip("-").isdigit() and int(patience) > 0:
        found.append(f"--patience {patience}")
    if lr_depends_on_max_update(words):
        found.append(f"--lr-scheduler {option_value(words, '--lr-scheduler')}")
    return found


def lr_depends_on_max_update(words):
    """True when the schedule of these training arguments changes with --max-update:
    cosine / tri_stage / reduce_lr_on_plateau, and polynomial_decay unless
    --total-num-update fixes its length (it defaults to --max-update)."""
    scheduler = option_value(words, "--lr-scheduler") or "fixed"
    if scheduler == "polynomial_decay":
        return option_value(words, "--total-num-update") is None
    return scheduler in MAX_UPDATE_SCHEDULES


def _child_env(threads=0, extra_env=None):
    """The environment of a training or measuring subprocess: this one's, plus ``extra_env``
    (CUDA_VISIBLE_DEVICES: one GPU), with ``threads`` OpenMP / MKL threads where given."""
    env = {**os.environ, **(extra_env or {})}
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def train(data_bin, common, arch_args, updates, seed, save_dir, log_path, threads=0,
          curve_updates=(), restore_file=None, extra_env=None, langs=None):
    """fairseq-train as scripts/demo.sh runs it. With ``curve_updates`` it also saves
    (and keeps) a checkpoint and validates every gcd(curve_updates) updates; with
    ``restore_file`` it starts from that checkpoint (optimizer, lr schedule, data position
    and per-update seeds are in it; the training runs as ``--task translation_exact_resume``
    unless the settings name a task, so on one machine (CPU, fp32) a continuation, in whatever
    epoch it starts, is bit-identical to an uninterrupted run (fairseq's ``translation``
    regroups the batches of a training resumed in epoch E > 1 with seed + E: a valid run of the
    seed, not the uninterrupted one; runs recorded before this task existed were resumed so); across
    machines CPU floating-point order differs too, so losses differ in the third digit). The log is appended to (a resumed training adds to the log of its first
    part). ``extra_env``: variables set for fairseq-train (CUDA_VISIBLE_DEVICES: one GPU).
    ``langs``: (source, target), passed as --source-lang / --target-lang (else fairseq takes
    the direction from the first file names it finds)."""
    extra = []
    if curve_updates:
        common = [c for c in common if c != "--disable-validation"]
        arch_args = [c for c in arch_args if c != "--disable-validation"]
        g = curve_interval(curve_updates)
        extra += ["--save-interval-updates", str(g), "--keep-interval-updates", "-1",
                  "--validate-interval-updates", str(g)]
    if restore_file:
        extra += ["--restore-file", os.path.abspath(restore_file)]
    if langs:
        extra += ["--source-lang", langs[0], "--target-lang", langs[1]]
    if not any(c == "--task" or c.startswith("--task=") for c in [*common, *arch_args]):
        extra += ["--task", EXACT_RESUME_TASK]  # resumptions in later epochs exact too
    cmd = [sys.executable, "-m", "fairseq_cli.train", data_bin, "--user-dir",
           PACKAGE_DIR, *common, *arch_args,
           "--max-update", str(updates), "--seed", str(seed), "--save-dir", save_dir, *extra]
    env = _child_env(threads, extra_env)
    t0 = time.time()
    with open(log_path, "a") as log:
        log.write(" ".join(shlex.quote(c) for c in cmd) + "\n")
        log.flush()
        started_at = log.tell()
        # the training holds its run's lock too: killing this driver does not free the directory
        p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=held_fds(save_dir))
    if p.returncode != 0:
        with open(log_path, errors="replace") as f:
            f.seek(started_at)
            this_attempt = f.read()
        done = finished_before_the_exit(save_dir, updates, this_attempt)
        if done is None:
            raise RuntimeError(f"training failed (rc {p.returncode}), log {log_path}:\n{this_attempt[-3000:]}")
        message = (f"fairseq-train exited {p.returncode} after it had finished (\"{FAIRSEQ_DONE}\", "
                   f"checkpoint_last.pt whole at update {done}): taken as finished")
        with open(log_path, "a") as log:
            log.write(f"[quality] {message}\n")
        print(f"[quality] {save_dir}: {message}", flush=True)
    return time.time() - t0


def build_errors(configs, common, data_bin, updates, langs, log=print):
    """{config: the error fairseq-train would stop with before its first update}, found
    before anything trains: each config's training options (as ``train`` passes them, with
    ``--max-update UPDATES``) parsed by fairseq's training parser and the model built by the
    translation task on DATA_BIN's dictionaries, on the meta device (shapes only: no
    weights, seconds for a whole study). A bad option in the fifth arm then stops the
    comparison at its start, not hours in. A config with its own ``--user-dir`` is not
    checked (said in the log): this process has the plugin imported already, and a second
    copy of it cannot be imported beside it. The options' conversion to fairseq's config, the
    lr scheduler and the criterion are checked too (``model_build_error``)."""
    from .reproduce.params import model_build_error

    errors = {}
    for name, arch_args in sorted(configs.items()):
        if "--user-dir" in arch_args or "--user-dir" in common:
            log(f"[quality] {name}: not built before training (it sets its own --user-dir)")
            continue
        argv = [data_bin, "--user-dir", PACKAGE_DIR, *common, *arch_args, "--max-update", str(updates),
                "--seed", "1", "--source-lang", langs[0], "--target-lang", langs[1]]
        error = model_build_error(argv)
        if error:
            errors[name] = error
    return errors


def evaluate(data_bin, ckpt, ref, beam, out_dir, src="zh", tgt="en", gen_args=(), subset="test", extra_env=None):
    """fairseq-ctx-evaluate with the demo's settings (this compares the demo's configs) and
    this run's beam, on ``subset`` (``ref``: its raw references); returns
    ({bleu, signature, sentences}, detokenised hypotheses)."""
    from fairseq_ctx.evaluation.command import evaluate as run_evaluate

    result = run_evaluate(["--paper", "demo", "--data", data_bin, "--path", ckpt, "--src", src, "--tgt", tgt,
                           "--subset", subset, "--ref", ref, "--beam", str(beam), "--out-dir", out_dir,
                           "--", *gen_args], extra_env)
    res = {"bleu": result["sacrebleu"]["bleu"], "signature": result["sacrebleu"]["signature"],
           "sentences": result["sentences"]}
    with open(os.path.join(out_dir, f"hyp.detok.{tgt}"), encoding="utf-8") as f:
        hyps = [line.rstrip("\n") for line in f]
    return res, hyps


def train_set_loss(data_bin, ckpt, log_path, threads=0, extra_env=None, langs=None, max_tokens=8192):
    """The loss of ``ckpt`` on the training subset and on valid, in one pass of
    ``python -m fairseq_ctx.analysis.subset_loss`` (eval mode, the training's criterion, fp32,
    one device; every sentence counted, the pairs fairseq-train left out left out the same way
    and counted): how well the model fits the sentences it was trained
    on, beside how well it does on held-out ones. It tells an architecture that fits its
    training data worse (optimisation, capacity) from one that fits it as well and generalises
    worse. Returns that module's JSON ({"checkpoint_updates", "device", "dtype", "subsets":
    {"train": {...}, "valid": {...}}})."""
    out_json = log_path[: -len(".log")] + ".out.json" if log_path.endswith(".log") else log_path + ".out.json"
    cmd = [sys.executable, "-m", "fairseq_ctx.analysis.subset_loss", "--path", ckpt, "--data", data_bin,
           "--subsets", "train,valid", "--max-tokens", str(max_tokens), "--json", out_json]
    if langs:
        cmd += ["--source-lang", langs[0], "--target-lang", langs[1]]
    env = _child_env(threads, extra_env)
    if os.path.exists(out_json):
        os.remove(out_json)
    with open(log_path, "w") as log:
        log.write(" ".join(shlex.quote(c) for c in cmd) + "\n")
        log.flush()
        p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    found = _read_json(out_json)
    if p.returncode != 0 or not found:
        text = _read_text(log_path) or ""
        raise RuntimeError(f"train-set loss failed (rc {p.returncode}), log {log_path}:\n{text[-3000:]}")
    return found


# ---------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------

def summarize(bleus):
    xs = list(bleus)
    defined = bool(xs) and all(x is not None and math.isfinite(x) for x in xs)
    return {  # None, not NaN, where there is nothing (the JSON stays strict)
        "bleu": xs,
        "mean": statistics.mean(xs) if defined else None,
        "std": (statistics.stdev(xs) if len(xs) > 1 else 0.0) if defined else None,
        "min": min(xs) if defined else None,
        "max": max(xs) if defined else None,
    }


def paired_bs(base_hyps, sys_hyps, refs, tgt="en", n_samples=1000):
    """Per-seed paired bootstrap (``evaluation.scoring.paired_test``), with its CIs."""
    from sacrebleu.metrics import BLEU

    from fairseq_ctx.evaluation.scoring import p_value_meaningful, paired_test, sacrebleu_tokenizer

    signature, b, s = paired_test(base_hyps, sys_hyps, refs, BLEU(tokenize=sacrebleu_tokenizer(tgt)), n_samples)
    return {"baseline_bleu": b.score, "system_bleu": s.score, "p_value": s.p_value,
            "p_value_meaningful": p_value_meaningful(b, s, n_samples),
            "system_mean": s.mean, "system_ci": s.ci, "baseline_mean": b.mean,
            "baseline_ci": b.ci, "signature": signature}


def compare(results, baselines, refs, tgt="en", n_samples=1000, alpha=0.05):
    """results: {config: {seed: {"bleu": x, "hyps": [...]}}} -> per-system comparisons."""
    from fairseq_ctx.analysis.seed_statistics import seed_difference

    out = {}
    for name, base in baselines.items():
        if base is None or name not in results or base not in results:
            continue
        seeds = sorted(set(results[name]) & set(results[base]))
        # the bootstrap needs both outputs: runs imported from a report have none (None)
        per_seed = {s: paired_bs(results[base][s]["hyps"], results[name][s]["hyps"], refs, tgt, n_samples)
                    if "hyps" in results[base][s] and "hyps" in results[name][s] else None
                    for s in seeds}
        tested = [p for p in per_seed.values() if p]
        diffs = [results[name][s]["bleu"] - results[base][s]["bleu"] for s in seeds]
        out[name] = {
            "baseline": base, "seeds": seeds,
            "mean_diff": statistics.mean(diffs) if diffs else None,
            "diffs": diffs,
            # seeds as the unit: mean difference, 95 % t CI, paired t and exact Wilcoxon
            "seed_level": seed_difference({s: results[name][s]["bleu"] for s in seeds},
                                          {s: results[base][s]["bleu"] for s in seeds}, alpha),
            "per_seed": per_seed,
            "bootstrap_seeds": [s for s in seeds if per_seed[s]],
            "significant_better": sum(1 for p in tested if p["p_value"] < alpha
                                      and p["system_bleu"] > p["baseline_bleu"]),
            "significant_worse": sum(1 for p in tested if p["p_value"] < alpha
                                     and p["system_bleu"] < p["baseline_bleu"]),
        }
    return out


def with_seed_and_sentence(comparisons, results, refs, valid_refs=None, tgt="en", alpha=0.05):
    """Adds comparisons[name]["seed_and_sentence"]: {set: interval under seed and sentence
    sampling (``analysis.seed_sentence_statistics``)} for "test", and with valid translations
    (--valid-bleu) for "valid" and both sets as one sample ("test+valid", post hoc: valid is
    the set to choose configs on), and comparisons[name]["set_gap"] (test - valid, against its
    sentence-sampling sd). A set some seed has no translations of (imported) gets a note."""
    from fairseq_ctx.analysis.seed_sentence_statistics import seed_and_sentence_difference, set_gap
    from fairseq_ctx.evaluation.scoring import bleu_of_statistics, sentence_statistics

    score = bleu_of_statistics(tgt)
    cache = {}

    def stats(name, seed, key, references):
        if (name, seed, key) not in cache:
            cache[name, seed, key] = sentence_statistics(results[name][seed][key], references, tgt)
        return cache[name, seed, key]

    sets = [("test", (("hyps", refs),))]
    if valid_refs is not None:
        sets += [("valid", (("valid_hyps", valid_refs),)), ("test+valid", (("hyps", refs), ("valid_hyps", valid_refs)))]
    for name, c in comparisons.items():
        base, seeds = c["baseline"], c["seeds"]
        out = {}
        for label, parts in sets:
            lacking = sorted({s for s in seeds for n in (name, base) for key, _ in parts
                              if results[n][s].get(key) is None})
            if lacking or not seeds:
                out[label] = {"note": f"seed(s) {', '.join(map(str, lacking))} have no stored translations of this "
                                      "set: no interval" if lacking else "no paired seeds"}
                continue
            if sum(len(r) for _, r in parts) < 2:  # the jackknife needs two sentences
                out[label] = {"note": "fewer than 2 sentences: no interval"}
                continue
            out[label] = seed_and_sentence_difference(
                {s: [row for key, r in parts for row in stats(name, s, key, r)] for s in seeds},
                {s: [row for key, r in parts for row in stats(base, s, key, r)] for s in seeds}, score, alpha)
        c["seed_and_sentence"] = out
        if "valid" in out:
            c["set_gap"] = set_gap(out["test"], out["valid"])
    return comparisons


def seed_and_sentence_markdown(comparisons):
    from scipy.stats import t as t_dist

    rows = [(name, c["baseline"], label, st) for name, c in sorted(comparisons.items())
            for label, st in (c.get("seed_and_sentence") or {}).items()]
    if not rows:
        return []
    lines = ["", "## Seeds and sentences both sampled", "",
             "Δ: mean over seeds of (system BLEU - baseline BLEU) with a 95 % interval for the expected difference on "
             "the population the sentences are drawn from, over training seeds: the variance of the per-seed "
             "differences (at least what the seed x sentence interaction alone implies) plus that of a sentence "
             "effect shared by the seeds (crossed seed x sentence design, each run's corpus BLEU linearised by the "
             "jackknife; t with Satterthwaite df; `fairseq_ctx/analysis/seed_sentence_statistics.py`). Beside it "
             "the seed-level interval, which holds these sentences fixed, and the sentence term's share of the variance (0 %*: estimated below zero, set "
             "to 0). F: seed over interaction mean square, with P(F ≤ it) if there were no seed effect (small: the "
             "per-seed differences agree more than the sentence-level noise implies, which the model does not "
             "expect). test+valid: corpus BLEU of both sets as one sample, post hoc (valid is the set to choose "
             "configs on).",
             "",
             "| config | baseline | set (sentences) | seeds | Δ [95% CI] seeds and sentences | df | p | seed level, "
             "sentences fixed [95% CI] | sentence term | F (P lower) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, base, label, st in rows:
        where = f"{label} ({st['n_sentences']})" if st.get("n_sentences") else label
        if st.get("ci_low") is None:
            mean = "-" if st.get("mean_diff") is None else f"{st['mean_diff']:+.2f}"
            lines.append(f"| {name} | {base} | {where} | {st.get('n_seeds') or ''} | {mean} ({st.get('note')}) "
                         "| | | | | |")
            continue
        # the seed-level interval (sentences fixed): t(S - 1) x the spread of the per-seed differences
        half = t_dist.ppf(1 - st["alpha"] / 2, st["n_seeds"] - 1) * st["seed_only_se"]
        share = st["variance_shares"]["sentence"]
        lines.append("| " + " | ".join([
            name, base, where, str(st["n_seeds"]),
            f"{st['mean_diff']:+.2f} [{st['ci_low']:+.2f}, {st['ci_high']:+.2f}]",
            "-" if st["df"] is None else f"{st['df']:.1f}", _f(st["p"], 3),
            f"{st['mean_diff']:+.2f} [{st['mean_diff'] - half:+.2f}, {st['mean_diff'] + half:+.2f}]",
            f"{100 * share:.0f} %" + ("*" if "sentence" in st["truncated"] else ""),
            "-" if st["seed_spread_f"] is None else f"{st['seed_spread_f']:.2f} ({st['seed_spread_p_lower']:.3f})",
        ]) + " |")
    gaps = [(name, c["set_gap"]) for name, c in sorted(comparisons.items()) if (c.get("set_gap") or {}).get("z") is not None]
    if gaps:
        lines += ["", "test - valid (mean over seeds of each seed's difference on test minus on valid; where both sets "
                      "are drawn from one pool they measure the same quantity, and under the model only sentence "
                      "sampling separates them):", ""]
        for name, g in gaps:
            lines.append(f"- {name}: {g['mean']:+.2f} (per seed {' / '.join(f'{x:+.2f}' for x in g['per_seed'])}); "
                         f"sentence-sampling sd {g['model_sd']:.2f}, z {g['z']:+.1f}, p {g['p']:.3g}"
                         + (": the sets differ more than sentence sampling explains, or the model misses a structure"
                            if g["p"] < 0.05 else ""))
    return lines


def _f(x, nd=2):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _bootstrap_p(paired):
    """A seed's bootstrap p, or "n/a" where no resample differs (sacreBLEU's floor p, not evidence)."""
    if paired and paired.get("p_value_meaningful") is False:
        return "n/a (equal)"
    return _f((paired or {}).get("p_value"), 3)


def _ci(st, nd=2):
    if st.get("ci_low") is None:  # one seed, no spread, or a diverged seed: the mean alone (or -)
        return "-" if st.get("mean_diff") is None else f"{st['mean_diff']:+.{nd}f}"
    return f"{st['mean_diff']:+.{nd}f} [{st['ci_low']:+.{nd}f}, {st['ci_high']:+.{nd}f}]"


def _detectable(st, nd=2):
    """The |mean difference| the seed-level t-test finds with 80 % power (its sd taken as true)."""
    return "-" if st.get("detectable_80") is None else f"{st['detectable_80']:.{nd}f}"


def _detectable_note(n_seeds):
    from fairseq_ctx.analysis.seed_statistics import sd_factor_interval

    note = ("80 % power at: the true |mean difference| a paired t-test over these seeds finds (two-sided "
            "p < 0.05) in 4 runs of 5, taking the observed sd of the per-seed differences as the true one "
            "(`seed_statistics.detectable_difference`). A design figure for the next study, not a bound on the "
            "difference observed (its CI is that): 'not separated' is not 'about 0'; about 0 within a margin "
            "needs the 90 % CI inside it (two one-sided tests, `seed_statistics.equivalence_test`), and a "
            "margin narrower than this figure is rarely met.")
    if n_seeds >= 2:
        low, high = sd_factor_interval(n_seeds)
        note += (f" With {n_seeds} seeds the true sd is within {low:.2f}-{high:.2f} times the observed one (95 %), "
                 "more often above it than below: the figure is optimistic more often than not.")
    return note


def _p_wilcoxon(st):
    if st.get("p_wilcoxon") is None:
        return "-"
    # four significant digits: exact p-values are multiples of 1 / 2^(n-1) (5 seeds: 0.0625,
    # which three decimals would print as 0.062, below the floor the footnote gives)
    return f"{st['p_wilcoxon']:.4g}" + ("" if st.get("wilcoxon_can_reach_alpha") else " †")


def _import_source_note(source):
    if not source:
        return ""
    note = (f" (git {(source.get('git_commit') or 'unknown')[:12]}, torch {source.get('torch')}, "
            f"fairseq {source.get('fairseq')}, sacrebleu {source.get('sacrebleu')}")
    if not source.get("data_verified"):
        note += "; training data not verified: the report predates data fingerprints, only its test references are checked"
    return note + ")"


def markdown(summary, comparisons, baselines, meta, curves=None, curve_comparisons=None,
             curve_png=None):
    lines = [
        f"# Quality on real data (Tatoeba zh-en, {meta['updates']} updates, seeds "
        f"{', '.join(map(str, meta['seeds']))})",
        "",
        f"- date: {meta['date']}; data: `{meta['data']}` ({meta['test_sentences']} test sentences); "
        f"beam {meta['beam']}; training settings: `{meta['common']}`",
        "- BLEU: sacreBLEU on detokenised output vs raw references (see signature in the JSON).",
        "- Seed level (the unit is the training run): Δ = mean over seeds of (system BLEU - "
        "baseline BLEU), paired by seed, with its 95 % t-distribution confidence interval; "
        "p t: paired t-test; p W: exact two-sided Wilcoxon signed-rank test; seeds + / -: "
        "seeds where the system scored higher / lower.",
        f"- {_detectable_note(len(meta['seeds']))}",
        "- p bootstrap: sacreBLEU paired bootstrap (1000 resamples) vs the baseline, per seed. It "
        "tests test-set sampling for fixed outputs, not seed-to-seed variance.",
        *(f"- imported from `{src}` (same settings, trained elsewhere or earlier): "
          + "; ".join(f"{n} seeds {', '.join(map(str, ss))}" for n, ss in sorted(runs.items()))
          + _import_source_note((meta.get("import_sources") or {}).get(src))
          + ". A report keeps no translations, so these seeds have no bootstrap (-)."
          for src, runs in sorted((meta.get("imported") or {}).items())),
        *(f"- of these, first imported (by the report named above) from `{src}`: "
          + "; ".join(f"{n} seeds {', '.join(map(str, ss))}" for n, ss in sorted(runs.items())) + "."
          for src, runs in sorted((meta.get("imported_first") or {}).items())),
        *([f"- seed pairs trained in different places (one run imported, or from two reports): "
           f"{'; '.join(meta['mixed_pairs'])}."] if meta.get("mixed_pairs") else []),
        *([f"- **warning: runs trained with different model code** (SHA-256 of fairseq_ctx/models and modules; "
           f"this report's code {meta.get('model_code')}): "
           + "; ".join(f"{code}: {', '.join(runs)}" for code, runs in sorted(meta["model_code_runs"].items()))
           + ". Their differences may be the code's, not the configs'."]
          if meta.get("model_code_runs") else []),
        *([f"- the versions in this report's meta (torch {meta.get('torch')}, fairseq {meta.get('fairseq')}) are "
           "those of the process that wrote it, not of every run: the runs were trained with "
           + "; ".join(f"{what}: {', '.join(runs)}" for what, runs in sorted(meta["runs_software"].items()))
           + " (each run's `trained_with` in the JSON)."]
          if meta.get("runs_software") else []),
        *([f"- runs trained on more than one kind of machine (GPU model, or CPU model and thread count: "
           f"floating-point order, and so each run's trajectory, differs between them; each run's "
           f"`trained_with` in the JSON):"]
          + [f"  - {m}: {_runs_in_short(runs)}" for m, runs in sorted(meta["runs_machines"].items())]
          if meta.get("runs_machines") else []),
        *([f"- **warning: seed pairs whose two runs were trained on different kinds of machine** (their "
           f"paired difference includes the machine's): {'; '.join(meta['machine_split_pairs'])}."]
          if meta.get("machine_split_pairs") else []),
        *([f"- **runs resumed with other batches than the uninterrupted training's** (mostly fairseq's "
           "`translation` resumed in a later epoch: it groups the sentences again with --seed + the epoch; "
           "`--task translation_exact_resume` does not): from there on valid runs of their seeds, not the runs "
           "trained through, and no longer seeing their pair's batches unless that run was resumed the same way: "
           f"{'; '.join(meta['runs_regrouped'])}."]
          if meta.get("runs_regrouped") else []),
        *([f"- runs whose batches after a resumption are not known to be the uninterrupted training's (resumed "
           f"under another task than `translation` / `translation_exact_resume`, or imported from a report that "
           f"did not record resumptions): {'; '.join(meta['runs_regrouping_unknown'])}."]
          if meta.get("runs_regrouping_unknown") else []),
        *([f"- {len(meta['runs_machine_unrecorded'])} run(s) with a training attempt whose kind of machine "
           f"cannot be told (a GPU the probe could not name, or one GPU of a node of mixed models), left out "
           f"of the machine checks: {', '.join(meta['runs_machine_unrecorded'])}."]
          if meta.get("runs_machine_unrecorded") else []),
        *([f"- {len(meta['runs_software_unrecorded'])} run(s) with no record of the software or GPU they were "
           f"trained with: {', '.join(meta['runs_software_unrecorded'])}."]
          if meta.get("runs_software_unrecorded") else []),
        *([f"- {len(meta['model_code_unrecorded'])} run(s) of fairseq_ctx architectures trained before the model "
           "code was recorded: whether their code equals the others' is not checked."]
          if meta.get("model_code_unrecorded") else []),
        "",
        "| config | baseline | BLEU per seed | mean | std | Δ mean vs baseline [95% CI] | p t | p W "
        "| seeds + / - | p bootstrap per seed | sig. better / worse (bootstrap p<0.05) | 80 % power at |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    small_n = set()
    for name in sorted(summary):
        s = summary[name]
        c = comparisons.get(name)
        st = (c or {}).get("seed_level") or {}
        if c and st.get("p_wilcoxon") is not None and not st.get("wilcoxon_can_reach_alpha"):
            small_n.add((st["wilcoxon_n"], st["wilcoxon_min_p"]))
        lines.append("| " + " | ".join([
            name, baselines.get(name) or "(baseline)",
            " / ".join(_f(b) for b in s["bleu"]), _f(s["mean"]), _f(s["std"]),
            (_ci(st) if st else _f(c["mean_diff"])) if c else "",
            _f(st.get("p_t"), 3) if c else "",
            _p_wilcoxon(st) if c else "",
            f"{st['better']} / {st['worse']}" if c and st and st.get("better") is not None else "",
            " / ".join(_bootstrap_p(c["per_seed"][k]) for k in c["seeds"]) if c else "",
            (f"{c['significant_better']} / {c['significant_worse']}"
             + (f" of {len(c['bootstrap_seeds'])}" if len(c["bootstrap_seeds"]) < len(c["seeds"]) else ""))
            if c else "",
            _detectable(st) if c else "",
        ]) + " |")
    for n, min_p in sorted(small_n):
        lines.append("")
        lines.append(f"† {n} non-zero seed difference{'s' if n != 1 else ''}: the exact Wilcoxon test "
                     f"cannot give a two-sided p below {min_p:.3g}, so it cannot reach p < 0.05 "
                     "(that needs at least 6 seeds); read it as 'no evidence either way'.")
    lines += seed_and_sentence_markdown(comparisons)
    if curves:
        lines += curve_markdown(curves, curve_comparisons or {}, baselines, meta, curve_png)
    return "\n".join(lines) + "\n"


def _cell(curve, u, nd=2):
    if not curve or u not in curve["updates"]:
        return ""
    i = curve["updates"].index(u)
    if curve["mean"][i] is None:  # a seed diverged there
        return f"non-finite (seed {', '.join(map(str, (curve.get('non_finite') or {}).get(str(u), [])))})"
    return f"{curve['mean'][i]:.{nd}f} ({curve['min'][i]:.{nd}f}-{curve['max'][i]:.{nd}f})"


def curve_markdown(curves, curve_comparisons, baselines, meta, curve_png=None):
    bleu_updates = sorted({u for c in curves.values() for u in (c.get("bleu") or {}).get("updates", [])})
    valid_updates = sorted({u for c in curves.values() for u in (c.get("valid_loss") or {}).get("updates", [])})
    lines = ["", "## Learning curves", "",
             f"Mean over seeds (min-max) at each update count. BLEU: the same evaluation as the "
             f"final score (all {meta['test_sentences']} test sentences, beam {meta['beam']}); "
             "valid loss: fairseq's label-smoothed loss on the valid subset (base 2), read from "
             "each run's train.log; valid BLEU (where scored, --valid-bleu): the same evaluation on "
             "the valid subset, the one to choose among configs on (then report test once). "
             "Δ rows: seed-paired mean difference system - baseline "
             "[95% t CI]; 80 % power rows: the true |difference| that t-test finds with 80 % power at "
             "that update count (a design figure, not a bound: the note at the top; '-': fewer than 2 seeds "
             "or no spread in the per-seed differences). Where BLEU was scored at several update counts, "
             "the valid-loss table shows those; the JSON and the plot have every validation." + (f" Plot: `{curve_png}`." if curve_png else "")
             + (f" Training for the curve: {meta['curve_training']}." if meta.get("curve_training") else "")]
    def updates_of(metric):
        return sorted({u for c in curves.values() for u in (c.get(metric) or {}).get("updates", [])})

    for metric, title, ups, nd in (("bleu", "BLEU", bleu_updates, 2),
                                   ("valid_loss", "Valid loss", valid_updates, 3),
                                   ("valid_bleu", "Valid BLEU", updates_of("valid_bleu"), 2)):
        if metric == "valid_loss" and len(bleu_updates) > 1:
            # the JSON and the plot have every validation; the table the BLEU points
            ups = [u for u in ups if u in bleu_updates] or ups
        if not ups:
            continue
        lines += ["", f"### {title}", "",
                  "| config | baseline | " + " | ".join(str(u) for u in ups) + " |",
                  "|---|---|" + "---|" * len(ups)]
        for name in sorted(curves):
            cur = curves[name].get(metric)
            if not cur or not cur.get("updates"):
                continue
            lines.append(f"| {name} | {baselines.get(name) or '(baseline)'} | "
                         + " | ".join(_cell(cur, u, nd) for u in ups) + " |")
            diff = (curve_comparisons.get(name) or {}).get(metric)
            if diff:
                lines.append(f"| Δ {name} | {baselines.get(name)} | "
                             + " | ".join(_ci(diff[u], nd) if u in diff else "" for u in ups) + " |")
                lines.append(f"| 80 % power, {name} | {baselines.get(name)} | "
                             + " | ".join(_detectable(diff[u], nd) if u in diff else "" for u in ups) + " |")
    return lines


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------

def _strict(obj):
    """obj with every non-finite float (a diverged loss read from a log) as None: strict JSON,
    which jq and JavaScript read too (Python's json writes Infinity / NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


def _write_json(path, obj):
    """A result counts as done only when complete: written aside, then renamed."""
    with atomic_write(path) as f:
        json.dump(_strict(obj), f, allow_nan=False)


def _software():
    """What produced the numbers: this checkout's commit (None for an installed copy) and
    the versions that change them (CPU floating-point order aside)."""
    import fairseq
    import sacrebleu
    import torch

    from .reproduce.runner import git_commit

    return {"git_commit": git_commit(), "model_code": model_code_sha256(), "torch": torch.__version__,
            "fairseq": fairseq.__version__, "sacrebleu": sacrebleu.__version__, "python": sys.version.split()[0]}


def model_code_sha256(package_dir=PACKAGE_DIR):
    """SHA-256 (16 hex digits) of the code that defines what a training computes:
    fairseq_ctx/models and fairseq_ctx/modules, every .py file by relative path and content.
    The git commit alone misses edits not committed and installed copies (no .git)."""
    digest = hashlib.sha256()
    for part in ("models", "modules"):
        root = os.path.join(package_dir, part)
        for folder, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            # editors' lock files (.#name.py: dangling links) and other non-files are not code
            for name in sorted(f for f in files if f.endswith(".py") and not f.startswith(".")):
                path = os.path.join(folder, name)
                if not os.path.isfile(path):
                    continue
                digest.update(os.path.relpath(path, package_dir).replace(os.sep, "/").encode() + b"\0")
                with open(path, "rb") as handle:
                    digest.update(handle.read() + b"\0")
    return digest.hexdigest()[:16]


def _recorded_attempts(rec):
    """Every recorded attempt of a run: the one that finished (trained_with) and the earlier
    ones a resumed training continued."""
    return [a for a in [rec.get("trained_with"), *(rec.get("earlier_attempts") or [])] if isinstance(a, dict)]


def runs_by_model_code(results, names):
    """({model_code: ["CONFIG seed S", ...]}, ["CONFIG seed S", ...] with no record) over
    every attempt (trained_with and the earlier attempts a resumed training continued) of the
    runs of the configs ``names`` (those of fairseq_ctx architectures: stock runs never
    execute that code)."""
    out, unrecorded = {}, []
    for name in sorted(set(names) & set(results)):
        for seed, rec in sorted(results[name].items()):
            codes = sorted({a.get("model_code") for a in _recorded_attempts(rec)} - {None})
            for code in codes:
                out.setdefault(code, []).append(f"{name} seed {seed}")
            if not codes:
                unrecorded.append(f"{name} seed {seed}")
    return out, unrecorded


SOFTWARE_OF_A_RUN = ("torch", "fairseq", "sacrebleu", "python")


def runs_by_software(results, this_software, this_gpu):
    """({"torch X, fairseq Y, sacrebleu Z, python P, on GPU G" (or ", no GPU"): ["CONFIG seed S",
    ...]} over every attempt of every run (trained_with and the earlier attempts a resumed
    training continued), or None when every attempt names this process's versions and the
    model of ``this_gpu`` (one of its models on a node of mixed GPUs: a run pinned to one of
    them); ["CONFIG seed S", ...] with no record). The versions in a report's meta are
    those of the process writing it: for runs reused or imported from another machine (a GPU
    lease whose report is assembled on a CPU) they are not what trained them."""
    def describe(versions, gpu):
        return ", ".join(f"{k} {v}" for k, v in zip(SOFTWARE_OF_A_RUN, versions)) + (
            f", on {gpu}" if gpu else ", no GPU")

    this_model = _gpu_model(this_gpu)
    here = describe(tuple(this_software.get(k) for k in SOFTWARE_OF_A_RUN), this_model)

    def model_of(attempt):
        model = _gpu_model(attempt.get("gpu"))
        return this_model if model and this_model and model in this_model.split(" + ") else model

    out, unrecorded = {}, []
    for name in sorted(results):
        for seed, rec in sorted(results[name].items()):
            attempts = _recorded_attempts(rec)
            if not attempts:
                unrecorded.append(f"{name} seed {seed}")
            for attempt in attempts:
                runs = out.setdefault(describe(tuple(attempt.get(k) for k in SOFTWARE_OF_A_RUN), model_of(attempt)), [])
                if f"{name} seed {seed}" not in runs:
                    runs.append(f"{name} seed {seed}")
    return (out if set(out) - {here} else None), unrecorded


def _gpu_model(gpu):
    """The GPU model(s) of a recorded GPU string (a run's or this process's), without how
    many were visible or which one a run was pinned to; None for none. Which hardware, not
    how a training used it (that is ``_machine_of``'s)."""
    if not gpu:
        return None
    return re.sub(r" \(x\d+ visible\)$", "", gpu.split(", this run on ")[0]) or None


# what the GPU probe records where it could not name the GPU (see _ask_for_gpus)
_UNNAMED_GPU = ("unknown (", "unnamed GPU")


def _machine_of(attempt):
    """The kind of machine one training attempt ran on, as far as its floating-point order
    goes: its GPU model ("NAME (xN visible)" for an unpinned run on a node of several: a
    data-parallel training over all of them), or "CPU <model>, N thread(s)" for a CPU
    training (the thread count splits sums differently; a record from before the GPU was
    recorded says so). None where it cannot be told: a GPU the probe could not name, a run
    pinned to one GPU of a node of mixed models whose own model was not read."""
    gpu = attempt.get("gpu") or ""
    if ", this run on CUDA_VISIBLE_DEVICES=" in gpu:  # pinned to one GPU of the node's
        gpu = _gpu_model(gpu) or ""
        if " + " in gpu:
            return None
    if gpu:
        return None if any(part.startswith(_UNNAMED_GPU) for part in gpu.split(" + ")) else gpu
    if not attempt.get("cpu"):
        return None
    threads = attempt.get("threads")
    return (f"CPU {attempt['cpu']}, "
            + (f"{threads} thread{'s' if threads != 1 else ''}" if isinstance(threads, int) else f"threads {threads}")
            + ("" if "gpu" in attempt else " (GPU not recorded)"))


def runs_by_machine(results, baselines):
    """({machine: ["CONFIG seed S", ...]} when the runs of ``results`` (every recorded
    attempt) span more than one kind of machine (``_machine_of``), else None; ["SYSTEM vs
    BASELINE seed S: MACHINES / MACHINES", ...] for the seed pairs whose two runs ran on
    different kinds (of the attempts whose kind is known); ["CONFIG seed S", ...] with an
    attempt whose kind cannot be told). Floating-point order, and so a run's trajectory,
    differs between CPU and GPU models: a seed-paired difference across two kinds of machine
    includes the machine's."""
    out, of_run, unknown = {}, {}, []
    for name in sorted(results):
        for seed, rec in sorted(results[name].items()):
            kinds = [_machine_of(a) for a in _recorded_attempts(rec)]
            machines = sorted(set(kinds) - {None})
            of_run[(name, seed)] = machines
            for machine in machines:
                out.setdefault(machine, []).append(f"{name} seed {seed}")
            if None in kinds:  # (a run with no recorded attempt is named as unrecorded software instead)
                unknown.append(f"{name} seed {seed}")
    split = [f"{n} vs {b} seed {s}: {' + '.join(of_run[(n, s)])} / {' + '.join(of_run[(b, s)])}"
             for n, b in sorted(baselines.items()) if b
             for (name, s) in sorted(of_run) if name == n and of_run.get((b, s))
             and of_run[(n, s)] and of_run[(n, s)] != of_run[(b, s)]]
    return (out if len(out) > 1 else None), split, unknown


def _runs_in_short(runs):
    """["CONFIG seed S", ...] as "CONFIG seeds S1, S2; CONFIG2 seeds ..." (in the order given)."""
    by_name = {}
    for run in runs:
        name, seed = run.rsplit(" seed ", 1)
        by_name.setdefault(name, []).append(seed)
    return "; ".join(f"{n} seed{'s' if len(ss) > 1 else ''} {', '.join(ss)}" for n, ss in by_name.items())


def data_fingerprint(data_bin):
    """SHA-256 over what fairseq reads from DATA_DIR/bin (dictionaries, binarised splits), so
    that a report names its data exactly; None when there is no such file."""
    h = hashlib.sha256()
    paths = sorted(glob.glob(os.path.join(data_bin, "dict.*.txt")) + glob.glob(os.path.join(data_bin, "*.bin"))
                   + glob.glob(os.path.join(data_bin, "*.idx")))
    for path in paths:
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest() if paths else None


def binarised_sentences(data_bin, split, src, tgt):
    """(how many sentences fairseq will translate from DATA_BIN's SPLIT, the index file
    counted): the source side, named {split}.{src}-{tgt}.{src} or, as fairseq's translation
    task also accepts, {split}.{tgt}-{src}.{src}. The count is None for a format not read
    here (raw text, ...), "missing" when neither name has a readable binarised split."""
    from fairseq.data import indexed_dataset

    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        prefix = os.path.join(data_bin, f"{split}.{pair}.{src}")
        impl = indexed_dataset.infer_dataset_impl(prefix)
        if impl is not None:
            count = len(indexed_dataset.make_dataset(prefix, impl=impl)) if impl in ("mmap", "cached") else None
            return count, prefix + ".idx"
        if os.path.exists(prefix + ".idx") or os.path.exists(prefix + ".bin"):
            return "missing", f"{prefix}.idx / .bin (one of them missing or unreadable)"
    return "missing", os.path.join(data_bin, f"{split}.{src}-{tgt}.{src}.idx")


# what must agree between an imported report and this comparison besides each run's settings
IMPORT_MUST_MATCH = ("torch", "fairseq", "sacrebleu")


_GPU_PROBE = {}


def _probe_gpus():
    """(the first visible GPU's name or None, how many are visible), asked once per process
    in a short-lived subprocess: in the driver, CUDA would hold a context (GPU memory) for
    the whole comparison. A failed probe gives ("unknown (why)", 0), kept as well (a probe
    that timed out is not waited for again at every run)."""
    if "result" not in _GPU_PROBE:
        _GPU_PROBE["result"] = _ask_for_gpus()
    return _GPU_PROBE["result"][:2]


def _probe_gpu_names():
    """Every visible GPU's name, in CUDA's order (empty when none or the probe failed)."""
    _probe_gpus()
    result = _GPU_PROBE["result"]
    return list(result[2]) if len(result) > 2 else []


_PROBE_MARK = "fairseq-ctx-gpus:"


def _ask_for_gpus():
    # the names as one marked JSON line: torch may print warnings around it, and a crash at
    # exit (CUDA teardown) after the line is printed does not lose the answer; a GPU whose
    # name cannot be read is still counted (fairseq-train would use it)
    probe = ("import json, torch\n"
             "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
             "def name(i):\n"
             "    try:\n"
             "        return torch.cuda.get_device_name(i)\n"
             "    except Exception as error:\n"
             "        return f'unnamed GPU (its name could not be read: {type(error).__name__})'\n"
             f"print({_PROBE_MARK!r} + json.dumps([name(i) for i in range(n)]), flush=True)\n")
    try:
        p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "unknown (the GPU probe timed out)", 0, []
    marked = [line[len(_PROBE_MARK):] for line in p.stdout.splitlines() if line.startswith(_PROBE_MARK)]
    try:
        names = json.loads(marked[-1]) if marked else None
    except ValueError:
        names = None
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        why = p.stderr.strip().splitlines()[-1:] or f"exit status {p.returncode}, output {p.stdout.strip()!r}"
        return f"unknown (the GPU probe failed: {why})", 0, []
    return (names[0] if names else None), len(names), names


def _visible_gpu():
    """The GPU fairseq-train would use: the first visible one's name, with the number
    visible when there are several, or None (see ``_probe_gpus``)."""
    name, count = _probe_gpus()
    if count > 1:  # every model on a node of mixed GPUs (a data-parallel run trains on all of them)
        return f"{' + '.join(sorted(set(_probe_gpu_names())) or [name])} (x{count} visible)"
    return name


def _pinned_gpu_name(gpus, device):
    """The model of the GPU a run pinned to ``device`` (one of ``gpus``, in the order the
    probe saw them) trains on, or None where the probe cannot tell (MIG entries: a process
    sees only the first one listed, so the probe names one)."""
    names = _probe_gpu_names()
    if gpus and device in gpus and len(names) == len(gpus):
        return names[list(gpus).index(device)]
    return None


def gpus_to_spread_over(all_gpus_per_run=False, log=print):
    """The CUDA_VISIBLE_DEVICES values to give runs one each, or None (one GPU or none
    visible, or ``all_gpus_per_run``). fairseq-train trains on every visible GPU by default
    (distributed_world_size = device count): on a multi-GPU node each run would then be
    data-parallel with N times the tokens per update of the settings' one-device batch,
    and concurrent runs would share all GPUs. Entries of an existing CUDA_VISIBLE_DEVICES
    (indices, UUIDs) are kept as written; MIG instances (a process sees only the first one
    listed, so the probe counts one) are spread over as listed."""
    _, count = _probe_gpus()
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if all_gpus_per_run:
        return None
    if len(listed) > 1 and any(d.startswith("MIG-") for d in listed):
        return listed
    if count < 2:
        return None
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        return [str(i) for i in range(count)]
    if len(listed) != count:
        log(f"[quality] warning: CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']} lists {len(listed)} "
            f"devices but {count} are visible: runs are not given one GPU each (each trains on all {count})")
        return None
    return listed


class GpuSlots:
    """One GPU per run, to runs in flight: the least busy one (the first of equals), so
    --jobs N on N GPUs puts one run on each, and more jobs than GPUs share them evenly."""

    def __init__(self, devices=None):
        self.busy = dict.fromkeys(devices or (), 0)
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def one(self, words):
        """The device for one run (None: not pinned; also for a run whose settings say --cpu
        or set --distributed-world-size, which one GPU could not give)."""
        if not self.busy or "--cpu" in words or any(w.split("=")[0] == "--distributed-world-size" for w in words):
            yield None
            return
        with self.lock:
            device = min(self.busy, key=self.busy.get)
            self.busy[device] += 1
        try:
            yield device
        finally:
            with self.lock:
                self.busy[device] -= 1


def _default_threads():
    """The intra-op threads a subprocess given no --threads trains with: OMP_NUM_THREADS where
    the environment sets it (the subprocess inherits it), else torch's default (one per
    physical core), as a number, so that it compares with a --threads N run."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    import torch

    return torch.get_num_threads()


def _run_provenance(threads, words=(), device=None, device_name=None):
    """Where and with what one training ran (written when it starts; a resumed training
    records where it was resumed): CPU floating-point order differs between machines and
    thread counts, so runs are comparable bit for bit only with equal values here."""
    import platform

    cpu = platform.processor() or None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    # fairseq-train runs on the first visible GPU unless the settings (words) say --cpu
    gpu = None if "--cpu" in words else _visible_gpu()
    if gpu is not None and device is not None:
        # on a node of mixed GPUs, the pinned one's model, not the first visible one's
        where = f"this run on CUDA_VISIBLE_DEVICES={device} (one GPU per run)"
        gpu = f"{device_name}, {where}" if device_name else f"{gpu}, {where}"
    return {"host": platform.node(), "cpu": cpu, "gpu": gpu, "threads": threads or _default_threads(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            **_software()}


def _read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _read_lines(path):
    # text mode, as every study's test_refs_sha256 was computed (a BOM kept): reading these
    # references another way would refuse the runs it imports (the demo data has neither BOM nor "\r")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


_WHOLE_SETTINGS = re.compile(r"^(updates=\S+) beam=\S+ (common=.*) gen=.*?( gpus_per_run=\d+)?( args=.*)$")


def _as_training_key(settings):
    """The training key (see ``run``'s training_settings) of a key written before training
    and scoring settings were told apart (the whole settings: beam and gen= inside), so
    that kept checkpoints of such runs are scored again rather than deleted and retrained."""
    m = _WHOLE_SETTINGS.match(settings or "")
    return f"{m.group(1)} {m.group(2)}{m.group(3) or ''}{m.group(4)}" if m else settings


def _resumed_at_update(log_path):
    """The update count fairseq's last "Loaded checkpoint ... @ N updates" line names."""
    try:
        with open(log_path) as f:
            found = re.findall(r"Loaded checkpoint .* @ (\d+) updates", f.read())
    except OSError:
        return None
    return int(found[-1]) if found else None


def _resumptions_in(log_path, settings):
    """Every resumption (``resumptions_in_log``) of the training that ``log_path`` logs;
    ``settings``: its run record's "updates=N ... common=--opt ... args=--arch ..." (the data is
    one directory here, never shards)."""
    return resumptions_in_log(log_path, re.split(r"[\s=]+", settings or ""))


def _resumptions_of_run(run_dir, settings):
    """Every resumption of the run's training, from its train.log."""
    return _resumptions_in(os.path.join(run_dir, "train.log"), settings)


def _side_resumption(run_dir, u, settings, every=False):
    """The resumption of the latest side training to ``u`` updates (``recover_checkpoint``; its
    log RUN/train.to{u}.log is appended to by each side training of the point), as a list; with
    ``every``, those of all of them (a point scored before its side training's resumption was
    recorded with it: which one made its checkpoint is not known)."""
    found = _resumptions_in(os.path.join(run_dir, f"train.to{u}.log"), settings)
    return found if every else found[-1:]


def runs_regrouped(results, seeds):
    """(["CONFIG seed S (at N updates, epoch E, TASK: why)", ...] whose batches after a resumption
    were not the uninterrupted training's, [the same where the log cannot tell]), over the runs of
    ``seeds``: their trainings and the side trainings of curve points (``recover_checkpoint``)."""
    regrouped, unknown = [], []
    for name in sorted(results):
        for seed in seeds:
            rec = results[name].get(seed) or {}
            if rec and "resumptions" not in rec:  # a run imported from a report written before they were read
                unknown.append(f"{name} seed {seed} (imported from {rec.get('imported_from')}: resumptions not recorded)")
            side = sorted({(u, json.dumps(r, sort_keys=True)) for part in ("curve", "valid_bleu")
                           for u, p in (rec.get(part) or {}).items() for r in p.get("resumptions") or []})
            for u, r in [(None, r) for r in rec.get("resumptions") or []] + [(u, json.loads(r)) for u, r in side]:
                where = (f"{name} seed {seed} ({f'the side training of its point {u}: ' if u else ''}at {r['update']} "
                         f"updates, epoch {r['epoch']}, {r['task'] or 'task not logged'}"
                         + (f": {r['why']}" if r.get("why") else "") + ")")
                if r.get("batches_as_uninterrupted") is False:
                    regrouped.append(where)
                elif r.get("batches_as_uninterrupted") is None:
                    unknown.append(where)
    return regrouped, unknown


def _training_seconds(log_path):
    """fairseq's last "done training in X seconds" of the log (the attempt that finished), or
    0.0 when the log does not say."""
    try:
        with open(log_path) as f:
            found = re.findall(r"done training in ([\d.]+) seconds", f.read())
    except OSError:
        return 0.0
    return float(found[-1]) if found else 0.0


# scores of the checkpoint at U updates: test in RUN/curve/updU, valid in RUN/valid/updU
POINT_DIRS = {"test": "curve", "valid": "valid"}
# a run record's {updates: ...} entries
CURVE_KEYS = ("curve", "valid", "valid_bleu", "train_loss", "fit_gap")


def _point_path(run_dir, u, subset="test"):
    return os.path.join(run_dir, POINT_DIRS[subset], f"upd{u}", "result.json")


def _checkpoints_by_update(save_dir):
    from fairseq_ctx.analysis.learning_curves import checkpoints_by_update

    return checkpoints_by_update(save_dir)


def _other_length(run_dir, updates, key_at):
    """The update count of an earlier training of this run with the same settings but another
    --updates (its result.json, trained.json or started.json says so; ``key_at(n)``: the
    training key at n updates), or None."""
    for path in (os.path.join(run_dir, "result.json"), os.path.join(run_dir, "checkpoints", "trained.json"),
                 os.path.join(run_dir, "checkpoints", "started.json")):
        key = _as_training_key((_read_json(path) or {}).get("settings"))
        m = re.match(r"updates=(\d+) ", key or "")
        if m and int(m.group(1)) != updates and key == key_at(int(m.group(1))):
            return int(m.group(1))
    return None


def _done_points(run_dir, settings, subset="test"):
    """Points of this run already scored on ``subset`` with these settings: {updates: record}."""
    out = {}
    for path in glob.glob(os.path.join(run_dir, POINT_DIRS[subset], "upd*", "result.json")):
        rec = _read_json(path)
        if rec and rec.get("settings") == settings:
            out[int(rec["updates"])] = rec
    return out


def _train_loss_path(run_dir, u):
    return os.path.join(run_dir, "train_loss", f"upd{u}.json")


def _train_loss_points(run_dir, key_at):
    """This run's train-set losses (--train-loss), {updates: record}, each measured on a
    checkpoint of the training this run's settings give at that update count (``key_at(n)``:
    the training key at n updates; a continued kept training keeps its shorter one's)."""
    out = {}
    for path in glob.glob(os.path.join(run_dir, "train_loss", "upd*.json")):
        if not re.fullmatch(r"upd\d+\.json", os.path.basename(path)):  # (not the measurement's own output)
            continue
        rec = _read_json(path)
        if (rec and isinstance(rec.get("updates"), int) and rec.get("settings") == key_at(rec["updates"])
                and isinstance(rec.get("train"), dict) and isinstance(rec.get("valid"), dict)):
            out[rec["updates"]] = rec
    return out


def _with_curves(rec, points, run_dir, updates, valid_points=None, train_points=None):
    """The run's record for the report: final result + test BLEU, valid loss and (where
    scored) valid BLEU by update count; with train-set losses (--train-loss), those and
    valid - train (valid measured in the same pass)."""
    from fairseq_ctx.analysis.learning_curves import parse_valid_log_file

    rec = dict(rec)
    rec["curve"] = {u: {"bleu": p["bleu"], "checkpoint": p.get("checkpoint"),
                        "eval_seconds": p.get("eval_seconds")} for u, p in sorted(points.items())}
    rec["curve"][updates] = {"bleu": rec["bleu"], "checkpoint": "checkpoint_last.pt",
                             "eval_seconds": rec.get("eval_seconds")}
    rec["valid"] = {u: v for u, v in parse_valid_log_file(os.path.join(run_dir, "train.log")).items()
                    if u <= updates}
    # (read from the log each time: records written before this field get it too)
    rec["resumptions"] = _resumptions_of_run(run_dir, rec.get("settings"))
    if valid_points:
        rec["valid_bleu"] = {u: {"bleu": p["bleu"], "checkpoint": p.get("checkpoint"),
                                 "eval_seconds": p.get("eval_seconds")} for u, p in sorted(valid_points.items())}
        if (valid_points.get(updates) or {}).get("hyps") is not None:  # for the seed x sentence interval
            rec["valid_hyps"] = valid_points[updates]["hyps"]
    for part, scored in (("curve", points), ("valid_bleu", valid_points or {})):
        for u, p in scored.items():
            if "resumptions" in p:  # a side training's, recorded when the point was scored
                rec[part][u]["resumptions"] = p["resumptions"]
            elif (p.get("checkpoint") or "").startswith(f"to{u}{os.sep}"):  # scored before that was recorded
                rec[part][u]["resumptions"] = _side_resumption(run_dir, u, rec.get("settings"), every=True)
    if train_points:  # (valid measured in the same pass as train: eval mode, fp32, the same criterion)
        points = {u: p for u, p in sorted(train_points.items()) if u <= updates}
        rec["train_loss"] = {u: {"loss": round(p["train"]["loss"], 6), "nll_loss": round(p["train"]["nll_loss"], 6),
                                 "sentences": p["train"]["sentences"], "skipped": p["train"]["skipped"],
                                 "checkpoint_updates": p.get("checkpoint_updates"),
                                 "loss_per": p.get("loss_per", "token")} for u, p in points.items()}
        rec["fit_gap"] = {u: {"loss": round(p["valid"]["loss"] - p["train"]["loss"], 6),
                              "nll_loss": round(p["valid"]["nll_loss"] - p["train"]["nll_loss"], 6),
                              "valid_loss": round(p["valid"]["loss"], 6), "valid_nll_loss": round(p["valid"]["nll_loss"], 6),
                              "valid_sentences": p["valid"]["sentences"], "valid_skipped": p["valid"]["skipped"]}
                          for u, p in points.items()}
    return rec


class ImportedRunMismatch(ValueError):
    """An --import-runs record that does not fit this comparison."""


class ConfigBuildErrors(ValueError):
    """Configs fairseq-train would stop on before its first update (``build_errors``), found before any training."""

    def __init__(self, errors):
        super().__init__("; ".join(f"{name}: {why}" for name, why in errors.items()))
        self.errors = errors


class RunFailed(RuntimeError):
    """One run's training or scoring failed (``cause``: the error, with the log's tail)."""

    def __init__(self, name, seed, cause):
        super().__init__(f"{name} seed {seed}: {cause}")
        self.name, self.seed, self.cause = name, seed, cause

    @property
    def diverged(self):
        """fairseq stopped the training on a non-finite loss (fp32: FloatingPointError; fp16 /
        bf16 with a loss scaler: the minimum loss scale reached)."""
        text = str(self.cause)
        return "FloatingPointError" in text or "Minimum loss scale reached" in text


def _imported_run(rec, source, name, seed, settings, score_updates, valid_bleu):
    """A run record of an earlier report, checked against this comparison's settings."""
    if rec.get("settings") != settings:
        raise ImportedRunMismatch(f"{source}: {name} seed {seed} was run with other settings than this "
                                  f"comparison's:\n  there: {rec.get('settings')}\n  here:  {settings}")
    rec = {k: ({int(u): point for u, point in v.items()} if k in CURVE_KEYS else v)
           for k, v in rec.items() if k not in TRANSLATIONS}
    lacking = [f"test BLEU at {u}" for u in score_updates if u not in rec.get("curve", {})]
    lacking += [f"valid BLEU at {u}" for u in score_updates if valid_bleu and u not in rec.get("valid_bleu", {})]
    if lacking:
        raise ImportedRunMismatch(f"{source}: {name} seed {seed} has no {', '.join(lacking)} updates: run it "
                                  "here (drop the file or these seeds) or ask for the points it has")
    if rec.get("imported_from"):  # a report that had imported it: keep where it was made
        rec["imported_first_from"] = rec.get("imported_first_from") or rec["imported_from"]
    rec["imported_from"] = source
    return rec


@contextlib.contextmanager
def _runs_locked(run_dirs):
    """Hold RUN_DIR/.lock (run_lock.RunLock) of every run this process trains or scores, or
    raise RunInUse before any training: two comparisons on one out-dir (launched twice, or two
    seed sets) would otherwise train the same checkpoint directory at once. A report of
    finished runs needs no lock, so one can be written while other seeds train."""
    with contextlib.ExitStack() as held:
        for run_dir in run_dirs:
            try:
                held.enter_context(RunLock(run_dir, ".lock"))
            except RunInUse as error:
                raise RunInUse(f"{error}: wait for it, or run other seeds / another --out-dir; "
                               "nothing was started") from None
        yield


def _lock_reports(out_dir, paths):
    """Hold a lock for each report file of this comparison, or raise RunInUse naming every file
    another comparison on OUT_DIR is writing and its holder. The locks lie in OUT_DIR/.report-locks
    (named after each file's absolute path), not beside the reports, which are often tracked
    files. Returns the ExitStack that holds them."""
    held = contextlib.ExitStack()
    clashes = []
    try:
        for path in dict.fromkeys(os.path.abspath(p) for p in paths):
            name = hashlib.sha256(path.encode()).hexdigest()[:16] + ".lock"
            try:
                held.enter_context(RunLock(os.path.join(out_dir, ".report-locks"), name, inherited=False,
                                           guards="a second comparison from writing the same report"))
            except RunInUse as error:
                clashes.append(f"{path} (by {error.holder})")
        if clashes:
            raise RunInUse(f"another comparison on {out_dir} is writing {'; '.join(clashes)}: pass other "
                           "--json / --markdown / --curve-png, or wait for it; nothing was started")
    except BaseException:
        held.close()
        raise
    return held


def run(configs, baselines, seeds, updates, common, data_bin, ref, out_dir, beam=5,
        threads=0, gen_args=(), train_fn=train, eval_fn=evaluate, log=print, jobs=1,
        curve_updates=(), keep_checkpoints=False, valid_ref=None, imported=None, gpus=None, gpus_per_run=None,
        langs=None, train_loss=False, train_loss_fn=train_set_loss, check_builds=None):
    """Train + evaluate every (config, seed) not done already; returns results.

    Runs go seed by seed (every config's seed 1 before any seed 2), ``jobs`` at a time,
    so an interrupted comparison already holds whole seeds of every config.

    ``curve_updates``: update counts below ``updates`` to score as well (learning curve);
    each finished point is kept in RUN/curve/updU/result.json and never recomputed.
    Checkpoints stay in RUN/checkpoints until every asked-for score of the run is written
    (so a run interrupted while scoring resumes without retraining), then are deleted
    unless ``keep_checkpoints``.

    ``valid_ref``: raw references of the valid subset; where given, every scored checkpoint
    (each curve point and the final one) is also translated and scored on the valid
    subset with the same settings (RUN/valid/updU/result.json), so that a choice among
    configs can be made on valid and reported on test once. Valid scores already written
    are reported whether or not it is given. Each result is
    {"bleu", "hyps", ..., "curve": {updates: {"bleu", ...}}, "valid": {updates: {"loss", ...}},
    "valid_bleu": {updates: {"bleu", ...}} (where scored)},
    with "resumed_at_update": N where the training was interrupted and fairseq resumed it
    from its checkpoint at update N (its "train_seconds" then count only the part after N).

    ``imported``: {config: {seed: (record, source)}}, runs of an earlier report
    (``--import-runs``) used where OUT_DIR has no finished run; each must have exactly
    this run's settings and every asked-for score, else ImportedRunMismatch before any training.
    They have no "hyps" and carry "imported_from": source (and "imported_first_from": the
    report that first imported a run a report had imported itself).

    ``gpus``: CUDA_VISIBLE_DEVICES values (``gpus_to_spread_over``); each run's training
    and scoring subprocesses then see one of them (``GpuSlots``), recorded in its
    "trained_with"; None: they see what this process sees. ``gpus_per_run``: N > 1 when
    every run trains data-parallel on N GPUs (--all-gpus-per-run): part of each run's
    settings, so such runs (N times the batch) never pair with one-device runs.

    ``langs``: (source, target) of every training and scoring (None: fairseq's and
    ``evaluate``'s defaults, zh -> en).

    ``check_builds``: {config: args} -> {config: error} (``build_errors``), called with the
    configs that have a run to train or score once the plan is made; any error raises
    ConfigBuildErrors before the first training.

    ``train_loss``: also measure each run's final checkpoint on the training subset and on
    valid in one pass (``train_set_loss``: eval mode, the training's criterion, fp32), kept in
    RUN/train_loss/updU.json and reported as "train_loss" {updates: {loss, nll_loss, sentences,
    skipped}} and "fit_gap" {updates: {loss, nll_loss (valid - train), valid_loss,
    valid_nll_loss}}. A finished run whose checkpoints are gone is not trained again for it:
    it is reported without one (and named in the log), as is one whose measurement failed
    (its checkpoints are then kept for a rerun).
    """
    curve_updates = sorted({int(u) for u in curve_updates if int(u) < updates})
    per_run = f" gpus_per_run={gpus_per_run}" if gpus_per_run and gpus_per_run > 1 else ""

    def scoring_settings(name, seed, n=updates):
        """Everything a run's scores depend on (one-device runs, CPU, one GPU or pinned, keep
        the settings they had: no gpus_per_run)."""
        return (f"updates={n} beam={beam} common={' '.join(common)} gen={' '.join(gen_args)}{per_run} "
                f"args={' '.join(configs[name])} seed={seed}")

    def training_settings(name, seed, n=updates):
        """What decides a run's checkpoints (not how they are scored): kept checkpoints
        (--keep-checkpoints) of a run are scored again with another beam or generation
        options instead of being trained again."""
        return f"updates={n} common={' '.join(common)}{per_run} args={' '.join(configs[name])} seed={seed}"

    blockers = {name: continuation_blockers([*common, *configs[name]]) for name in configs}

    def kept_shorter_training(name, seed, run_dir):
        """The update count of this run's kept training (--keep-checkpoints) of the same settings
        and fewer updates, which fairseq can continue to ``updates``: nothing of
        continuation_blockers in its arguments, so with optimizer, schedule, data position and
        per-update seeds restored the continuation is the run trained to ``updates`` from the
        start (bit for bit on the same host and thread count). None where there is none."""
        ckpt_dir = os.path.join(run_dir, "checkpoints")
        trained = _read_json(os.path.join(ckpt_dir, "trained.json")) or {}
        m = re.match(r"updates=(\d+) ", _as_training_key(trained.get("settings")) or "")
        if not (m and not blockers[name] and int(m.group(1)) < updates):
            return None
        n = int(m.group(1))
        last = os.path.join(ckpt_dir, "checkpoint_last.pt")
        if (_as_training_key(trained["settings"]) != training_settings(name, seed, n) or not os.path.exists(last)
                or not written_to_the_end(last) or stored_updates(last) != n):
            return None
        return n

    train_langs = {"langs": tuple(langs)} if langs else {}

    def train_points_of(name, seed, run_dir):
        return _train_loss_points(run_dir, lambda n: training_settings(name, seed, n))

    def measure_train_loss(name, seed, run_dir, ckpt, pin, keep_for_a_rerun=False):
        """The train-set and valid loss of this run's final checkpoint ``ckpt``, in one pass
        (RUN/train_loss/updU.json); True when measured. A failed measurement is logged and the
        run named in the report's log, not raised: its scores stand; ``keep_for_a_rerun``
        (checkpoints that would be deleted now) marks them kept for it (RUN/train_loss/KEPT), so
        that a rerun measures them and deletes them then."""
        path = _train_loss_path(run_dir, updates)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        t0 = time.time()
        try:
            found = train_loss_fn(data_bin, ckpt, path[: -len(".json")] + ".log", threads, **pin, **train_langs)
            subsets = found["subsets"]
            train_side, valid_side = subsets["train"], subsets["valid"]
        except (RuntimeError, OSError, KeyError, TypeError, subprocess.SubprocessError) as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            log(f"[quality] {name} seed {seed}: train-set loss failed ({first}); its checkpoints are kept so that "
                "a rerun measures them")
            if keep_for_a_rerun:
                _write_json(os.path.join(os.path.dirname(path), "KEPT"), {"error": str(error)[-3000:]})
            no_train_loss.append(f"{name} seed {seed} (failed: {first})")
            return False
        _write_json(path, {"settings": training_settings(name, seed), "updates": updates,
                           "checkpoint": os.path.basename(ckpt), "checkpoint_updates": found.get("checkpoint_updates"),
                           "device": found.get("device"), "dtype": found.get("dtype"),
                           "loss_per": found.get("loss_per", "token"),
                           "train": train_side, "valid": valid_side, "seconds": round(time.time() - t0, 1)})
        log(f"[quality] {name} seed {seed}: train-set loss {train_side['loss']:.3f}, valid {valid_side['loss']:.3f} "
            f"at {updates} updates ({train_side['sentences']} training sentences and {valid_side['sentences']} valid "
            f"ones; {train_side['skipped']} / {valid_side['skipped']} over the length limits left out)")
        return True

    def kept_train_loss(name, seed, run_dir):
        """--train-loss for a run finished already: measured on its kept final checkpoint (of
        this training, whole, not longer than asked), else reported without (its training is
        not repeated for a diagnostic). Under the run's lock: another comparison may be scoring it."""
        if updates in train_points_of(name, seed, run_dir):
            return
        ckpt_dir = os.path.join(run_dir, "checkpoints")
        last = os.path.join(ckpt_dir, "checkpoint_last.pt")
        kept_mark = os.path.join(run_dir, "train_loss", "KEPT")
        try:
            with RunLock(run_dir, ".lock"):
                trained = _read_json(os.path.join(ckpt_dir, "trained.json")) or {}
                if not (_as_training_key(trained.get("settings")) == training_settings(name, seed)
                        and os.path.exists(last) and written_to_the_end(last)
                        and (stored_updates(last) or 0) <= updates):
                    no_train_loss.append(f"{name} seed {seed} (no kept final checkpoint of this training)")
                    return
                kept_for_it = os.path.exists(kept_mark)
                if measure_train_loss(name, seed, run_dir, last, {}) and kept_for_it:
                    os.remove(kept_mark)
                    if not keep_checkpoints:
                        shutil.rmtree(ckpt_dir, ignore_errors=True)  # kept only for this measurement
        except RunInUse:
            no_train_loss.append(f"{name} seed {seed} (in use by another comparison)")

    results = {name: {} for name in configs}
    todo, scored_otherwise, continued, shorter_gone, no_train_loss = [], [], [], [], []
    for seed in seeds:
        for name in sorted(configs):
            run_dir = os.path.join(out_dir, "runs", name, f"seed{seed}")
            settings = scoring_settings(name, seed)
            prev = _read_json(os.path.join(run_dir, "result.json"))
            final = prev if prev and prev.get("settings") == settings else None
            if (final is None and prev and _as_training_key(prev.get("settings")) == training_settings(name, seed)
                    and not os.path.exists(os.path.join(run_dir, "checkpoints", "checkpoint_last.pt"))):
                scored_otherwise.append(f"{name} seed {seed}")
            if final is None and kept_shorter_training(name, seed, run_dir):
                if seed not in (imported or {}).get(name, {}):
                    continued.append(f"{name} seed {seed}")
            elif final is None and seed not in (imported or {}).get(name, {}):
                other = _other_length(run_dir, updates, lambda n, name=name, seed=seed: training_settings(name, seed, n))
                if other is not None:
                    shorter_gone.append((other, name, f"{name} seed {seed}"))
            points = _done_points(run_dir, settings)
            valid_points = _done_points(run_dir, settings, "valid")
            missing = [u for u in curve_updates if u not in points]
            missing_valid = [u for u in curve_updates + [updates] if u not in valid_points] if valid_ref else []
            if final is not None and not missing and not missing_valid:
                if train_loss:
                    kept_train_loss(name, seed, run_dir)
                results[name][seed] = _with_curves(final, points, run_dir, updates, valid_points,
                                                   train_points_of(name, seed, run_dir))
                log(f"[quality] {name} seed {seed}: done already (BLEU {final['bleu']})")
                continue
            marker = os.path.join(run_dir, "imported.json")
            if final is None and seed in (imported or {}).get(name, {}):
                results[name][seed] = _imported_run(*imported[name][seed], name, seed, settings,
                                                    curve_updates + [updates], bool(valid_ref))
                if train_loss and updates not in results[name][seed].get("train_loss", {}):
                    no_train_loss.append(f"{name} seed {seed} (imported from {imported[name][seed][1]} without one)")
                _write_json(marker, {"source": imported[name][seed][1], "settings": settings})
                log(f"[quality] {name} seed {seed}: imported from {imported[name][seed][1]} "
                    f"(BLEU {results[name][seed]['bleu']})")
                continue
            if final is not None and seed in (imported or {}).get(name, {}):
                log(f"[quality] {name} seed {seed}: run here already, not imported from {imported[name][seed][1]}")
            previous = _read_json(marker)
            if final is None and previous and previous.get("settings") == settings:
                # forgetting --import-runs would train hours of runs that were meant to be imported
                raise ImportedRunMismatch(f"{name} seed {seed} was imported from {previous['source']} the last time: "
                                          f"pass --import-runs {previous['source']} again, or delete {marker} "
                                          "to train it here")
            todo.append((name, seed, run_dir, settings, final, points, missing, valid_points, missing_valid))

    if check_builds is not None and todo:
        # only the configs with something to train or score (fairseq builds the model for both),
        # so a report of finished or imported runs is not held up by a config of older code
        errors = check_builds({name: configs[name] for name in sorted({job[0] for job in todo})})
        if errors:
            raise ConfigBuildErrors(errors)
    gpu_slots = GpuSlots(gpus)
    eval_langs = {"src": langs[0], "tgt": langs[1]} if langs else {}

    def one_run(name, *job):
        with gpu_slots.one([*common, *configs[name]]) as device:
            pin = {"extra_env": {"CUDA_VISIBLE_DEVICES": device}} if device is not None else {}
            try:
                return train_and_score(name, *job, device=device, pin=pin)
            except (RuntimeError, subprocess.CalledProcessError) as error:
                raise RunFailed(name, job[0], error) from error

    def pinned_name(device):
        return _pinned_gpu_name(gpus, device) if device is not None else None

    def train_and_score(name, seed, run_dir, settings, final, points, missing, valid_points, missing_valid,
                        device, pin):
        os.makedirs(run_dir, exist_ok=True)
        ckpt_dir = os.path.join(run_dir, "checkpoints")
        last = os.path.join(ckpt_dir, "checkpoint_last.pt")
        log_path = os.path.join(run_dir, "train.log")
        trained = _read_json(os.path.join(ckpt_dir, "trained.json"))
        train_key = training_settings(name, seed)
        # the intermediate checkpoints still to score, on test or valid
        needed = sorted(set(missing) | {u for u in missing_valid if u < updates})
        # (keys written before training and scoring settings were told apart: the whole settings)
        # (a checkpoint_last.pt of more updates is never scored as this run's: e.g. a continuation
        # cut off before its records were rewritten; fewer is a training stopped early, by
        # --patience, --max-epoch, --stop-time-hours: scored as it is, as before)
        if (trained and _as_training_key(trained.get("settings")) == train_key and os.path.exists(last)
                and set(needed) <= set(trained.get("curve_updates", []))
                and (stored_updates(last) or 0) <= updates):
            train_s, resumed_at = trained.get("train_seconds", 0.0), trained.get("resumed_at_update")
            trained_with, earlier_attempts = trained.get("trained_with"), trained.get("earlier_attempts")
            extended_from = trained.get("extended_from_updates")
            log(f"[quality] {name} seed {seed}: trained already, scoring its checkpoints")
        else:
            key = {"settings": train_key, "curve_updates": curve_updates}
            started = _read_json(os.path.join(ckpt_dir, "started.json")) or {}
            resumed = ({"settings": _as_training_key(started.get("settings")),
                        "curve_updates": started.get("curve_updates")} == key and os.path.exists(last))
            if resumed and not written_to_the_end(last):
                resumed = resume_from_a_whole_checkpoint(name, seed, ckpt_dir, last)
            if resumed and (stored_updates(last) or 0) > updates:  # a longer training's: never resumed or scored
                log(f"[quality] {name} seed {seed}: its checkpoint_last.pt is of {stored_updates(last)} updates, "
                    f"more than {updates}; trained again from the start")
                resumed = False
            # where each attempt of this training ran: a resumption on another host or GPU
            # continues in another floating-point order, so the record names every one
            trained_with = _run_provenance(threads, [*common, *configs[name]], device, pinned_name(device))
            earlier_attempts = None
            # a kept training of fewer updates (--keep-checkpoints): continued, not started again
            extended = None if resumed else kept_shorter_training(name, seed, run_dir)
            # (an interrupted continuation resumes like any training; started.json remembers it)
            extended_from = extended or (started.get("extended_from_updates") if resumed else None)
            # the training ended after the driver of its last attempt was gone: fairseq-train
            # started again would take one more update and overwrite checkpoint_last.pt
            done = finished_at(ckpt_dir, updates) if resumed else None
            if done is not None:
                earlier_attempts = started.get("attempts") or [
                    {"note": "not recorded (the training started before attempts were recorded)"}]
                # the attempt that finished it is the last one recorded; this one trained nothing
                trained_with, earlier_attempts = earlier_attempts[-1], earlier_attempts[:-1] or None
                log(f"[quality] {name} seed {seed}: its training had finished ({done} updates); not started again")
            elif extended:
                earlier_attempts = [*(trained.get("earlier_attempts") or []), trained.get("trained_with") or {
                    "note": "not recorded"}]
                points, valid_points = adopt_shorter_scores(name, seed, run_dir, ckpt_dir, extended)
                _write_json(os.path.join(ckpt_dir, "started.json"), {**key, "attempts": [*earlier_attempts, trained_with],
                                                                     "extended_from_updates": extended})
                final = None
                missing = [u for u in curve_updates if u not in points]
                missing_valid = [u for u in curve_updates + [updates] if u not in valid_points] if valid_ref else []
                log(f"[quality] {name} seed {seed}: continuing its kept training of {extended} updates to {updates} "
                    "(nothing in its options that fairseq does not resume exactly: the same run as one trained "
                    "to the end from the start)"
                    + (f"; its scores at {', '.join(map(str, sorted(set(points) | set(valid_points))))} updates "
                       "are kept" if points or valid_points else ""))
            elif resumed:
                earlier_attempts = started.get("attempts") or [
                    {"note": "not recorded (the training started before attempts were recorded)"}]
                _write_json(os.path.join(ckpt_dir, "started.json"),
                            {**key, "attempts": [*earlier_attempts, trained_with],
                             **({"extended_from_updates": extended_from} if extended_from else {})})
                # an interrupted training of exactly this: fairseq resumes from checkpoint_last.pt
                log(f"[quality] {name} seed {seed}: resuming the interrupted training")
            else:
                if final is not None or points or valid_points:
                    # a finished run trained again (new points, --valid-bleu): equal to the first
                    # training only on the same host and thread count, so every score of the run
                    # is redone from this one (one decode per point) rather than mixing the two
                    log(f"[quality] {name} seed {seed}: training again for new points; its earlier "
                        "scores are dropped and every point is scored again from the new training")
                # (and the logs of side trainings to curve points: recover_checkpoint)
                for stale in ("result.json", "curve", "valid", "train_loss",
                              *(os.path.basename(p) for p in glob.glob(os.path.join(run_dir, "train.to*.log")))):
                    path = os.path.join(run_dir, stale)
                    if os.path.isdir(path):
                        shutil.rmtree(path)
                    elif os.path.exists(path):
                        os.remove(path)
                final, points, valid_points = None, {}, {}
                missing = list(curve_updates)
                missing_valid = curve_updates + [updates] if valid_ref else []
                # never let fairseq resume from a checkpoint of other settings
                shutil.rmtree(ckpt_dir, ignore_errors=True)
                if os.path.exists(log_path):
                    os.remove(log_path)
                _write_json(os.path.join(ckpt_dir, "started.json"), {**key, "attempts": [trained_with]})
            if done is None:
                log(f"[quality] {name} seed {seed}: training {updates} updates"
                    + (f", checkpoints at {', '.join(map(str, curve_updates))}" if curve_updates else "")
                    + f" ({time.strftime('%H:%M:%S')})")
            kwargs = {"curve_updates": curve_updates, **pin} if curve_updates else dict(pin)
            kwargs.update(train_langs)
            if done is not None:  # what its log says of the attempt that finished it
                train_s, resumed_at = _training_seconds(log_path), _resumed_at_update(log_path)
            else:
                train_s = train_fn(data_bin, common, configs[name], updates, seed, ckpt_dir, log_path,
                                   threads, **kwargs)
                resumed_at = _resumed_at_update(log_path) if resumed or extended else None
                if extended and resumed_at != extended:
                    # fairseq did not take up the kept training where it ended: not the run it continues
                    os.remove(os.path.join(ckpt_dir, "started.json"))  # so a rerun trains from the start
                    raise RuntimeError(f"the continuation of the kept {extended}-update training did not resume "
                                       f"at {extended} updates (fairseq's log: {resumed_at}); rerun to train it "
                                       "from the start")
            _write_json(os.path.join(ckpt_dir, "trained.json"),
                        {"settings": train_key, "curve_updates": curve_updates, "train_seconds": round(train_s, 1),
                         "resumed_at_update": resumed_at, "trained_with": trained_with,
                         **({"earlier_attempts": earlier_attempts} if earlier_attempts else {}),
                         **({"extended_from_updates": extended_from} if extended_from else {})})
        if final is None:
            t0 = time.time()
            res, hyps = eval_fn(data_bin, last, ref, beam, os.path.join(run_dir, "eval"), gen_args=gen_args,
                                **pin, **eval_langs)
            final = {"settings": settings, "bleu": res["bleu"], "signature": res.get("signature"),
                     "sentences": res.get("sentences"), "train_seconds": round(train_s, 1),
                     "eval_seconds": round(time.time() - t0, 1), "trained_with": trained_with, "hyps": hyps}
            if earlier_attempts:  # trained_with: the attempt that finished; these: the ones it resumed
                final["earlier_attempts"] = earlier_attempts
            if resumed_at is not None:
                # train_seconds then counts only the part after the interruption
                final["resumed_at_update"] = resumed_at
            if extended_from:  # a kept shorter training continued (its first part's scores kept as points)
                final["extended_from_updates"] = extended_from
            _write_json(os.path.join(run_dir, "result.json"), final)
            log(f"[quality] {name} seed {seed}: BLEU {res['bleu']} "
                f"(train {train_s:.0f}s, eval {final['eval_seconds']:.0f}s)")
        for u in sorted(set(missing) | set(missing_valid)):
            side = None
            ckpt = last if u == updates else _checkpoints_by_update(ckpt_dir).get(u)
            if ckpt is None:
                ckpt, side = recover_checkpoint(name, seed, u, ckpt_dir, run_dir, pin)
            for subset, ref_u, scored in (("test", ref, points), ("valid", valid_ref, valid_points)):
                if u not in (missing if subset == "test" else missing_valid):
                    continue
                t0 = time.time()
                point_dir = os.path.dirname(_point_path(run_dir, u, subset))
                kwargs = {**pin, **eval_langs, **({"subset": subset} if subset != "test" else {})}
                res, hyps = eval_fn(data_bin, ckpt, ref_u, beam, os.path.join(point_dir, "eval"),
                                    gen_args=gen_args, **kwargs)
                scored[u] = {"settings": settings, "updates": u, "subset": subset, "bleu": res["bleu"],
                             "signature": res.get("signature"), "sentences": res.get("sentences"),
                             "checkpoint": os.path.relpath(ckpt, ckpt_dir),
                             "eval_seconds": round(time.time() - t0, 1), "hyps": hyps,
                             **({"resumptions": _side_resumption(run_dir, u, settings)} if side else {})}
                _write_json(_point_path(run_dir, u, subset), scored[u])
                log(f"[quality] {name} seed {seed}: {subset} BLEU {res['bleu']} at {u} updates")
            if side and not keep_checkpoints:
                shutil.rmtree(side, ignore_errors=True)
        measured = True
        if train_loss and updates not in train_points_of(name, seed, run_dir):
            measured = measure_train_loss(name, seed, run_dir, last, pin, keep_for_a_rerun=not keep_checkpoints)
        if not keep_checkpoints and measured:  # checkpoints are large and not needed once scored
            shutil.rmtree(ckpt_dir, ignore_errors=True)
            kept_mark = os.path.join(run_dir, "train_loss", "KEPT")
            if os.path.exists(kept_mark):  # (checkpoints kept for an earlier failed measurement: gone now)
                os.remove(kept_mark)
        return name, seed, _with_curves(final, points, run_dir, updates, valid_points,
                                        train_points_of(name, seed, run_dir))

    def adopt_shorter_scores(name, seed, run_dir, ckpt_dir, n):
        """Before the kept ``n``-update training is continued: every score it has (its curve
        points, and its final score as the point n) under this comparison's settings, as
        ({updates: test record}, {updates: valid record}); a copy of checkpoint_last.pt as the
        checkpoint of update n where n is an asked-for point not scored on every subset. Its
        trained.json and result.json go, before anything records the continuation: they describe
        a training that is now being continued (a later run at n updates then trains again
        rather than scoring a longer model). Repeatable after an interruption, except between
        their removal and started.json's (the run is then trained again from the start)."""
        old, new = scoring_settings(name, seed, n), scoring_settings(name, seed)
        for stale_copy in glob.glob(os.path.join(ckpt_dir, "checkpoint_*.pt.partial")):
            os.remove(stale_copy)
        for subset in POINT_DIRS:
            for u, rec in _done_points(run_dir, old, subset).items():
                _write_json(_point_path(run_dir, u, subset), {**rec, "settings": new})
        result = os.path.join(run_dir, "result.json")
        prev = _read_json(result)
        if prev and prev.get("settings") == old:
            _write_json(_point_path(run_dir, n), {
                "settings": new, "updates": n, "subset": "test", "bleu": prev["bleu"],
                "signature": prev.get("signature"), "sentences": prev.get("sentences"),
                "checkpoint": "checkpoint_last.pt (before it was continued)",
                "eval_seconds": prev.get("eval_seconds"), "hyps": prev.get("hyps")})
        points, valid_points = _done_points(run_dir, new), _done_points(run_dir, new, "valid")
        last = os.path.join(ckpt_dir, "checkpoint_last.pt")
        if (n in curve_updates and (n not in points or (valid_ref and n not in valid_points))
                and n not in _checkpoints_by_update(ckpt_dir)):
            # (the epoch in a checkpoint's name is not read: that of the latest save before it)
            epoch = max([int(os.path.basename(p).split("_")[1]) for p in _checkpoints_by_update(ckpt_dir).values()]
                        or [0])
            copy = os.path.join(ckpt_dir, f"checkpoint_{epoch}_{n}.pt")
            shutil.copyfile(last, copy + ".partial")  # a copy cut off must not pass for the checkpoint
            os.replace(copy + ".partial", copy)
        for stale in (os.path.join(ckpt_dir, "trained.json"), result):
            if os.path.exists(stale):
                os.remove(stale)
        return points, valid_points

    def resume_from_a_whole_checkpoint(name, seed, ckpt_dir, last):
        """checkpoint_last.pt is cut off: put the newest whole checkpoint_E_U.pt (written
        atomically by fairseq, with the optimizer, schedule and data position of update U)
        in its place, so fairseq resumes from U as from any save; without one, train from
        the start. True when the training resumes."""
        restored = restore_last_from_newest_whole(ckpt_dir)
        if restored:
            log(f"[quality] {name} seed {seed}: {os.path.basename(last)} was cut off while it was written; "
                f"resuming from {os.path.basename(restored)}")
            return True
        log(f"[quality] {name} seed {seed}: {os.path.basename(last)} was cut off while it was written and no "
            "whole earlier checkpoint is left; its training starts again from the beginning")
        return False

    def recover_checkpoint(name, seed, u, ckpt_dir, run_dir, pin):
        """fairseq names a save that ends an epoch checkpointE.pt (which --no-epoch-checkpoints
        suppresses), not checkpoint_E_U.pt: when a curve point falls on an epoch's end,
        train again to exactly U from the latest earlier checkpoint (bit-exact on the same
        machine: fairseq restores optimizer, schedule, data order and per-update seeds) in
        a side directory."""
        words = [*common, *configs[name]]
        inexact = [b for b in continuation_blockers(words) if not b.startswith("--lr-scheduler")]
        if inexact:  # training to U again from an earlier checkpoint would not be the run's U
            raise RuntimeError(f"{name} seed {seed}: no checkpoint at {u} updates (an epoch ended there), and under "
                               f"{', '.join(inexact)} training to it again from an earlier checkpoint is not "
                               "exact; choose --curve-updates that do not fall on an epoch's end")
        if lr_depends_on_max_update(words):
            scheduler = option_value(words, "--lr-scheduler")
            # training to U with --max-update U would follow another learning-rate curve
            raise RuntimeError(f"{name} seed {seed}: no checkpoint at {u} updates (an epoch ended there) and "
                               f"--lr-scheduler {scheduler} depends on --max-update, so it cannot be recovered "
                               "exactly; choose --curve-updates that do not fall on an epoch's end")
        side = os.path.join(ckpt_dir, f"to{u}")
        side_last = os.path.join(side, "checkpoint_last.pt")
        if (_read_json(os.path.join(side, "trained.json")) or {}).get("updates") == u and written_to_the_end(side_last):
            log(f"[quality] {name} seed {seed}: scoring the kept checkpoint of {u} updates in {side}")
            return side_last, side  # kept (--keep-checkpoints): the checkpoint scored before
        earlier = {v: p for v, p in _checkpoints_by_update(ckpt_dir).items() if v < u}
        start = earlier[max(earlier)] if earlier else None
        shutil.rmtree(side, ignore_errors=True)
        log(f"[quality] {name} seed {seed}: no checkpoint_E_{u}.pt ({u} updates ended an epoch); "
            f"training to {u} from {os.path.basename(start) if start else 'scratch'}")
        kwargs = {"restore_file": start, **pin} if start else dict(pin)
        kwargs.update(train_langs)
        train_fn(data_bin, common, configs[name], u, seed, side,
                 os.path.join(run_dir, f"train.to{u}.log"), threads, **kwargs)
        _write_json(os.path.join(side, "trained.json"), {"updates": u})
        return side_last, side

    # say up front what will cost hours: finished runs that new points or --valid-bleu retrain
    retrain = [f"{n} seed {sd}" for n, sd, _, _, fin, pts, _, vpts, _ in todo if fin is not None or pts or vpts]
    if scored_otherwise:
        log(f"[quality] {len(scored_otherwise)} run(s) trained with these settings were scored with another beam "
            "or generation options and their checkpoints are gone (scored without --keep-checkpoints): trained "
            f"again to be scored: {', '.join(scored_otherwise)}")
    if no_train_loss:
        log(f"[quality] no train-set loss (--train-loss) for {len(no_train_loss)} finished run(s) (not trained "
            f"again for it; --keep-checkpoints keeps checkpoints): {', '.join(no_train_loss)}")
    said_before = len(no_train_loss)
    if continued:
        log(f"[quality] {len(continued)} run(s) continue their kept training of fewer updates to {updates} "
            f"(every score of it is kept, its final one as a curve point): {', '.join(continued)}")
    for n, name, run in shorter_gone:
        if n > updates:
            why = "it was trained (or started) to more updates"
        elif blockers[name]:
            why = (f"fairseq's continuation would not be the run trained to {updates} from the start under "
                   f"{', '.join(blockers[name])}")
        else:
            why = ("its checkpoints were not kept, or are not those of a finished training of that length "
                   "(--keep-checkpoints keeps them for a later, longer run)")
        log(f"[quality] {run}: its training of {n} updates is not continued; trained again from the start to "
            f"{updates}: {why}")
    if todo:
        log(f"[quality] {len(todo)} run(s) to train or score"
            + (f"; {len(retrain)} finished run(s) will be trained again for new points and all their "
               f"scores redone unless their checkpoints are still there: {', '.join(retrain)}" if retrain else ""))
    # each run is a training and a generation subprocess: threads here only wait on them
    with _runs_locked([job[2] for job in todo]), \
            concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one_run, *job) for job in todo]
        try:
            for future in futures:
                name, seed, rec = future.result()
                results[name][seed] = rec
        except BaseException:
            for future in futures:  # runs not started yet are dropped, running ones finish
                future.cancel()
            raise
    failed = no_train_loss[said_before:]
    if failed:
        log(f"[quality] no train-set loss (--train-loss) for {len(failed)} run(s) trained or scored now: "
            f"{', '.join(failed)}")
    return results


LOSSES = ("valid_loss", "train_loss", "train_nll")  # lower is better
GAPS = ("fit_gap", "fit_gap_nll")  # valid - train: neither direction is "better" (a small gap can be underfitting)


def _neutral(diff, neutral):
    """A gap's seed counts as "higher" / "lower", not better / worse."""
    if neutral:
        diff = dict(diff)
        diff["higher"], diff["lower"] = diff.pop("better"), diff.pop("worse")
        diff.pop("higher_is_better", None)
    return diff


def _seed_table(results, baselines, measured, columns, value, differences=None):
    """The lines of a per-config table: header; per config (its seeds ``measured[name]``) the
    mean over those seeds (min-max) of each column; per system the seed-paired mean difference
    system - baseline over the seeds both have [95% t CI] (seeds higher / lower).
    ``columns``: [(title, decimals)]; ``value(name, seed, column index)``: a number or None;
    ``differences``: a dict given gets {system: {column index: seed_difference}}."""
    from fairseq_ctx.analysis.seed_statistics import seed_difference

    lines = ["| config | baseline | seeds | " + " | ".join(title for title, _ in columns) + " |",
             "|---|---|---|" + "---|" * len(columns)]
    for name in sorted(results):
        if not measured[name]:
            continue
        cells = []
        for i, (_, nd) in enumerate(columns):
            xs = [x for x in (value(name, s, i) for s in measured[name]) if x is not None]
            cells.append("-" if not xs else f"{xs[0]:.{nd}f}" if len(xs) == 1
                         else f"{statistics.fmean(xs):.{nd}f} ({min(xs):.{nd}f}-{max(xs):.{nd}f})")
        lines.append(f"| {name} | {baselines.get(name) or '(baseline)'} | {', '.join(map(str, measured[name]))} | "
                     + " | ".join(cells) + " |")
        base = baselines.get(name)
        common = [s for s in measured[name] if s in measured.get(base, [])] if base else []
        if not common:
            continue
        cells, detectable = [], []
        for i, (_, nd) in enumerate(columns):
            both = [s for s in common if value(name, s, i) is not None and value(base, s, i) is not None]
            if not both:
                cells.append("-")
                detectable.append("-")
                continue
            d = seed_difference({s: value(name, s, i) for s in both}, {s: value(base, s, i) for s in both})
            if differences is not None:
                differences.setdefault(name, {})[i] = d
            up = sum(1 for x in d["diffs"] if x is not None and x > 0)
            down = sum(1 for x in d["diffs"] if x is not None and x < 0)
            cells.append(f"{_ci(d, nd)} ({up} / {down})")
            detectable.append(_detectable(d, nd))
        lines.append(f"| Δ {name} | {base} | {', '.join(map(str, common))} | " + " | ".join(cells) + " |")
        lines.append(f"| 80 % power, {name} | {base} | {', '.join(map(str, common))} | " + " | ".join(detectable) + " |")
    return lines


def fit_markdown(results, baselines, seeds, updates):
    """The --train-loss section: per config the train-set and valid loss of its final
    checkpoints (one pass, eval mode), valid - train, the NLLs; per system the seed-paired
    differences over the seeds both it and its baseline have (named), with their 95% t CI and
    the seeds higher / lower. [] when no run has one."""
    columns = (("train-set loss", "train_loss", "loss"), ("valid loss", "fit_gap", "valid_loss"),
               ("valid - train", "fit_gap", "loss"), ("train-set NLL", "train_loss", "nll_loss"),
               ("valid NLL", "fit_gap", "valid_nll_loss"), ("valid - train NLL", "fit_gap", "nll_loss"))

    def value(run, key, field):
        return ((run.get(key) or {}).get(updates) or {}).get(field)

    measured = {name: [s for s in seeds if s in runs and value(runs[s], "train_loss", "loss") is not None]
                for name, runs in results.items()}
    if not any(measured.values()):
        return []
    lines = ["", "## Fit and generalisation (--train-loss)", "",
             f"Each run's final checkpoint ({updates} updates) measured on the whole training subset and on "
             "valid in one pass (`fairseq_ctx.analysis.subset_loss`: eval mode, no dropout, fp32, the training's "
             "criterion; loss: the criterion's (label-smoothed), NLL: without smoothing, per target token, base "
             "2; the training pairs fairseq-train left out, over the positions or --max-tokens, left out the "
             "same way and counted, every other sentence in it). Mean over the seeds measured (min-max). Δ rows: seed-paired mean difference system - "
             "baseline over the seeds both have [95% t CI] (seeds higher / lower); 80 % power rows: the true "
             "|difference| that t-test finds with 80 % power (a design figure, the note at the top). Behind on valid and on the "
             "training data: the system fits its training data worse (optimisation, capacity); level or ahead "
             "on the training data and behind on valid: it generalises worse. valid - train is the valid "
             "difference minus the train one on the same seeds, not a third measurement.", "",
             ] + _seed_table(results, baselines, measured, [(title, 3) for title, _, _ in columns],
                             lambda name, s, i: value(results[name][s], *columns[i][1:]))
    notes = []
    records = {(name, s): results[name][s]["train_loss"][updates] for name in sorted(results) for s in measured[name]}
    first = [f"{name} seed {s}" for (name, s), r in records.items() if "sentences" not in r]
    if first:
        notes.append("measured by the first version of --train-loss (fairseq-validate on the training subset; "
                     "valid - train with the valid loss fairseq-train logged at that update; no valid or valid "
                     f"NLL column): {', '.join(first)}")
    per_sentence = [f"{name} seed {s}" for (name, s), r in records.items() if r.get("loss_per") == "sentence"]
    if per_sentence:
        notes.append(f"loss per sentence (--sentence-avg), not per token: {', '.join(per_sentence)}")
    early = [f"{name} seed {s} ({r['checkpoint_updates']})" for (name, s), r in records.items()
             if r.get("checkpoint_updates") not in (None, updates)]
    if early:
        notes.append(f"a final checkpoint of fewer updates (the training stopped early): {', '.join(early)}")
    left_out = []
    for (name, s), r in records.items():
        gap = results[name][s].get("fit_gap", {}).get(updates, {})
        if r.get("skipped") or gap.get("valid_skipped"):
            left_out.append(f"{name} seed {s}: {r.get('skipped', 0)} training / {gap.get('valid_skipped', 0)} valid")
    if left_out:
        notes.append(f"pairs over the length limits left out: {'; '.join(left_out)}")
    return lines + ([""] + [f"- {n}" for n in notes] if notes else [])


LENGTH_COLUMNS = (("BP", "bp", 3), ("length ratio", "ratio", 3), ("BLEU without BP", "bleu_without_bp", 2),
                  ("chrF", "chrf", 2))


def add_length_statistics(results, refs, tgt):
    """Each run with its final test translations gets "length"
    (``evaluation.scoring.length_statistics``), kept in the report's runs, so that seeds
    imported from it later still have it; an imported run keeps the one its report had."""
    from fairseq_ctx.evaluation.scoring import length_statistics

    for runs in results.values():
        for rec in runs.values():
            if rec.get("hyps") is not None:
                rec["length"] = length_statistics(rec["hyps"], refs, tgt)


def length_markdown(results, baselines, seeds):
    """(lines, comparisons): per config the brevity penalty, output / reference length, BLEU
    without its brevity penalty and chrF of the final test translations; per system the
    seed-paired differences over the seeds both it and its baseline have them for
    (comparisons: {system: {"baseline": B, FIELD: seed_difference}}, for the JSON). ([], {})
    when no run has them."""
    def value(name, s, field):
        return (results[name][s].get("length") or {}).get(field)

    measured = {name: [s for s in seeds if s in runs and value(name, s, "bp") is not None]
                for name, runs in results.items()}
    if not any(measured.values()):
        return [], {}
    signatures = sorted({results[n][s]["length"].get("chrf_signature") for n in results for s in measured[n]} - {None})
    lines = ["", "## Output length and chrF (final test translations)", "",
             "BLEU = BP x BLEU without BP, the geometric mean of sacreBLEU's four n-gram precisions (in %; an "
             "order with no match smoothed, as sacreBLEU does). "
             "Where outputs are shorter than the references (length ratio < 1, sacreBLEU's tokens) BP < 1 and "
             "BLEU moves with output length. Read the columns together, not as independent causes: a shorter "
             "output also tends to have higher precisions (fewer, surer words), so a BLEU-without-BP difference "
             "at a different length ratio is not a pure precision difference. chrF: sacreBLEU's character "
             "n-gram F-score (β = 2, weighted towards recall, so it also falls as outputs get shorter"
             + (f"; {', '.join(signatures)}" if len(signatures) == 1 else
                f"; **runs scored with different chrF signatures**: {', '.join(signatures)}" if signatures else "")
             + "). Mean over the seeds with these "
             "figures (min-max); Δ rows: seed-paired mean difference system - baseline [95% t CI] (seeds "
             "higher / lower); 80 % power rows: the true |difference| that t-test finds with 80 % power (a "
             "design figure, the note at the top). Runs imported from a report that predates these figures have none.", "",
             ]
    differences = {}
    lines += _seed_table(results, baselines, measured, [(title, nd) for title, _, nd in LENGTH_COLUMNS],
                         lambda name, s, i: value(name, s, LENGTH_COLUMNS[i][1]), differences)
    comparisons = {name: {"baseline": baselines[name],
                          **{LENGTH_COLUMNS[i][1]: d for i, d in sorted(by_column.items())}}
                   for name, by_column in sorted(differences.items())}
    return lines, comparisons


def learning_curves(results, baselines, seeds):
    """Per config: BLEU and valid loss curves over seeds; per system: seed-paired
    differences at each update count. Returns (curves, curve_comparisons)."""
    from fairseq_ctx.analysis.seed_statistics import curve_summary, seed_difference

    # metric: (the run record's key, the value's field); the optional ones (valid BLEU, the
    # train-set loss and valid - train) only where measured, over the seeds that have them
    metrics = {"bleu": ("curve", "bleu"), "valid_loss": ("valid", "loss"), "valid_bleu": ("valid_bleu", "bleu"),
               "train_loss": ("train_loss", "loss"), "train_nll": ("train_loss", "nll_loss"),
               "fit_gap": ("fit_gap", "loss"), "fit_gap_nll": ("fit_gap", "nll_loss")}
    optional = ("valid_bleu", "train_loss", "train_nll", "fit_gap", "fit_gap_nll")

    def points(run, key, field):
        return {u: p[field] for u, p in run.get(key, {}).items() if field in p}

    curves = {}
    for name, runs in results.items():
        have = [s for s in seeds if s in runs]
        if not have:
            continue
        curves[name] = {}
        for metric, (key, field) in metrics.items():
            measured = [s for s in have if points(runs[s], key, field)] if metric in optional else have
            if measured:
                curves[name][metric] = curve_summary({s: points(runs[s], key, field) for s in measured})
    comparisons = {}
    for name, base in baselines.items():
        if not base or name not in curves or base not in curves:
            continue
        comparisons[name] = {"baseline": base}
        for metric, (key, field) in metrics.items():
            if metric not in curves[name] or metric not in curves[base]:
                continue
            ups = sorted(set(curves[name][metric]["updates"]) & set(curves[base][metric]["updates"]))
            comparisons[name][metric] = {
                u: _neutral(seed_difference({s: points(r, key, field)[u] for s, r in results[name].items()
                                             if s in seeds and u in points(r, key, field)},
                                            {s: points(r, key, field)[u] for s, r in results[base].items()
                                             if s in seeds and u in points(r, key, field)},
                                            higher_is_better=metric not in LOSSES), metric in GAPS)
                for u in ups}
    return curves, comparisons


def _data_record_of(out_dir, data_id):
    """The data OUT_DIR's runs were trained on (OUT_DIR/data.json). An out-dir without one
    (made before it was kept) gets DATA_ID written, after what can be checked: the data of
    the report it holds (quality.json), and that runs made before --src / --tgt reached the
    trainings are of the default direction (fairseq then guessed it from file names).
    ValueError: the record cannot be read, or such an out-dir cannot be adopted."""
    path = os.path.join(out_dir, "data.json")
    if os.path.exists(path):
        recorded = _read_json(path)
        if not (isinstance(recorded, dict) and set(recorded) == set(data_id)):
            raise ValueError(f"{path} is not a data record of fairseq-ctx-quality-compare: move it away "
                             "(and the runs beside it, unless they were trained on this data)")
        return recorded
    runs = os.path.join(out_dir, "runs")
    if os.path.isdir(runs) and os.listdir(runs):
        meta = (_read_json(os.path.join(out_dir, "quality.json")) or {}).get("meta") or {}
        for k in ("data_sha256", "test_refs_sha256"):
            if meta.get(k) and data_id[k] and meta[k] != data_id[k]:
                raise ValueError(f"{out_dir} holds runs of other data ({k} of its quality.json differs): pass "
                                 "another --out-dir")
        if (data_id["src"], data_id["tgt"]) != ("zh", "en"):
            raise ValueError(f"{out_dir} holds runs made before --src / --tgt reached fairseq-train (it took the "
                             f"direction from file names): they are not adopted for {data_id['src']} -> "
                             f"{data_id['tgt']}; pass another --out-dir")
        if not meta.get("data_sha256"):
            print(f"[quality] warning: {out_dir} holds runs from before data.json was kept and no report to check "
                  "their data against: they are reused as trained on this data", file=sys.stderr)
    _write_json(path, data_id)
    return data_id


def main(argv=None, train_fn=train, eval_fn=evaluate, train_loss_fn=train_set_loss):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # under the work directory (FAIRSEQ_CTX_WORK; a checkout's work/), where make demo prepares
    # the demo's data, not under whatever directory the command is run from
    p.add_argument("--data-dir", default=os.path.join(WORK_DIR, "demo", "data"),
                   help="default %(default)s; prepared data: bin/ (fairseq-preprocess) + raw/test.TGT (raw/valid.TGT with --valid-bleu); "
                        "a new or empty directory (or one a Tatoeba preparation was started in) is prepared "
                        "with fairseq-ctx-prepare-data tatoeba (scripts/prepare-tatoeba.sh)")
    p.add_argument("--prep-args", default="", help="extra prepare-tatoeba.sh options (fairseq-ctx-prepare-data tatoeba --help)")
    p.add_argument("--configs", nargs="+", default=["*"],
                   help="globs over configs/demo/*.args names (default: all)")
    p.add_argument("--config-dir", default=os.path.join(CONFIGS, "demo"))
    p.add_argument("--common", default=None, help="training settings file (default CONFIG_DIR/train.common)")
    p.add_argument("--pair", action="append", default=[], metavar="SYSTEM=BASELINE")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--updates", type=int, default=2000, help="fixed update budget per run")
    p.add_argument("--beam", type=int, default=DEMO.beam, help=f"default {DEMO.beam}: fairseq-ctx-evaluate --paper demo's")
    p.add_argument("--threads", type=int, default=0,
                   help="OMP/MKL threads of each training and generation run")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs at a time (e.g. 2 jobs x 1 thread on 2 cores; on a node with N GPUs, each "
                        "run sees one of them: --jobs N puts one run on each, more jobs share them)")
    p.add_argument("--all-gpus-per-run", action="store_true",
                   help="let every run see all visible GPUs (fairseq-train then trains it data-parallel "
                        "on all of them: N times the tokens per update of a one-GPU run); default: one "
                        "GPU per run, so that the settings mean the same batch on any machine")
    p.add_argument("--n-samples", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--curve-updates", default="", metavar="U1,U2,...",
                   help="learning curve: also score the checkpoints at these update counts "
                        "(saved every gcd(list) updates; validation on at the same interval); "
                        "the final --updates is always the last point")
    p.add_argument("--valid-bleu", action="store_true",
                   help="also translate and score every scored checkpoint on the valid subset "
                        "(DATA_DIR/raw/valid.TGT): choose among configs on valid BLEU, report test")
    p.add_argument("--train-loss", action="store_true",
                   help="also measure each run's final checkpoint on the training subset and on valid "
                        "(eval mode, the training's criterion, every sentence; one pass over the training "
                        "data per run) and report both with valid - train: does a system that is behind "
                        "fit its training data worse, or generalise worse")
    p.add_argument("--curve-png", default=None, help="learning-curve plot (default OUT_DIR/curves.png)")
    p.add_argument("--keep-checkpoints", action="store_true",
                   help="keep each run's checkpoints after scoring (default: deleted); a rerun with "
                        "another --beam or generation options then scores them again instead of training, "
                        "and one with a larger --updates continues them instead of training from the start, "
                        "where fairseq resumes exactly (not under cosine / tri_stage / reduce_lr_on_plateau, "
                        "--patience, fp16 / bf16 / amp, --reset-*, --restore-file: see the module's help)")
    p.add_argument("--import-runs", action="append", default=[], metavar="QUALITY_JSON",
                   help="use the runs of an earlier report (its quality.json: same settings, e.g. seeds "
                        "trained on another machine) for the asked-for seeds OUT_DIR has not run; "
                        "their translations are not kept, so they get seed-level statistics and "
                        "curves but no bootstrap")
    p.add_argument("--import-other-versions", action="store_true",
                   help="import reports made with other torch / fairseq / sacrebleu versions (named in the report)")
    p.add_argument("--out-dir", default=os.path.join(WORK_DIR, "quality"), help="default %(default)s")
    p.add_argument("--json", default=None, help="default OUT_DIR/quality.json")
    p.add_argument("--markdown", default=None, help="default OUT_DIR/quality.md")
    p.add_argument("--src", default="zh", help="source language of the data (every training and scoring)")
    p.add_argument("--tgt", default="en", help="target language")
    p.add_argument("gen_args", nargs="*", help="extra fairseq-generate arguments (after --)")
    a = p.parse_args(argv)
    try:
        curve_updates = parse_curve_updates(a.curve_updates, a.updates)
    except ValueError as error:
        p.error(f"--curve-updates: {error}")

    names = set()
    for g in a.configs:
        for path in glob.glob(os.path.join(a.config_dir, g + ".args")):
            names.add(os.path.basename(path)[: -len(".args")])
    if not names:
        p.error(f"no config matches {a.configs} in {a.config_dir}")
    configs = {n: read_args_file(os.path.join(a.config_dir, n + ".args")) for n in sorted(names)}
    try:
        baselines = assign_baselines(configs, a.pair)
    except ValueError as error:
        p.error(str(error))
    missing = {b for b in baselines.values() if b and b not in configs}
    if missing:
        p.error(f"baselines {missing} are not among the selected configs")
    for line in baseline_warnings(configs, baselines):
        print(f"[quality] warning: {line}", file=sys.stderr)
    common_path = a.common or os.path.join(a.config_dir, "train.common")
    if not os.path.isfile(common_path):
        p.error(f"no training settings file {common_path}: "
                + ("--common names no file" if a.common else
                   f"put the settings every config shares (optimizer, batch, validation) in {a.config_dir}/"
                   "train.common or name a file with --common"))
    common = read_args_file(common_path)
    # the direction is --src / --tgt, given to every training and scoring: settings that name
    # another would be overridden in training only
    for where, words in [("--common", common), *((f"{n}.args", v) for n, v in configs.items())]:
        for aliases, wanted in ((("-s", "--source-lang"), a.src), (("-t", "--target-lang"), a.tgt)):
            given = {v for alias in aliases if (v := option_value(words, alias)) is not None}
            if given - {wanted}:
                p.error(f"{where} sets {aliases[1]} {sorted(given - {wanted})[0]}, this comparison is "
                        f"{a.src} -> {a.tgt}: set the direction with --src / --tgt")

    # the reports to import are read and checked before data preparation (minutes) where the
    # data is not needed: a wrong path, a report of other versions or a seed in two reports
    # fail in seconds
    software = _software()
    import_reports, imported, import_sources = [], {}, {}
    for path in a.import_runs:
        try:
            with open(path) as f:
                report = json.load(f)
            report_runs, report_meta = report["runs"], report["meta"]
            if not (isinstance(report_runs, dict) and isinstance(report_meta, dict)):
                raise TypeError("its runs and meta are not mappings")
        except (OSError, ValueError, KeyError, TypeError) as error:
            p.error(f"--import-runs {path}: not a quality_compare report ({error})")
        other = {k: (report_meta.get(k), software[k]) for k in IMPORT_MUST_MATCH if report_meta.get(k) != software[k]}
        if other and not a.import_other_versions:
            p.error(f"--import-runs {path}: made with other versions ("
                    + ", ".join(f"{k} {there} there, {here} here" for k, (there, here) in other.items())
                    + "); --import-other-versions to mix them anyway")
        import_reports.append((path, report_meta))
        import_sources[path] = {"git_commit": report_meta.get("git_commit"), "data_verified": "data_sha256" in report_meta,
                                **{k: report_meta.get(k) for k in IMPORT_MUST_MATCH}}
        for name in configs:
            for seed in a.seeds:
                runs_of_config = report_runs.get(name)
                if runs_of_config is None:
                    continue
                if not isinstance(runs_of_config, dict):
                    p.error(f"--import-runs {path}: not a quality_compare report (its runs of {name} are not a mapping)")
                rec = runs_of_config.get(str(seed))
                if rec is None:
                    continue
                if not (isinstance(rec, dict) and all(isinstance(rec.get(k) or {}, dict)
                                                      for k in ("curve", "valid", "valid_bleu"))):
                    p.error(f"--import-runs {path}: not a quality_compare report ({name} seed {seed} is not a run record)")
                if seed in imported.get(name, {}):
                    p.error(f"--import-runs: {name} seed {seed} is in both {imported[name][seed][1]} and {path}")
                imported.setdefault(name, {})[seed] = (rec, path)

    data_bin = os.path.join(a.data_dir, "bin")
    ref = os.path.join(a.data_dir, "raw", f"test.{a.tgt}")
    if not (os.path.isdir(data_bin) and os.path.exists(ref)):
        pair = f"{a.src}-{a.tgt}" if a.tgt == "en" else f"{a.tgt}-{a.src}"  # the script's pairs: zh-en, ja-en
        # Tatoeba is prepared only into a new directory or one it was being prepared in (the
        # script's DIR/settings; it resumes there): never into a user's own data, whose
        # outputs would then be scored against Tatoeba references
        started_here = (_read_text(os.path.join(a.data_dir, "settings")) or "").startswith(("pair=zh-en ", "pair=ja-en "))
        if os.path.isdir(a.data_dir) and os.listdir(a.data_dir) and not started_here:
            lacking = [path for path, there in ((data_bin + "/", os.path.isdir(data_bin)), (ref, os.path.exists(ref)))
                       if not there]
            p.error(f"--data-dir {a.data_dir} lacks {' and '.join(lacking)}: it needs the fairseq-preprocess output in "
                    f"bin/ and the raw (untokenised) test references in raw/test.{a.tgt} (raw/valid.{a.tgt} too for "
                    "--valid-bleu); only an empty or new --data-dir, or one a Tatoeba preparation was started in, "
                    "is prepared with Tatoeba")
        if pair not in ("zh-en", "ja-en"):
            p.error(f"no prepared data in {a.data_dir}, and Tatoeba, which this tool prepares when there is none, "
                    f"has zh-en and ja-en only (not {a.src} -> {a.tgt}): prepare bin/ and raw/test.{a.tgt} yourself")
        cmd = ["bash", TATOEBA_SCRIPT, "--pair", pair, "--src", a.src, "--tgt", a.tgt,
               "--out", a.data_dir, *shlex.split(a.prep_args)]
        print("[quality] preparing data: " + " ".join(cmd), file=sys.stderr)
        if subprocess.run(cmd, env=script_env()).returncode != 0:
            sys.exit("[quality] data preparation failed (its message is above); nothing was trained")
    refs = _read_lines(ref)
    valid_ref = os.path.join(a.data_dir, "raw", f"valid.{a.tgt}") if a.valid_bleu else None
    if valid_ref and not os.path.exists(valid_ref):
        p.error(f"--valid-bleu: no raw valid references at {valid_ref}")

    # every scored checkpoint translates the binarised split and checks it against the raw
    # references: a mismatch (raw and bin from two preparations) would fail after training
    for split, split_ref in (("test", ref), ("valid", valid_ref)):
        if split_ref is None:
            continue
        with open(split_ref, encoding="utf-8") as f:
            n_refs = sum(1 for _ in f)
        n_bin, index = binarised_sentences(data_bin, split, a.src, a.tgt)
        again = (f"move {a.data_dir} away and prepare it again (data preparation skips the steps it "
                 "finds done), or pass the --data-dir the data was prepared in")
        if n_bin == "missing":
            p.error(f"no binarised {split} split of {a.src} -> {a.tgt} in {data_bin} ({index}): {again}")
        if n_bin is not None and n_bin != n_refs:
            p.error(f"{index} holds {n_bin} sentences, {split_ref} {n_refs} references: the raw and binarised "
                    f"data come from different preparations; {again}")

    refs_sha256 = hashlib.sha256("".join(r + "\n" for r in refs).encode("utf-8")).hexdigest()
    data_sha256 = data_fingerprint(data_bin)
    for path, report_meta in import_reports:
        # the settings string names neither the data nor the software: check them here
        if report_meta.get("test_sentences") != len(refs) or report_meta.get("test_refs_sha256", refs_sha256) != refs_sha256:
            p.error(f"--import-runs {path}: scored on other test references ({report_meta.get('test_sentences')} "
                    f"sentences from {report_meta.get('data')}) than {ref} ({len(refs)})")
        if report_meta.get("data_sha256", data_sha256) != data_sha256:
            p.error(f"--import-runs {path}: trained on other data than {data_bin} (SHA-256 of its dictionaries "
                    "and binarised splits differ)")

    if curve_updates:
        g = curve_interval(curve_updates)
        print(f"[quality] learning curve at {', '.join(map(str, curve_updates + [a.updates]))} updates: "
              f"checkpoints and validation every {g} updates (up to {a.updates // g} checkpoints "
              "per run until it is scored)", file=sys.stderr)
    if a.threads:  # training and fairseq-generate subprocesses inherit it
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(a.threads)
    os.makedirs(a.out_dir, exist_ok=True)
    # runs are reused by their settings, which do not name the data: one out-dir, one data set
    data_id = {"data_sha256": data_sha256, "test_refs_sha256": refs_sha256, "src": a.src, "tgt": a.tgt}
    try:
        recorded = _data_record_of(a.out_dir, data_id)
    except ValueError as error:
        p.error(str(error))
    if recorded != data_id:
        differs = ", ".join(k for k in data_id if recorded.get(k) != data_id[k])
        p.error(f"{a.out_dir} holds runs of other data than {a.data_dir} ({differs} differ: "
                f"{os.path.join(a.out_dir, 'data.json')}); they would be reused as if trained on it: pass another "
                "--out-dir (or delete that file if the runs were trained on exactly this data)")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    gpus, gpus_per_run = None, None
    if "--cpu" not in common:
        gpus = gpus_to_spread_over(a.all_gpus_per_run, log)
        gpu_name, gpu_count = _probe_gpus()
        gpus_per_run = gpu_count if a.all_gpus_per_run and gpu_count > 1 else None
        if gpu_count == 0 and (gpu_name or "").startswith("unknown"):  # the probe failed
            log(f"[quality] warning: GPU {gpu_name}: runs are not given one GPU each (on a multi-GPU node "
                "fairseq-train would train each on all of them)")
    if gpus:
        log(f"[quality] {len(gpus)} GPUs: each run sees one (CUDA_VISIBLE_DEVICES "
            f"{', '.join(gpus)}), {a.jobs} run(s) at a time; --all-gpus-per-run to train each on all")
        models = sorted({_pinned_gpu_name(gpus, d) for d in gpus} - {None})
        models = [m for m in models if not m.startswith("unnamed GPU")]  # unreadable names tell no model
        if len(models) > 1:  # a seed's two runs may then train on two models: not bit-comparable, other speeds
            log(f"[quality] warning: the GPUs are of {len(models)} models ({', '.join(models)}): a seed's runs may "
                "train on different ones (each run's trained_with.gpu names its own); set CUDA_VISIBLE_DEVICES "
                "to GPUs of one model to pair like with like")
        if a.jobs < len(gpus):
            log(f"[quality] warning: --jobs {a.jobs} leaves {len(gpus) - a.jobs} of the {len(gpus)} GPUs idle")
    # another comparison writing the same report files would replace this one's report with its own
    # (each file whole, but of the other comparison): refused here, before any training. The plot
    # only where one can be drawn: curve points, valid BLEU, or validation (valid-loss curves)
    reports = [a.json or os.path.join(a.out_dir, "quality.json"), a.markdown or os.path.join(a.out_dir, "quality.md")]
    if curve_updates or a.valid_bleu or "--disable-validation" not in common:
        reports.append(a.curve_png or os.path.join(a.out_dir, "curves.png"))
    try:
        report_locks = _lock_reports(a.out_dir, reports)
    except RunInUse as error:
        p.error(str(error))
    try:
        try:
            results = run(configs, baselines, a.seeds, a.updates, common, data_bin, ref, a.out_dir,
                          a.beam, a.threads, a.gen_args, train_fn=train_fn, eval_fn=eval_fn, log=log,
                          jobs=a.jobs, curve_updates=curve_updates, keep_checkpoints=a.keep_checkpoints,
                          valid_ref=valid_ref, imported=imported, gpus=gpus, gpus_per_run=gpus_per_run,
                          langs=(a.src, a.tgt), train_loss=a.train_loss, train_loss_fn=train_loss_fn,
                          check_builds=(functools.partial(build_errors, common=common, data_bin=data_bin,
                                                          updates=a.updates, langs=(a.src, a.tgt), log=log)
                                        if train_fn is train else None))  # tests pass fake architectures
        except ImportedRunMismatch as error:  # found before any training
            p.error(f"--import-runs: {error}")
        except ConfigBuildErrors as error:  # found before any training
            p.error("fairseq-train would stop before the first update on these configs (nothing was trained):\n"
                    + "\n".join(f"  {name}: {why}" for name, why in error.errors.items()))
        except RunInUse as error:  # found before any training
            p.error(str(error))
        except RunFailed as error:  # the runs that finished are kept; none is trained again on a rerun
            print(f"[quality] {error}", file=sys.stderr)
            why = (f"its training diverged (fairseq stopped it on a non-finite loss). A report counts no diverged run: "
                   f"say so beside the report, and rerun without seed {error.seed} (--seeds) to report the others, "
                   "or change the settings (a lower --lr, a longer warm-up: then every run trains again)"
                   if error.diverged else "fix its cause and rerun")
            cause = str(error.cause).strip().splitlines()[0] if str(error.cause).strip() else type(error.cause).__name__
            sys.exit(f"[quality] {error.name} seed {error.seed} failed ({cause}): {why}. The runs that finished are kept in "
                     f"{a.out_dir} and are not trained again; no report was written.")
        used = {}
        first = {}  # runs a report had imported itself: the report they were first imported from
        for n in results:
            for s, r in sorted(results[n].items()):
                if r.get("imported_from"):
                    used.setdefault(r["imported_from"], {}).setdefault(n, []).append(s)
                if r.get("imported_first_from"):
                    first.setdefault(r["imported_first_from"], {}).setdefault(n, []).append(s)

        # a seed pair whose two runs come from different places (imported / here, two reports)
        def origin(rec):  # the report a run was first imported from (None: trained here)
            return rec.get("imported_first_from") or rec.get("imported_from")

        mixed = [f"{n} vs {b} seed {s}" for n, b in sorted(baselines.items()) if b
                 for s in a.seeds if s in results[n] and s in results[b] and origin(results[n][s]) != origin(results[b][s])]
        for pair in mixed:
            log(f"[quality] warning: {pair}: the two runs were trained in different places (see --import-runs)")
        # runs reused ("done already", imported) under edited model code would be compared as if equal
        by_code, unrecorded = runs_by_model_code(results, [n for n in configs if arch_of(configs[n]) not in STOCK_ARCHS])
        model_code_runs = by_code if set(by_code) - {software["model_code"]} else None
        for code, runs in sorted((model_code_runs or {}).items()):
            if code != software["model_code"]:
                log(f"[quality] warning: {len(runs)} run(s) trained with other model code ({code}; this code: "
                    f"{software['model_code']}): {', '.join(runs)}; to train them with this code, delete their run "
                    "directories (imported runs: leave out their --import-runs report)")
        # what trained the runs, against what this process would train them with
        runs_software, software_unrecorded = runs_by_software(
            {n: {sd: results[n][sd] for sd in a.seeds if sd in results[n]} for n in configs}, software,
            None if "--cpu" in common else _visible_gpu())
        runs_machines, machine_split, machine_unknown = runs_by_machine(
            {n: {sd: results[n][sd] for sd in a.seeds if sd in results[n]} for n in configs}, baselines)
        for pair in machine_split:
            log(f"[quality] warning: the two runs of a seed were trained on different kinds of machine ({pair})")
        regrouped, regrouping_unknown = runs_regrouped(results, a.seeds)
        if regrouped:
            log(f"[quality] warning: run(s) resumed with other batches than the uninterrupted training's: "
                f"{'; '.join(regrouped)}")
        if regrouping_unknown:
            log(f"[quality] run(s) resumed where whether the batches went on as the uninterrupted training's "
                f"is not known: {'; '.join(regrouping_unknown)}")
        add_length_statistics(results, refs, a.tgt)
        summary = {n: summarize([results[n][s]["bleu"] for s in a.seeds]) for n in configs}
        comparisons = compare(results, baselines, refs, a.tgt, a.n_samples)
        with_seed_and_sentence(comparisons, results, refs, _read_lines(valid_ref) if valid_ref else None, a.tgt)
        curves, curve_comparisons = learning_curves(results, baselines, a.seeds)
        meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "updates": a.updates, "seeds": a.seeds,
                "beam": a.beam, "data": a.data_dir, "src": a.src, "tgt": a.tgt, "test_sentences": len(refs),
                "test_refs_sha256": refs_sha256, "data_sha256": data_sha256, "valid_bleu": a.valid_bleu,
                "common": " ".join(common), "curve_updates": curve_updates + [a.updates], "train_loss": a.train_loss,
                "curve_training": (f"as common, without --disable-validation, plus --save-interval-updates "
                                   f"{curve_interval(curve_updates)} --keep-interval-updates -1 "
                                   f"--validate-interval-updates {curve_interval(curve_updates)}")
                if curve_updates else None,
                "imported": used or None, "imported_first": first or None,
                "import_sources": {src: import_sources[src] for src in used} or None, "mixed_pairs": mixed or None,
                "model_code_runs": model_code_runs, "model_code_unrecorded": unrecorded or None,
                "runs_software": runs_software, "runs_software_unrecorded": software_unrecorded or None,
                "runs_machines": runs_machines, "machine_split_pairs": machine_split or None,
                "runs_machine_unrecorded": machine_unknown or None,
                "runs_regrouped": regrouped or None, "runs_regrouping_unknown": regrouping_unknown or None,
                "command": " ".join(shlex.quote(x) for x in sys.argv), **software}
        # a plot only when there is a curve: intermediate BLEU points or logged validations
        has_valid_bleu = any((c.get("valid_bleu") or {}).get("updates") for c in curves.values())
        has_curve = any(len(c["bleu"]["updates"]) > 1 or c["valid_loss"]["updates"] for c in curves.values()) \
            or has_valid_bleu
        png = None
        if has_curve:
            from fairseq_ctx.analysis.learning_curves import plot_learning_curves

            png = a.curve_png or os.path.join(a.out_dir, "curves.png")
            pairs = [(n, b) for n, b in sorted(baselines.items()) if b] or [(n, None) for n in sorted(configs)]
            metrics = [("valid_loss", "valid loss"), ("bleu", "test BLEU")]
            if has_valid_bleu:
                metrics.append(("valid_bleu", "valid BLEU"))
            plot_learning_curves(curves, pairs, png, metrics=metrics,
                                 title=f"mean over seeds {', '.join(map(str, a.seeds))}, band: min-max")
        md_path = a.markdown or os.path.join(a.out_dir, "quality.md")
        png_in_md = os.path.relpath(png, os.path.dirname(os.path.abspath(md_path))) if png else None
        md = markdown(summary, comparisons, baselines, meta, curves if has_curve else None,
                      curve_comparisons, png_in_md)
        lengths, length_comparisons = length_markdown(results, baselines, a.seeds)
        if lengths:
            md = md.rstrip("\n") + "\n" + "\n".join(lengths) + "\n"
        fit = fit_markdown(results, baselines, a.seeds, a.updates)
        if fit:
            md = md.rstrip("\n") + "\n" + "\n".join(fit) + "\n"
        print(md)
        out = {"meta": meta, "configs": {n: " ".join(v) for n, v in configs.items()},
               "baselines": baselines, "summary": summary, "comparisons": comparisons,
               "curves": curves, "curve_comparisons": curve_comparisons, "curve_png": png,
               "length_comparisons": length_comparisons or None,
               "runs": {n: {str(s): {k: v for k, v in r.items() if k not in TRANSLATIONS}
                            for s, r in results[n].items()} for n in results}}
        # whole files or none: an interrupted report never looks complete; both are written before
        # either replaces its old version (then two renames), so a kill leaves no new JSON beside an old markdown
        with atomic_write(a.json or os.path.join(a.out_dir, "quality.json")) as json_file, \
                atomic_write(md_path) as md_file:
            json.dump(_strict(out), json_file, indent=1, allow_nan=False)
            md_file.write(md)
        return out
    finally:
        report_locks.close()


if __name__ == "__main__":
    main()
