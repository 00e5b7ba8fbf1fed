"""Reproduction entries: every table prints every row's training + evaluation commands
(--dry-run), and the parameter-count tables build the real models and land on the papers'
numbers (Iida Table 5, Yang Table 1, Wang Table 1)."""
import os
import re
import subprocess
import sys

import pytest

from fairseq_ctx.reproduce import params, tables
from fairseq_ctx.reproduce.train import CONFIGS
from tests.conftest import ROOT, cli_env

MODELS = os.path.join(ROOT, "fairseq_ctx", "models")


def needs(*archs):
    missing = [a for a in archs if not os.path.exists(os.path.join(MODELS, f"{a}.py"))]
    return pytest.mark.skipif(bool(missing), reason=f"architecture file(s) not landed yet: {missing}")


def test_every_table_row_has_a_config_that_exists():
    for key, table in tables.TABLES.items():
        for row in table.rows:
            assert os.path.exists(os.path.join(CONFIGS, row.config)), (key, row.config)


@pytest.mark.parametrize("key", sorted(tables.TABLES))
def test_dry_run_prints_train_and_eval_for_every_cell(key, tmp_path, capsys):
    table = tables.TABLES[key]
    text = tables.main(key, ["--dry-run", "--results", str(tmp_path),
                             "--data-root", "/data"])
    out = capsys.readouterr().out
    trains = [line for line in out.splitlines() if "fairseq_cli.train" in line]
    evals = [line for line in out.splitlines() if "-m fairseq_ctx.evaluation " in line]
    assert len(trains) == len(table.rows) * len(table.columns)
    assert len(evals) == len(trains) if table.kind != "length" else len(evals) >= len(trains)
    batches = [line for line in out.splitlines() if "effective batch:" in line]
    assert len(batches) == len(trains)  # one per cell, as a plain integer
    assert all(re.search(r"effective batch: \d+ tokens", line) for line in batches)
    if table.columns:
        assert all("--save-dir" in line and "--user-dir" in line for line in trains)
        assert all("--required-batch-size-multiple 1" in line for line in trains)
        assert text.count("missing") >= len(table.rows) * len(table.columns)  # nothing trained yet
    if key == "iida2019_table2":
        assert all("--no-epoch-checkpoints" in line for line in trains)  # checkpoint_best / _last only
        assert all("--remove-bpe sentencepiece" in line for line in evals)
        assert sum("--strip-concat" in line and "bin-concat" in line for line in evals) == 2 * len(table.rows)
        assert all("--max-tokens 2000" in line and "--distributed-world-size 2" in line and "nag" in line
                   for line in trains)
    data = [line for line in out.splitlines() if line.startswith("# data: ")]
    assert len(data) == len({(c.data, c.bin) for c in table.columns})  # each binarised directory once
    assert all(line.endswith(f"--out /data/{line.split()[2].split('/')[2]})") for line in data)
    if key == "cao_table1":
        assert all("--update-freq 12" in line and "wmt17-zh-en-len50" in line for line in trains)
        cwmt = " ".join(f"--extra-train CWMT/{part}" for part in
                        ("casia2015", "casict2011", "casict2015", "datum2015", "datum2017", "neu2017"))
        assert data == ["# data: /data/wmt17-zh-en-len50/bin (missing /data/wmt17-zh-en-len50/bin/dict.zh.txt: "
                        f"fairseq-ctx-prepare-data wmt17-zh-en --max-len 49 {cwmt} --out /data/wmt17-zh-en-len50)"]
    if key == "iida2019_table3":  # the per-length test sets need --length-eval
        assert data[0].endswith("--length-eval --direction ja-en --out /data/aspec-ja-en)")
    if key == "yang2019_table1":
        assert all("--max-tokens 4096" in line and "--distributed-world-size 8" in line for line in trains)
        assert all("--average-last 5" in line for line in evals)


