"""Every reproduced table: its rows (config files), columns (data sets), the paper's
numbers, and how to run, collect and print it.

    python scripts/reproduce/<paper>_<table>.py [--dry-run] [--setting S] [--data-root work]
        [--results work/experiments] [--only ROW] [--params]

Data directories (the defaults of scripts/data/prepare-*.sh under --data-root):
  wmt14-en-de, wmt14-en-fr, wmt17-zh-en, wmt17-zh-en-len50 (prepare-wmt17-zh-en.sh --max-len 49
  --out work/wmt17-zh-en-len50, Cao's filter), aspec-ja-en, aspec-en-ja, opensubtitles-ja-en,
  opensubtitles-en-ja (bin / bin-concat).
Results: <results>/<paper>/<row>/<column>/{checkpoints, eval/result.json}. A table is
assembled from whatever result.json files exist; missing cells print as "missing".
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .train import CONFIGS, PAPER_SETTING, ROOT, build_command


@dataclass
class Column:
    name: str  # also the results sub-directory
    data: str  # directory under --data-root
    src: str
    tgt: str
    bin: str = "bin"
    remove_bpe: Optional[str] = None  # "sentencepiece" for the SentencePiece corpora
    strip_concat: bool = False


@dataclass
class Row:
    key: str  # results directory
    label: str
    config: str  # configs/<paper>/<file>
    paper: Dict[str, object]  # column name -> the paper's number (BLEU, or params)
    extra: Dict[str, str] = field(default_factory=dict)  # other printed columns of the paper


@dataclass
class Table:
    paper: str
    name: str
    title: str
    columns: List[Column]
    rows: List[Row]
    baseline: Optional[str] = "base"  # row key used for paired bootstrap; None = no significance
    metric: str = "BLEU"
    average_last: int = 5
    beam: int = 4
    lenpen: float = 0.6
    params: bool = False  # a parameter-count table
    vocab: Optional[Dict[str, int]] = None  # parameter tables: assumed dictionary sizes (see params.py)


EN_DE = Column("En-De", "wmt14-en-de", "en", "de")
EN_FR = Column("En-Fr", "wmt14-en-fr", "en", "fr")
ZH_EN = Column("Zh-En", "wmt17-zh-en", "zh", "en")
ZH_EN_50 = Column("Zh-En", "wmt17-zh-en-len50", "zh", "en")
SP = "sentencepiece"
IIDA_COLUMNS = [
    Column("OS ja-en", "opensubtitles-ja-en", "ja", "en", remove_bpe=SP),
    Column("OS en-ja", "opensubtitles-en-ja", "en", "ja", remove_bpe=SP),
    Column("ASPEC ja-en", "aspec-ja-en", "ja", "en", remove_bpe=SP),
    Column("ASPEC en-ja", "aspec-en-ja", "en", "ja", remove_bpe=SP),
    Column("OS+ctx ja-en", "opensubtitles-ja-en", "ja", "en", bin="bin-concat", remove_bpe=SP, strip_concat=True),
    Column("OS+ctx en-ja", "opensubtitles-en-ja", "en", "ja", bin="bin-concat", remove_bpe=SP, strip_concat=True),
]


def _iida_rows():
    rows = [
        ("base", "RNN baseline (1 head, 1 hop)", "lstm.args", [12.12, 9.27, 26.41, 36.39, 13.85, 10.24], 68_460_544),
        ("h2k1", "Multi-head RNN, single hop (2, 1)", "heads2_hops1.args", [12.38, 9.36, 26.63, 36.60, 14.14, 10.32], 70_557_696),
        ("h3k1", "Multi-head RNN, single hop (3, 1)", "heads3_hops1.args", [12.42, 9.55, 26.98, 36.55, 14.28, 10.53], 72_654_848),
        ("ind_h2k2", "Multi-hop independent (2, 2)", "independent_heads2_hops2.args", [12.47, 9.61, 26.95, 36.31, 14.16, 10.18], 72_654_848),
        ("dep_h2k2", "Multi-hop dependent (2, 2)", "lstm_multihop.args", [12.87, 9.89, 27.33, 36.91, 14.41, 10.74], 75_800_576),
        ("dep_h2k3", "Multi-hop dependent (2, 3)", "dependent_heads2_hops3.args", [12.88, 9.87, 27.39, 37.41, 14.79, 10.79], 81_043_456),
        ("dep_h3k2", "Multi-hop dependent (3, 2)", "dependent_heads3_hops2.args", [13.03, 9.83, 27.27, 37.54, 14.83, 10.55], 79_994_880),
        ("dep_h3k3", "Multi-hop dependent (3, 3)", "dependent_heads3_hops3.args", [13.03, 9.76, 27.21, 37.49, 14.52, 10.76], 87_334_912),
        ("transformer", "Transformer (4 heads)", "transformer.args", [15.20, 10.95, 27.50, 38.25, 15.98, 11.44], 81_604_608),
    ]
    return rows


def _yang_t1():
    rows = [
        ("base", "1 Base", "transformer_base.args", 27.31, "88.0M", "n/a", "n/a"),
        ("enc_global", "2 encoder: global", "enc_global.args", 27.96, "91.0M", "encoder", "global context"),
        ("enc_deep_global", "3 encoder: deep-global", "enc_deep_global.args", 28.15, "99.0M", "encoder", "deep-global context"),
        ("enc_deep", "4 encoder: deep", "enc_deep.args", 28.01, "95.9M", "encoder", "deep context"),
        ("enc_deep_global_deep", "5 encoder: deep-global + deep", "enc_deep_global_deep.args", 28.26, "106.9M", "encoder",
         "deep-global context + deep context"),
        ("dec_deep_global", "6 decoder: deep-global", "dec_deep_global.args", 27.94, "99.0M", "decoder", "deep-global context"),
        ("dec_deep_global_deep", "7 decoder: deep-global + deep", "dec_deep_global_deep.args", 28.02, "106.9M", "decoder",
         "deep-global context + deep context"),
        ("both", "8 both: 5 + 7", "both.args", 28.16, "125.8M", "both", "5 + 7"),
    ]
    return [Row(k, label, f"yang2019/{cfg}", {"En-De": bleu, "# Para.": params},
                {"Applied to": side, "Context Vectors": ctx}) for k, label, cfg, bleu, params, side, ctx in rows]


TABLES: Dict[str, Table] = {
    "yang2019_table1": Table("yang2019", "table1", "Yang et al. 2019, Table 1 (WMT14 En-De, Transformer-Base)",
                             [EN_DE], _yang_t1()),
    "yang2019_table2": Table("yang2019", "table2", "Yang et al. 2019, Table 2 (WMT17 Zh-En, WMT14 En-De)", [ZH_EN, EN_DE], [
        Row("base", "Transformer-Base", "yang2019/transformer_base.args", {"Zh-En": 24.13, "En-De": 27.31}),
        Row("enc_deep_global_deep", "+ Context-Aware SANs", "yang2019/enc_deep_global_deep.args", {"Zh-En": 24.67, "En-De": 28.26}),
        Row("big", "Transformer-Big", "yang2019/transformer_big.args", {"Zh-En": 24.56, "En-De": 28.58}),
        Row("context_aware_big", "+ Context-Aware SANs", "yang2019/context_aware_big.args", {"Zh-En": 25.15, "En-De": 28.89}),
    ]),
    "yang2019_table3": Table("yang2019", "table3", "Yang et al. 2019, Table 3 (query / key, WMT14 En-De dev = newstest2013)",
                             [Column("Dev", "wmt14-en-de", "en", "de")], [
        Row("base", "Transformer-Base (- / -)", "yang2019/transformer_base.args", {"Dev": 25.84}),
        Row("enc_deep_global_deep", "+ Context-Aware (Query v, Key v)", "yang2019/enc_deep_global_deep.args", {"Dev": 26.42}),
        Row("apply_key", "+ Context-Aware (Query x, Key v)", "yang2019/apply_key.args", {"Dev": 26.36}),
        Row("apply_query", "+ Context-Aware (Query v, Key x)", "yang2019/apply_query.args", {"Dev": 26.20}),
    ]),
    "cao_table1": Table("cao", "table1", "Cao et al., Table 1 (WMT17 Zh-En, length < 50)", [ZH_EN_50], [
        Row("base", "1 Transformer-Base", "cao/transformer_base.args", {"Zh-En": 24.28}),
        Row("horizontal_zero", "2 + Horizontal w/ Zero Initialization", "cao/horizontal_zero.args", {"Zh-En": 24.76}),
        Row("horizontal_self", "3 + Horizontal w/ Self Initialization", "cao/horizontal_self.args", {"Zh-En": 24.88}),
        Row("cross_zero", "4 + Vertical + Horizontal w/ Zero Initialization", "cao/cross_zero.args", {"Zh-En": 25.02}),
        Row("cross_self", "5 + Vertical + Horizontal w/ Self Initialization", "cao/cross_self.args", {"Zh-En": 24.68}),
    ]),
    "cao_table2": Table("cao", "table2", "Cao et al., Table 2 (WMT17 Zh-En, WMT14 En-De)", [ZH_EN_50, EN_DE], [
        Row("base", "Transformer-Base", "cao/transformer_base.args", {"Zh-En": 24.28, "En-De": 27.43}),
        Row("cross_zero", "+ Cross Aggregation", "cao/cross_zero.args", {"Zh-En": 25.02, "En-De": 28.04}),
    ]),
    "wang2019_table1": Table("wang2019", "table1", "Wang et al. 2019, Table 1 (WMT14 En-De, Base)", [EN_DE], [
        Row("base", "1 BASE", "wang2019/transformer_base.args", {"En-De": 27.31, "# Para.": "88.0M"}),
        Row("medium", "2 Medium", "wang2019/transformer_medium.args", {"En-De": 27.81, "# Para.": "+25.2M"}),
        Row("shallow_mean", "3 SHALLOW mean pooling", "wang2019/shallow_mean.args", {"En-De": 27.58, "# Para.": "+18.9M"}),
        Row("shallow_max", "4 SHALLOW max pooling", "wang2019/shallow_max.args", {"En-De": 27.81, "# Para.": "+18.9M"}),
        Row("shallow_attention", "5 SHALLOW attention", "wang2019/shallow_attention.args", {"En-De": 28.04, "# Para.": "+19.9M"}),
        Row("deep_rnn", "6 DEEP attention + RNN", "wang2019/deep_rnn.args", {"En-De": 28.38, "# Para.": "+26.8M"}),
        Row("deep_tam", "7 DEEP attention + TAM", "wang2019/deep_tam.args", {"En-De": 28.33, "# Para.": "+26.4M"}),
    ]),
    "wang2019_table2": Table("wang2019", "table2", "Wang et al. 2019, Table 2 (WMT14 En-De, En-Fr)", [EN_DE, EN_FR], [
        Row("base", "TRANSFORMER-BASE", "wang2019/transformer_base.args", {"En-De": 27.31, "En-Fr": 39.32}),
        Row("deep_rnn", "+ DEEP (RNN)", "wang2019/deep_rnn.args", {"En-De": 28.38, "En-Fr": 40.15}),
        Row("deep_tam", "+ DEEP (TAM)", "wang2019/deep_tam.args", {"En-De": 28.33, "En-Fr": 40.27}),
        Row("big", "TRANSFORMER-BIG", "wang2019/transformer_big.args", {"En-De": 28.58, "En-Fr": 41.41}),
        Row("big_deep_rnn", "+ DEEP (RNN)", "wang2019/big_deep_rnn.args", {"En-De": 29.04, "En-Fr": 41.87}),
        Row("big_deep_tam", "+ DEEP (TAM)", "wang2019/big_deep_tam.args", {"En-De": 29.19, "En-Fr": 42.04}),
    ]),
    "iida2019_table2": Table("iida2019", "table2", "Iida et al. 2019, Table 2 (OpenSubtitles2018, ASPEC, OpenSubtitles + context)",
                             IIDA_COLUMNS, [Row(k, label, f"iida2019/{cfg}", dict(zip([c.name for c in IIDA_COLUMNS], bleu)))
                                            for k, label, cfg, bleu, _ in _iida_rows()],
                             average_last=0, beam=5, lenpen=1.0),
    "iida2019_table5": Table("iida2019", "table5", "Iida et al. 2019, Table 5 (model parameters)", [], [
        Row(k, label, f"iida2019/{cfg}", {"Parameter": params}) for k, label, cfg, _, params in _iida_rows()],
        baseline=None, metric="Parameter", params=True),
}
# Yang Table 1 and Wang Table 1 are BLEU tables with a "# Para." column: params() fills it.
for _key in ("yang2019_table1", "wang2019_table1"):
    TABLES[_key].params = True


def results_dir(results, table, row, column):
    return os.path.join(results, table.paper, row.key, column.name.replace(" ", "_").replace("+", "p"))


def row_commands(table: Table, row: Row, column: Column, data_root, results, setting=None, train_extra=(),
                 eval_extra=(), launcher="spawn", gpus=None, python=sys.executable):
    """(train command, evaluate command) of one cell."""
    out = results_dir(results, table, row, column)
    data_dir = os.path.join(data_root, column.data)
    setting = setting or PAPER_SETTING[table.paper]
    train = build_command(os.path.join(CONFIGS, row.config), setting, os.path.join(data_dir, column.bin),
                          os.path.join(out, "checkpoints"), train_extra, launcher=launcher, gpus=gpus, python=python)
    subset = "valid" if column.name == "Dev" else "test"
    evaluate = [python, os.path.join(ROOT, "scripts", "eval", "evaluate.py"),
                "--data", os.path.join(data_dir, column.bin), "--save-dir", os.path.join(out, "checkpoints"),
                "--src", column.src, "--tgt", column.tgt, "--subset", subset,
                "--ref", os.path.join(data_dir, "raw", f"{subset}.{column.tgt}"),
                "--source", os.path.join(data_dir, "raw", f"{subset}.{column.src}"),
                "--beam", str(table.beam), "--lenpen", str(table.lenpen), "--length-buckets",
                "--name", row.label, "--out-dir", os.path.join(out, "eval")]
    if table.average_last:
        evaluate += ["--average-last", str(table.average_last)]
    if column.remove_bpe:
        evaluate += ["--remove-bpe", column.remove_bpe]
    if column.strip_concat:
        evaluate += ["--strip-concat"]
    if table.baseline and row.key != table.baseline:
        base_row = next(r for r in table.rows if r.key == table.baseline)
        evaluate += ["--baseline-hyp", os.path.join(results_dir(results, table, base_row, column), "eval",
                                                    f"hyp.detok.{column.tgt}")]
    if eval_extra:
        evaluate += ["--", *eval_extra]
    return train, evaluate


def load_result(results, table, row, column):
    path = os.path.join(results_dir(results, table, row, column), "eval", "result.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def format_table(table: Table, results, param_counts=None) -> str:
    """Markdown in the paper's layout: paper's number next to ours for every column."""
    from ..analysis.scoring import markdown_table, significance_mark

    header = ["#", "Model"] + [k for k in (table.rows[0].extra if table.rows else {})]
    body = []
    if param_counts is not None:
        header += ["# Para. (paper)", "# Para. (ours)", "delta vs first row (ours)"]
    for column in table.columns:
        header += [f"{column.name} (paper)", f"{column.name} (ours, tokenized)", f"{column.name} (sacreBLEU)"]
    base_count = None
    for index, row in enumerate(table.rows, 1):
        cells = [index, row.label] + list(row.extra.values())
        if param_counts is not None:
            count = param_counts.get(row.key)
            paper = row.paper.get("# Para.", row.paper.get("Parameter"))
            if isinstance(count, int):
                base_count = count if base_count is None else base_count
                cells += [f"{paper:,}" if isinstance(paper, int) else paper, f"{count:,} ({count / 1e6:.1f}M)",
                          f"{count - base_count:+,}"]
            else:
                cells += [paper, count or "missing", ""]
        for column in table.columns:
            result = load_result(results, table, row, column)
            paper = row.paper.get(column.name)
            if result is None:
                cells += [paper, "missing", "missing"]
                continue
            mark = (significance_mark(result["bootstrap"]["p_value"], result["bootstrap"]["delta"])
                    if "bootstrap" in result else "")
            cells += [paper, f"{result['tokenized']['bleu']}{mark}", result["sacrebleu"]["bleu"]]
        body.append(cells)
    text = f"### {table.title}\n\n" + markdown_table(header, body)
    signatures = {json.dumps(load_result(results, table, r, c)["sacrebleu"]["signature"])
                  for r in table.rows for c in table.columns if load_result(results, table, r, c)}
    if signatures:
        text += "\nsacreBLEU: " + "; ".join(sorted(s.strip('"') for s in signatures)) + "\n"
    if table.columns and table.baseline:
        text += "\n\u2191 / \u21d1: significantly better than the first row (paired bootstrap, p < 0.05 / 0.01).\n"
    return text


def main(table_key, argv=None):
    table = TABLES[table_key]
    parser = argparse.ArgumentParser(description=f"Reproduce {table.title}. " + __doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="print every command, run nothing")
    parser.add_argument("--setting", default=None, help=f"training setting (default {PAPER_SETTING[table.paper]})")
    parser.add_argument("--launcher", choices=["spawn", "torchrun"], default="spawn")
    parser.add_argument("--gpus", type=int, default=None)
    parser.add_argument("--data-root", default=os.path.join(ROOT, "work"))
    parser.add_argument("--results", default=os.path.join(ROOT, "work", "experiments"))
    parser.add_argument("--only", action="append", default=[], help="row key(s) to run (default: all)")
    parser.add_argument("--table-only", action="store_true", help="only assemble the table from finished results")
    parser.add_argument("--params", action="store_true", default=None,
                        help="count parameters (built on CPU; default for parameter tables)")
    parser.add_argument("--output", default=None, help="also write the table (markdown) here")
    args = parser.parse_args(argv)
    rows = [r for r in table.rows if not args.only or r.key in args.only]
    if not args.table_only:
        for row in rows:
            for column in table.columns:
                train, evaluate = row_commands(table, row, column, args.data_root, args.results, args.setting,
                                               launcher=args.launcher, gpus=args.gpus)
                done = load_result(args.results, table, row, column) is not None
                for cmd in (train, evaluate):
                    print(("# done: " if done else "") + shlex.join(cmd), flush=True)
                    if not (args.dry_run or done):
                        code = subprocess.call(cmd)
                        if code:
                            print(f"reproduce: {row.key} / {column.name} failed ({code}); continuing", file=sys.stderr)
                            break
    counts = None
    if args.params if args.params is not None else table.params:
        from .params import count_rows

        counts = count_rows(table, rows)
    text = format_table(table, args.results, counts)
    print(text)
    if args.output:
        from ..data.atomic import atomic_write

        with atomic_write(args.output) as handle:
            handle.write(text)
    return text
