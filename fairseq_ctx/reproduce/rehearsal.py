"""Dress rehearsal: every reproduced table at smoke scale, one after another, into one
results directory (so tables that share a trained model, e.g. Yang Tables 1 and 3, train it
once), then one line per table; exits non-zero if any cell of any table failed.

    python -m fairseq_ctx.reproduce.rehearsal [--results work/smoke] [--jobs 2] [--tables KEY ...]

Run it on a cluster before spending the cluster: it drives the same data scripts, training
settings, averaging, evaluation, significance and table code as the full runs.
"""
import argparse
import os
import sys
import time

from ..paths import WORK_DIR
from .runner import main as run_table
from .tables import TABLES

# tables that reuse another table's models come after it
ORDER = ["yang2019_table1", "yang2019_table2", "yang2019_table3", "cao_table1", "cao_table2", "wang2019_table1",
         "wang2019_table2", "iida2019_table2", "iida2019_table3", "iida2019_table4", "iida2019_table5"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=os.path.join(WORK_DIR, "smoke"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tables", nargs="+", choices=ORDER, default=ORDER)
    args = parser.parse_args(argv)
    assert sorted(ORDER) == sorted(TABLES), "a table is missing from the rehearsal order"
    outcome = []
    start = time.time()
    for key in [k for k in ORDER if k in args.tables]:
        began = time.time()
        try:
            run_table(key, ["--smoke", "--results", args.results, "--jobs", str(args.jobs),
                            "--output", os.path.join(args.results, f"{key}.md")])
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
            if stop.code and not isinstance(stop.code, int):
                print(stop.code, file=sys.stderr, flush=True)
        except Exception as error:  # noqa: BLE001  (one table's crash must not stop the rehearsal)
            code = 1
            print(f"rehearsal: {key} crashed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        outcome.append((key, code, time.time() - began))
    print("\nrehearsal summary:")
    for key, code, seconds in outcome:
        print(f"  {key:18s} {'ok' if code == 0 else f'FAILED (exit {code})':18s} {seconds:6.0f}s")
    failed = [key for key, code, _ in outcome if code]
    print(f"rehearsal: {len(outcome) - len(failed)} of {len(outcome)} tables ok in {time.time() - start:.0f}s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