def test_an_unknown_setting_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:  # a KeyError traceback after the table's set-up
        tables.main("cao_table1", ["--dry-run", "--setting", "p100"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "invalid choice: 'p100'" in err and "Traceback" not in err


def test_dry_run_calls_data_prepared_only_when_the_preflight_would(tmp_path, capsys):
    """bin/ alone read as prepared for Iida T3, whose per-length test sets (--length-eval) were
    missing: the preflight of the real run then stopped it."""
    bin_dir = tmp_path / "aspec-ja-en" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("dict.ja.txt", "dict.en.txt", *(f"{s}.ja-en.{lang}.{ext}" for s in ("train", "valid", "lentest")
                                                  for lang in ("ja", "en") for ext in ("idx", "bin"))):
        (bin_dir / name).write_text("")
    tables.main("iida2019_table3", ["--dry-run", "--results", str(tmp_path / "r"), "--data-root", str(tmp_path)])
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("# data: "))
    assert f"(missing {bin_dir / 'length-subsets.tsv'}: fairseq-ctx-prepare-data aspec" in line, line
    (bin_dir / "length-subsets.tsv").write_text("lentest\t1-10\n")
    tables.main("iida2019_table3", ["--dry-run", "--results", str(tmp_path / "r"), "--data-root", str(tmp_path)])
    raw = tmp_path / "aspec-ja-en" / "raw"
    # each per-length subset's raw reference and source (fairseq-ctx-evaluate --ref / --source)
    assert f"# data: {bin_dir} (missing {raw / '1-10.en'}:" in capsys.readouterr().out
    raw.mkdir()
    (raw / "1-10.en").write_text("")
    tables.main("iida2019_table3", ["--dry-run", "--results", str(tmp_path / "r"), "--data-root", str(tmp_path)])
    assert f"# data: {bin_dir} (missing {raw / '1-10.ja'}:" in capsys.readouterr().out
    (raw / "1-10.ja").write_text("")
    tables.main("iida2019_table3", ["--dry-run", "--results", str(tmp_path / "r"), "--data-root", str(tmp_path)])
    assert f"# data: {bin_dir} (prepared)" in capsys.readouterr().out


def test_dry_run_calls_data_missing_without_a_bin_or_the_target_side(tmp_path, capsys):
    """The preflight looked for the source side's .idx only: a data directory without the .bin
    files (a copy that skipped them) or without the target side passed it, and every cell's
    fairseq-train stopped on it after the table had started."""
    bin_dir = tmp_path / "aspec-ja-en" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "length-subsets.tsv").write_text("lentest\t1-10\n")
    (tmp_path / "aspec-ja-en" / "raw").mkdir()
    for lang in ("ja", "en"):
        (tmp_path / "aspec-ja-en" / "raw" / f"1-10.{lang}").write_text("")
    files = ["dict.ja.txt", "dict.en.txt", *(f"{s}.ja-en.{lang}.{ext}" for s in ("train", "valid", "lentest")
                                             for lang in ("ja", "en") for ext in ("idx", "bin"))]

    def data_line(leave_out):
        for name in files:
            (bin_dir / name).unlink(missing_ok=True)
            if name != leave_out:
                (bin_dir / name).write_text("")
        tables.main("iida2019_table3", ["--dry-run", "--results", str(tmp_path / "r"), "--data-root", str(tmp_path)])
        return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("# data: "))

    assert data_line(None) == f"# data: {bin_dir} (prepared)"
    assert f"(missing {bin_dir / 'train.ja-en.ja.idx / .bin'}:" in data_line("train.ja-en.ja.bin")
    assert f"(missing {bin_dir / 'valid.ja-en.en.idx / .bin'}:" in data_line("valid.ja-en.en.idx")
    assert f"(missing {bin_dir / 'lentest.ja-en.en.idx / .bin'}:" in data_line("lentest.ja-en.en.bin")


def _script_options(corpus):
    """The options a shipped data script's argument loop takes (a wrapper's: its target's)."""
    from fairseq_ctx.cli import DATA_SCRIPTS

    path = DATA_SCRIPTS[corpus][0]
    text = open(path).read()
    wrapped = re.search(r'exec bash "\$\(dirname "\$0"\)/([\w.-]+)"', text)
    if wrapped:
        text = open(os.path.join(os.path.dirname(path), wrapped.group(1))).read()
    return set(re.findall(r"^\s+(--[a-z-]+)(?:\|[^)]*)?\)", text, re.M))


