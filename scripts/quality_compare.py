#!/usr/bin/env python
"""Real-data quality comparison: every config of configs/demo/*.args vs its stock baseline.

Each config is trained with the demo's training settings (configs/demo/train.common),
the SAME fixed update budget and each of the seeds (default 3), on the Tatoeba zh-en data
prepared by scripts/prepare-tatoeba.sh; every checkpoint translates the whole test set
through fairseq_ctx.evaluate (``--required-batch-size-multiple 1``, every sentence
checked, detokenised, sacreBLEU against the raw references). Reported per config: BLEU
per seed, mean, sample standard deviation, min-max; per system vs its baseline: the mean
difference, and sacreBLEU's paired bootstrap resampling test (``paired_bs``, 1000
resamples, sacreBLEU's fixed seed 12345) both per seed (system seed s vs baseline seed
s) and pooled (the seeds' test outputs concatenated, references repeated).

Baselines: a config whose ``--arch`` is a stock fairseq arch (``transformer``, ``lstm``)
is a baseline; another config is compared with the baseline of its family (arch name
starting with ``lstm`` -> the lstm baseline, else the transformer one). Override with
``--pair SYSTEM=BASELINE`` (config names without ``.args``).

Finished runs (same settings) are not retrained, so an interrupted comparison resumes.

    .venv/bin/python scripts/quality_compare.py --updates 2000 --seeds 1 2 3 \\
        --out-dir work/quality --markdown work/quality/table.md

Tiny smoke budget (minutes on 2 CPU cores): ``--updates 20 --configs '00-*' '01-*'``.
"""
import argparse
import concurrent.futures
import glob
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

STOCK_ARCHS = {"transformer": "transformer", "lstm": "lstm"}  # arch -> family


def read_args_file(path):
    with open(path) as f:
        return shlex.split(f.read(), comments=True)


def arch_of(args):
    for i, a in enumerate(args):
        if a in ("--arch", "-a") and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--arch="):
            return a.split("=", 1)[1]
    raise ValueError(f"no --arch in {args}")


def family_of(arch):
    return "lstm" if arch.startswith("lstm") else "transformer"


def assign_baselines(configs, pairs=None):
    """configs: {name: args}. Returns {name: baseline name or None (a baseline)}."""
    base_of_family = {}
    for name in sorted(configs):
        arch = arch_of(configs[name])
        if arch in STOCK_ARCHS:
            base_of_family.setdefault(STOCK_ARCHS[arch], name)
    out = {}
    for name in configs:
        arch = arch_of(configs[name])
        if arch in STOCK_ARCHS and base_of_family.get(STOCK_ARCHS[arch]) == name:
            out[name] = None
        else:
            out[name] = base_of_family.get(family_of(arch))
    for text in pairs or []:
        sys_name, base = text.split("=", 1)
        if sys_name not in configs or base not in configs:
            raise ValueError(f"--pair {text}: unknown config")
        out[sys_name] = base
    return out


# ---------------------------------------------------------------------------------------
# Training and evaluation (real)
# ---------------------------------------------------------------------------------------

def train(data_bin, common, arch_args, updates, seed, save_dir, log_path, threads=0):
    cmd = [sys.executable, "-m", "fairseq_cli.train", data_bin, "--user-dir",
           os.path.join(ROOT, "fairseq_ctx"), *common, *arch_args,
           "--max-update", str(updates), "--seed", str(seed), "--save-dir", save_dir]
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    t0 = time.time()
    with open(log_path, "w") as log:
        log.write(" ".join(shlex.quote(c) for c in cmd) + "\n")
        log.flush()
        p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    if p.returncode != 0:
        with open(log_path) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"training failed (rc {p.returncode}), log {log_path}:\n{tail}")
    return time.time() - t0


