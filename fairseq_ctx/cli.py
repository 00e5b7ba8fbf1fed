"""Console entry points (setup.py ``entry_points``); the files under scripts/ of a checkout
call the same functions. Each returns the exit status (console scripts pass it to
``sys.exit``, so a ``main`` that returns a report or a table must not hand it on).

    fairseq-ctx-reproduce TABLE [options]     a paper table (--dry-run, --smoke, --setting ...)
    fairseq-ctx-rehearsal                     every table at smoke scale
    fairseq-ctx-train CONFIG SETTING ...      one row's fairseq-train command
    fairseq-ctx-prepare-data CORPUS [options] the shipped data-preparation scripts
    fairseq-ctx-evaluate [--paper P] ...      evaluate one system (fairseq_ctx/evaluation/)
    fairseq-ctx-average-checkpoints / fairseq-ctx-length-buckets
    fairseq-ctx-benchmark / fairseq-ctx-quality-compare
    fairseq-ctx-make-concat-context / fairseq-ctx-strip-concat-context
    fairseq-ctx-gate-statistics / fairseq-ctx-routing-statistics
"""
import os
import shutil
import sys

from . import paths


def _status(result):
    return result if isinstance(result, int) else 0


def _argv(argv):
    return list(sys.argv[1:] if argv is None else argv)


# -- reproduction ---------------------------------------------------------------------------


def reproduce(argv=None):
    from .reproduce.tables import TABLES, main

    argv = _argv(argv)
    usage = ("usage: fairseq-ctx-reproduce TABLE [options]   (fairseq-ctx-reproduce TABLE --help: the options)\n"
             "tables: " + " ".join(TABLES))
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    table, rest = argv[0], argv[1:]
    if table not in TABLES:
        print(f"fairseq-ctx-reproduce: unknown table {table!r}\n{usage}", file=sys.stderr)
        return 2
    sys.argv[0] = f"fairseq-ctx-reproduce {table}"  # argparse's usage lines name the table
    return _status(main(table, rest))


def rehearsal(argv=None):
    from .reproduce.rehearsal import main

    return _status(main(argv))


def train(argv=None):
    from .reproduce.train import main

    return _status(main(argv))


# -- data preparation -----------------------------------------------------------------------

DATA_SCRIPTS = {  # corpus -> (shipped script, one line for --help)
    "tatoeba": (paths.TATOEBA_SCRIPT, "Tatoeba zh-en / ja-en: small real corpus of the demo and the tests"),
    "wmt": (os.path.join(paths.DATA_SCRIPTS, "prepare-wmt.sh"),
            "a WMT corpus of the papers: --corpus wmt14-en-de|wmt17-zh-en|wmt14-en-fr"),
    "wmt14-en-de": (os.path.join(paths.DATA_SCRIPTS, "prepare-wmt14-en-de.sh"), "WMT14 En-De (wmt's options)"),
    "wmt14-en-fr": (os.path.join(paths.DATA_SCRIPTS, "prepare-wmt14-en-fr.sh"), "WMT14 En-Fr (wmt's options)"),
    "wmt17-zh-en": (os.path.join(paths.DATA_SCRIPTS, "prepare-wmt17-zh-en.sh"), "WMT17 Zh-En (wmt's options)"),
    "aspec": (os.path.join(paths.DATA_SCRIPTS, "prepare-aspec.sh"),
              "ASPEC Ja-En / En-Ja from a local ASPEC-JE copy (--local-dir)"),
    "opensubtitles": (os.path.join(paths.DATA_SCRIPTS, "prepare-opensubtitles.sh"),
                      "OpenSubtitles2018 Ja-En / En-Ja, sentence-level and 2-to-2 context"),
}


def prepare_data(argv=None):
    argv = _argv(argv)
    if not argv or argv[0] in ("-h", "--help"):
        lines = ["usage: fairseq-ctx-prepare-data CORPUS [options]   (CORPUS --help: the script's options;",
                 "       its usage line names the script's path in a checkout, scripts/...)",
                 f"Outputs go under {paths.WORK_DIR} (where fairseq-ctx-reproduce looks) unless --out is given.", "", "corpora:"]
        lines += [f"  {name:14s} {summary}" for name, (_, summary) in DATA_SCRIPTS.items()]
        print("\n".join(lines), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    corpus, rest = argv[0], argv[1:]
    if corpus not in DATA_SCRIPTS:
        print(f"fairseq-ctx-prepare-data: unknown corpus {corpus!r}; one of {', '.join(DATA_SCRIPTS)}",
              file=sys.stderr)
        return 2
    bash = shutil.which("bash")
    if bash is None:
        print("fairseq-ctx-prepare-data: the data-preparation scripts need bash on PATH", file=sys.stderr)
        return 2
    # exec: the script's exit status and signals (Ctrl-C) are the command's own
    os.execve(bash, [bash, DATA_SCRIPTS[corpus][0], *rest], paths.script_env())


# -- evaluation and analysis ----------------------------------------------------------------


def evaluate(argv=None):
    from .evaluation.command import main

    return _status(main(argv))


def average_checkpoints(argv=None):
    from .evaluation.average import main

    return _status(main(argv))


def gate_statistics(argv=None):
    from .analysis.model_statistics import main

    return _status(main("gates", argv))


def routing_statistics(argv=None):
    from .analysis.model_statistics import main

    return _status(main("routing", argv))


def length_buckets(argv=None):
    from .evaluation.length_buckets import main

    return _status(main(argv))


def benchmark(argv=None):
    from .benchmarking.cli import exit_status, main

    return exit_status(main(argv))  # 1 when a system failed (main returns the results)


def quality_compare(argv=None):
    from .quality_compare import main

    return _status(main(argv))


def make_concat_context(argv=None):
    from .data.concat_context import make_main

    return make_main(argv)


def strip_concat_context(argv=None):
    from .data.concat_context import strip_main

    return strip_main(argv)