def test_every_printed_prepare_command_is_one_per_directory_and_takes_only_the_scripts_options():
    """What --dry-run and the preflight print (tables.prepare_command): one command for each data
    directory, whichever table prints it (Iida T2 printed ASPEC without --length-eval, which
    T3 / T4's command then found prepared with other settings), and no option its script refuses."""
    import shlex

    commands = {}
    for table in tables.TABLES.values():
        for column in table.columns:
            command = tables.prepare_command(column, f"/data/{column.data}")
            assert commands.setdefault(column.data, command) == command, (table.key, column.data)
    assert len(commands) == 8
    for command in commands.values():
        words = shlex.split(command)
        assert words[0] == "fairseq-ctx-prepare-data"
        options = {w for w in words[2:] if w.startswith("--")}
        assert options and options <= _script_options(words[1]), (command, options - _script_options(words[1]))
    assert "--without-cwmt" in _script_options("wmt17-zh-en") and "--bogus" not in _script_options("wmt")
    assert "length-eval" in commands["aspec-en-ja"] and "--direction en-ja" in commands["aspec-en-ja"]
    # a work directory with a space stays one word
    assert shlex.split(tables.prepare_command(tables.EN_DE, "/my work/wmt14-en-de"))[-1] == "/my work/wmt14-en-de"


def test_reproduction_script_runs_as_a_program(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "reproduce", "cao_table2.py"), "--dry-run",
                           "--results", str(tmp_path), "--setting", "modern", "--gpus", "1"],
                          capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the modern setting keeps Cao's effective batch (2 x 2048 x 12 = 49,152 tokens) on 1 GPU in bf16
    assert "--max-tokens 16384 --update-freq 3 --bf16" in proc.stdout
    assert "Cao et al., Table 2" in proc.stdout


IIDA_TABLE5 = {"base": 68_460_544, "h2k1": 70_557_696, "h3k1": 72_654_848, "ind_h2k2": 72_654_848,
               "dep_h2k2": 75_800_576, "dep_h2k3": 81_043_456, "dep_h3k2": 79_994_880, "dep_h3k3": 87_334_912,
               "transformer": 81_604_608}


@needs("lstm_multihop")
def test_iida_table5_parameter_counts_are_exact():
    counts = params.count_rows(tables.TABLES["iida2019_table5"])
    assert counts == IIDA_TABLE5


@needs("transformer_context_aware")
def test_yang_table1_parameter_counts_match_the_paper():
    table = tables.TABLES["yang2019_table1"]
    counts = params.count_rows(table)
    for row in table.rows:
        paper = float(row.paper["# Para."].rstrip("M"))
        tolerance = 0.21 if row.key == "enc_global" else 0.05  # global: 91.2M vs the paper's 91.0M
        assert abs(counts[row.key] / 1e6 - paper) <= tolerance, (row.key, counts[row.key])


@needs("transformer_sentential")
def test_wang_table1_parameter_deltas_match_the_paper():
    table = tables.TABLES["wang2019_table1"]
    counts = params.count_rows(table)
    assert round(counts["base"] / 1e6, 1) == 88.0
    for row in table.rows[1:]:
        paper = float(row.paper["# Para."].strip("+M"))
        assert abs((counts[row.key] - counts["base"]) / 1e6 - paper) <= 0.2, (row.key, counts[row.key])


def test_parameter_table_prints_paper_and_ours_side_by_side(tmp_path, capsys):
    tables.main("iida2019_table5", ["--table-only", "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert re.search(r"\| 68,460,544 \| 68,460,544 \(68\.5M\) \| \+0 \|", out), out


def test_table_only_assembles_without_measuring_speed(tmp_path, capsys, monkeypatch):
    """--table-only on a table with speed columns built base-size models and benchmarked them for
    minutes before printing anything: it now prints what was measured, and says what was not."""
    from fairseq_ctx import benchmarking

    measured = []
    monkeypatch.setattr(benchmarking, "run_benchmark", lambda *a, **k: measured.append(a) or {"rows": []})
    tables.main("wang2019_table1", ["--table-only", "--results", str(tmp_path)])
    captured = capsys.readouterr()
    assert not measured and not list(tmp_path.rglob("speed-*.json"))
    assert "never measured" in captured.err and "missing" in captured.out
    # measured on a GPU node, assembled on a CPU one: that device's figures, named in the footer
    import json

    (tmp_path / "wang2019").mkdir(exist_ok=True)
    (tmp_path / "wang2019" / "speed-table1-base-cuda.json").write_text(json.dumps(
        {"base": {"train": "1.00", "decode": "1.00"}, "_meta": {"device": "cuda", "dims": "base", "src_len": 30,
                                                                "dtype": "bf16"}}))
    tables.main("wang2019_table1", ["--table-only", "--results", str(tmp_path)])
    captured = capsys.readouterr()
    assert not measured and "never measured" not in captured.err and "cuda" in captured.out