def evaluate(data_bin, ckpt, ref, beam, out_dir, src="zh", tgt="en", gen_args=()):
    from fairseq_ctx.evaluate import evaluate as lead_evaluate

    res = lead_evaluate(data_bin, ckpt, src, tgt, ref, beam=beam, out_dir=out_dir,
                        extra_args=list(gen_args))
    with open(os.path.join(out_dir, f"hyp.detok.{tgt}"), encoding="utf-8") as f:
        hyps = [line.rstrip("\n") for line in f]
    return res, hyps


# ---------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------

def summarize(bleus):
    xs = list(bleus)
    return {
        "bleu": xs,
        "mean": statistics.mean(xs) if xs else float("nan"),
        "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
        "min": min(xs) if xs else float("nan"),
        "max": max(xs) if xs else float("nan"),
    }


def paired_bs(base_hyps, sys_hyps, refs, tgt="en", n_samples=1000):
    """sacreBLEU's paired bootstrap resampling (the API behind ``--paired-bs``)."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    from fairseq_ctx.evaluate import sacrebleu_tokenizer

    assert len(base_hyps) == len(sys_hyps) == len(refs)
    metric = BLEU(tokenize=sacrebleu_tokenizer(tgt))
    test = PairedTest([("baseline", base_hyps), ("system", sys_hyps)], {"BLEU": metric},
                      references=[refs], test_type="bs", n_samples=n_samples)
    sigs, scores = test()
    b, s = scores["BLEU"][0], scores["BLEU"][1]
    return {"baseline_bleu": b.score, "system_bleu": s.score, "p_value": s.p_value,
            "system_mean": s.mean, "system_ci": s.ci, "baseline_mean": b.mean,
            "baseline_ci": b.ci, "signature": str(sigs["BLEU"])}


def compare(results, baselines, refs, tgt="en", n_samples=1000, alpha=0.05):
    """results: {config: {seed: {"bleu": x, "hyps": [...]}}} -> per-system comparisons."""
    out = {}
    for name, base in baselines.items():
        if base is None or name not in results or base not in results:
            continue
        seeds = sorted(set(results[name]) & set(results[base]))
        per_seed = {}
        for s in seeds:
            per_seed[s] = paired_bs(results[base][s]["hyps"], results[name][s]["hyps"], refs,
                                    tgt, n_samples)
        pooled = None
        if len(seeds) > 1:
            pooled = paired_bs(sum((results[base][s]["hyps"] for s in seeds), []),
                               sum((results[name][s]["hyps"] for s in seeds), []),
                               refs * len(seeds), tgt, n_samples)
        diffs = [results[name][s]["bleu"] - results[base][s]["bleu"] for s in seeds]
        out[name] = {
            "baseline": base, "seeds": seeds,
            "mean_diff": statistics.mean(diffs) if diffs else float("nan"),
            "diffs": diffs,
            "per_seed": per_seed, "pooled": pooled,
            "significant_better": sum(1 for s in seeds if per_seed[s]["p_value"] < alpha
                                      and per_seed[s]["system_bleu"] > per_seed[s]["baseline_bleu"]),
            "significant_worse": sum(1 for s in seeds if per_seed[s]["p_value"] < alpha
                                     and per_seed[s]["system_bleu"] < per_seed[s]["baseline_bleu"]),
        }
    return out


def _f(x, nd=2):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def markdown(summary, comparisons, baselines, meta):
    lines = [
        f"# Quality on real data (Tatoeba zh-en, {meta['updates']} updates, seeds "
        f"{', '.join(map(str, meta['seeds']))})",
        "",
        f"- date: {meta['date']}; data: `{meta['data']}` ({meta['test_sentences']} test sentences); "
        f"beam {meta['beam']}; training settings: `{meta['common']}`",
        "- BLEU: sacreBLEU on detokenised output vs raw references (see signature in the JSON).",
        "- p: sacreBLEU paired bootstrap (1000 resamples) vs the baseline; per seed, and "
        "pooled over the seeds' concatenated outputs.",
        "",
        "| config | baseline | BLEU per seed | mean | std | Δ mean vs baseline | p per seed | p pooled | sig. better / worse (p<0.05) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in sorted(summary):
        s = summary[name]
        c = comparisons.get(name)
        lines.append("| " + " | ".join([
            name, baselines.get(name) or "(baseline)",
            " / ".join(_f(b) for b in s["bleu"]), _f(s["mean"]), _f(s["std"]),
            _f(c["mean_diff"]) if c else "",
            " / ".join(_f(c["per_seed"][k]["p_value"], 3) for k in c["seeds"]) if c else "",
            _f(c["pooled"]["p_value"], 3) if c and c["pooled"] else "",
            f"{c['significant_better']} / {c['significant_worse']}" if c else "",
        ]) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------

def run(configs, baselines, seeds, updates, common, data_bin, ref, out_dir, beam=5,
        threads=0, gen_args=(), train_fn=train, eval_fn=evaluate, log=print, jobs=1):
    """Train + evaluate every (config, seed) not done already; returns results.

    Runs go seed by seed (every config's seed 1 before any seed 2), ``jobs`` at a time,
    so an interrupted comparison already holds whole seeds of every config.
    """
    settings_common = f"updates={updates} beam={beam} common={' '.join(common)} gen={' '.join(gen_args)}"
    results = {name: {} for name in configs}
    todo = []
    for seed in seeds:
        for name in sorted(configs):
            run_dir = os.path.join(out_dir, "runs", name, f"seed{seed}")
            settings = f"{settings_common} args={' '.join(configs[name])} seed={seed}"
            done = os.path.join(run_dir, "result.json")
            if os.path.exists(done):
                with open(done) as f:
                    prev = json.load(f)
                if prev.get("settings") == settings:
                    results[name][seed] = prev
                    log(f"[quality] {name} seed {seed}: done already (BLEU {prev['bleu']})")
                    continue
            todo.append((name, seed, run_dir, settings))

    def one_run(name, seed, run_dir, settings):
        os.makedirs(run_dir, exist_ok=True)
        log(f"[quality] {name} seed {seed}: training {updates} updates ({time.strftime('%H:%M:%S')})")
        ckpt_dir = os.path.join(run_dir, "checkpoints")
        train_s = train_fn(data_bin, common, configs[name], updates, seed, ckpt_dir,
                           os.path.join(run_dir, "train.log"), threads)
        t0 = time.time()
        res, hyps = eval_fn(data_bin, os.path.join(ckpt_dir, "checkpoint_last.pt"), ref, beam,
                            os.path.join(run_dir, "eval"), gen_args=gen_args)
        rec = {"settings": settings, "bleu": res["bleu"], "signature": res.get("signature"),
               "sentences": res.get("sentences"), "train_seconds": round(train_s, 1),
               "eval_seconds": round(time.time() - t0, 1), "hyps": hyps}
        done = os.path.join(run_dir, "result.json")
        with open(done + ".partial", "w") as f:  # a run counts as done only when complete
            json.dump(rec, f)
        os.replace(done + ".partial", done)
        # checkpoints are large and not needed once scored
        for p in glob.glob(os.path.join(ckpt_dir, "*.pt")):
            os.remove(p)
        log(f"[quality] {name} seed {seed}: BLEU {res['bleu']} "
            f"(train {train_s:.0f}s, eval {rec['eval_seconds']:.0f}s)")
        return name, seed, rec

    # each run is a training and a generation subprocess: threads here only wait on them
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one_run, *job) for job in todo]
        try:
            for future in futures:
                name, seed, rec = future.result()
                results[name][seed] = rec
        except BaseException:
            for future in futures:  # runs not started yet are dropped, running ones finish
                future.cancel()
            raise
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default="work/demo/data",
                   help="prepared Tatoeba dir (bin/ + raw/test.TGT); prepared with "
                        "scripts/prepare-tatoeba.sh if missing")
    p.add_argument("--prep-args", default="", help="extra scripts/prepare-tatoeba.sh options")
    p.add_argument("--configs", nargs="+", default=["*"],
                   help="globs over configs/demo/*.args names (default: all)")
    p.add_argument("--config-dir", default=os.path.join(ROOT, "configs", "demo"))
    p.add_argument("--common", default=None, help="training settings file (default CONFIG_DIR/train.common)")
    p.add_argument("--pair", action="append", default=[], metavar="SYSTEM=BASELINE")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--updates", type=int, default=2000, help="fixed update budget per run")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--threads", type=int, default=0,
                   help="OMP/MKL threads of each training and generation run")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs at a time (e.g. 2 jobs x 1 thread on 2 cores)")
    p.add_argument("--n-samples", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--out-dir", default="work/quality")
    p.add_argument("--json", default=None, help="default OUT_DIR/quality.json")
    p.add_argument("--markdown", default=None, help="default OUT_DIR/quality.md")
    p.add_argument("--src", default="zh")
    p.add_argument("--tgt", default="en")
    p.add_argument("gen_args", nargs="*", help="extra fairseq-generate arguments (after --)")
    a = p.parse_args(argv)

    names = set()
    for g in a.configs:
        for path in glob.glob(os.path.join(a.config_dir, g + ".args")):
            names.add(os.path.basename(path)[: -len(".args")])
    if not names:
        p.error(f"no config matches {a.configs} in {a.config_dir}")
    configs = {n: read_args_file(os.path.join(a.config_dir, n + ".args")) for n in sorted(names)}
    baselines = assign_baselines(configs, a.pair)
    missing = {b for b in baselines.values() if b and b not in configs}
    if missing:
        p.error(f"baselines {missing} are not among the selected configs")
    for n, b in baselines.items():
        if b is None and arch_of(configs[n]) not in STOCK_ARCHS:
            print(f"[quality] warning: {n} has no baseline among the selected configs", file=sys.stderr)
    common = read_args_file(a.common or os.path.join(a.config_dir, "train.common"))

    data_bin = os.path.join(a.data_dir, "bin")
    ref = os.path.join(a.data_dir, "raw", f"test.{a.tgt}")
    if not (os.path.isdir(data_bin) and os.path.exists(ref)):
        cmd = ["bash", os.path.join(ROOT, "scripts", "prepare-tatoeba.sh"), "--pair",
               f"{a.src}-{a.tgt}", "--out", a.data_dir, *shlex.split(a.prep_args)]
        print("[quality] preparing data: " + " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
    with open(ref, encoding="utf-8") as f:
        refs = [line.rstrip("\n") for line in f]

    if a.threads:  # training and fairseq-generate subprocesses inherit it
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(a.threads)
    os.makedirs(a.out_dir, exist_ok=True)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    results = run(configs, baselines, a.seeds, a.updates, common, data_bin, ref, a.out_dir,
                  a.beam, a.threads, a.gen_args, log=log, jobs=a.jobs)
    summary = {n: summarize([results[n][s]["bleu"] for s in a.seeds]) for n in configs}
    comparisons = compare(results, baselines, refs, a.tgt, a.n_samples)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "updates": a.updates, "seeds": a.seeds,
            "beam": a.beam, "data": a.data_dir, "test_sentences": len(refs),
            "common": " ".join(common), "command": " ".join(shlex.quote(x) for x in sys.argv)}
    md = markdown(summary, comparisons, baselines, meta)
    print(md)
    out = {"meta": meta, "configs": {n: " ".join(v) for n, v in configs.items()},
           "baselines": baselines, "summary": summary, "comparisons": comparisons,
           "runs": {n: {str(s): {k: v for k, v in r.items() if k != "hyps"}
                        for s, r in results[n].items()} for n in results}}
    with open(a.json or os.path.join(a.out_dir, "quality.json"), "w") as f:
        json.dump(out, f, indent=1)
    with open(a.markdown or os.path.join(a.out_dir, "quality.md"), "w") as f:
        f.write(md)
    return out


if __name__ == "__main__":
    main()
