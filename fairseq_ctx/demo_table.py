"""Record one demo row and print the demo's BLEU table (used by scripts/demo.sh).

  python -m fairseq_ctx.demo_table record --run-dir DIR --row NAME --train-seconds S --eval-seconds S
  python -m fairseq_ctx.demo_table show --demo-dir DIR --rows NAME [NAME ...]
"""
import argparse
import json
import os
import re

from .atomic import atomic_write


def count_parameters(train_log):
    # "num. model params: N" (fairseq 0.12.2) or "num. shared model params: N" (later)
    match = re.search(r"num\. (?:shared )?model params: ([\d,]+)", train_log)
    return int(match.group(1).replace(",", "")) if match else None


def record(args):
    """The row's record (run dir/bleu.json): fairseq-ctx-evaluate's sacreBLEU (eval/result.json),
    the parameter and update counts of its training log, and the times."""
    with open(os.path.join(args.run_dir, "eval", "result.json"), encoding="utf-8") as handle:
        evaluated = json.load(handle)
    result = {**evaluated["sacrebleu"], "sentences": evaluated["sentences"], "checkpoint": evaluated["checkpoint"],
              "beam": evaluated["beam"], "tokenized_bleu": evaluated["tokenized"]["bleu"]}
    with open(os.path.join(args.run_dir, "train.log"), encoding="utf-8") as handle:
        log = handle.read()
    updates = re.findall(r"num_updates[= ](\d+)", log)  # train_inner: "=", epoch summary: " "
    result.update(row=args.row, params=count_parameters(log), updates=int(updates[-1]) if updates else None,
                  train_seconds=args.train_seconds, eval_seconds=args.eval_seconds)
    with atomic_write(os.path.join(args.run_dir, "bleu.json")) as handle:
        json.dump(result, handle, indent=1)


def show(args):
    rows, signatures = [], set()
    for row in args.rows:
        path = os.path.join(args.demo_dir, "runs", row, "bleu.json")
        if not os.path.exists(path):
            rows.append((row, "-", "-", "-", "-", "missing"))
            continue
        with open(path, encoding="utf-8") as handle:
            r = json.load(handle)
        signatures.add(r["signature"])
        params = f"{r['params'] / 1e6:.2f}M" if r.get("params") else "?"
        rows.append((row, params, str(r.get("updates")), f"{r['train_seconds']}s", str(r["sentences"]), f"{r['bleu']:.2f}"))
    header = ("row", "params", "updates", "train time", "test sents", "BLEU")
    widths = [max(len(str(x[i])) for x in [header, *rows]) for i in range(len(header))]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    table = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]
    table += [f"sacreBLEU signature: {s}" for s in sorted(signatures)]
    text = "\n".join(table)
    print(text)
    with atomic_write(os.path.join(args.demo_dir, "table.md")) as handle:
        handle.write(text + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--run-dir", required=True)
    rec.add_argument("--row", required=True)
    rec.add_argument("--train-seconds", type=int, required=True)
    rec.add_argument("--eval-seconds", type=int, required=True)
    sh = sub.add_parser("show")
    sh.add_argument("--demo-dir", required=True)
    sh.add_argument("--rows", nargs="+", required=True)
    args = parser.parse_args(argv)
    (record if args.command == "record" else show)(args)


if __name__ == "__main__":
    main()
