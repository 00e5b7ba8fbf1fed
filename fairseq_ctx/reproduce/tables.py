"""Every reproduced table: its rows (config files), columns (data sets), the paper's
numbers, and how to run, collect and print it.

    fairseq-ctx-reproduce <paper>_<table> [--dry-run] [--setting S] [--data-root work]
        [--results work/experiments] [--only ROW] [--params]
    (in a checkout also: python scripts/reproduce/<paper>_<table>.py ...)

Data directories (the defaults of fairseq-ctx-prepare-data CORPUS under --data-root):
  wmt14-en-de, wmt14-en-fr, wmt17-zh-en, wmt17-zh-en-len50 (wmt17-zh-en --max-len 49, Cao's
  filter), aspec-ja-en, aspec-en-ja, opensubtitles-ja-en, opensubtitles-en-ja (bin / bin-concat).
  --dry-run and the preflight print the command that prepares each one (prepare_command).
Results: <results>/<setting tag>/<config>-<training key>/<data>/{train.json, checkpoints,
eval/<subset>-<evaluation key>/result.json}: one directory per distinct training, shared by
every table that trains the same model. A table is assembled from whatever result.json files
exist; missing cells print as "missing".
"""
import dataclasses
import json
import os
import shlex
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..data.corpora import CWMT_PART_NAMES
from ..data.streaming import lines_of
from ..evaluation.defaults import PAPER_DEFAULTS, EvalSettings
from . import paper_tables  # the papers' own numbers and marks, as printed


@dataclass
class Column:
    name: str  # also the results sub-directory
    data: str  # directory under --data-root
    src: str
    tgt: str
    bin: str = "bin"
    remove_bpe: Optional[str] = None  # "sentencepiece" for the SentencePiece corpora
    strip_concat: bool = False
    subset: str = "test"  # the gen-subset scored (Yang Table 3: valid = newstest2013)
    # the fairseq-ctx-prepare-data arguments that build `data` (before --out); "" = CORPUS `data`
    prepare: str = ""


def prepare_command(column, data_dir):
    """The command that prepares a column's data directory, with --out naming that very directory
    (so it holds wherever --data-root / FAIRSEQ_CTX_WORK put it)."""
    return shlex.join(["fairseq-ctx-prepare-data", *shlex.split(column.prepare or column.data), "--out", data_dir])


@dataclass
class Row:
    key: str  # results directory
    label: str
    config: str  # configs/<paper>/<file>
    paper: Dict[str, object]  # column name -> the paper's number (BLEU, or params)
    extra: Dict[str, str] = field(default_factory=dict)  # other printed columns of the paper
    baseline: Optional[str] = None  # row key this row is tested against (None: the table's baseline)
    column_args: Dict[str, List[str]] = field(default_factory=dict)  # column name -> extra training options
    claims: Dict[str, object] = field(default_factory=dict)  # parsed fairseq option -> value the row stands for


@dataclass
class Table:
    paper: str
    name: str
    title: str
    columns: List[Column]
    rows: List[Row]
    baseline: Optional[str] = "base"  # row key used for paired bootstrap; None = no significance
    metric: str = "BLEU"
    params: bool = False  # a parameter-count table
    vocab: Optional[Dict[str, int]] = None  # parameter tables: assumed dictionary sizes (see params.py)
    kind: str = "bleu"  # bleu | params | length (BLEU per source-length bucket, rows = buckets)
    speed: bool = False  # the paper prints Train / Decode speed columns
    delta: bool = False  # the paper prints a BLEU-difference column against the first row
    # length tables: (row key, mark for p < 0.05, mark for p < 0.01) for each baseline
    baselines: List[tuple] = field(default_factory=list)
    marks: tuple = ("\u2191", "\u21d1")  # our marks for p < 0.05 / 0.01, the paper's glyphs where it has them

    @property
    def key(self):
        return f"{self.paper}_{self.name}"

    @property
    def evaluation(self) -> EvalSettings:
        """The paper's evaluation settings (beam, length penalty, checkpoint averaging, output
        bound, tokenised BLEU): fairseq_ctx/evaluation/defaults.py, where fairseq-ctx-evaluate
        --paper reads them too."""
        if self.paper not in PAPER_DEFAULTS:
            raise KeyError(f"no evaluation settings for paper {self.paper!r}: add them to "
                           "fairseq_ctx/evaluation/defaults.py")
        return PAPER_DEFAULTS[self.paper]


EN_DE = Column("En-De", "wmt14-en-de", "en", "de")
EN_FR = Column("En-Fr", "wmt14-en-fr", "en", "fr")
# the registered CWMT parts (PREFIX.zh / PREFIX.en each, where the user keeps them; the file
# names are the user's): without them prepare-wmt.sh refuses unless --without-cwmt is given
CWMT = " ".join(f"--extra-train CWMT/{part}" for part in CWMT_PART_NAMES)
ZH_EN = Column("Zh-En", "wmt17-zh-en", "zh", "en", prepare=f"wmt17-zh-en {CWMT}")
ZH_EN_50 = Column("Zh-En", "wmt17-zh-en-len50", "zh", "en", prepare=f"wmt17-zh-en --max-len 49 {CWMT}")
SP = "sentencepiece"
# licensed by application: a local copy. --length-eval for every table: Iida T3 / T4 test the
# T2 models on its per-length test sets, and a directory prepared without it is refused by a
# later preparation with it ("different settings")
ASPEC = "aspec --local-dir ASPEC/ASPEC-JE --length-eval"
ASPEC_JA_EN = Column("ASPEC ja-en", "aspec-ja-en", "ja", "en", remove_bpe=SP, prepare=f"{ASPEC} --direction ja-en")
ASPEC_EN_JA = Column("ASPEC en-ja", "aspec-en-ja", "en", "ja", remove_bpe=SP, prepare=f"{ASPEC} --direction en-ja")
_OS = {d: dict(remove_bpe=SP, prepare=f"opensubtitles --direction {d}") for d in ("ja-en", "en-ja")}
IIDA_COLUMNS = [
    Column("OS ja-en", "opensubtitles-ja-en", "ja", "en", **_OS["ja-en"]),
    Column("OS en-ja", "opensubtitles-en-ja", "en", "ja", **_OS["en-ja"]),
    ASPEC_JA_EN,
    ASPEC_EN_JA,
    Column("OS+ctx ja-en", "opensubtitles-ja-en", "ja", "en", bin="bin-concat", strip_concat=True, **_OS["ja-en"]),
    Column("OS+ctx en-ja", "opensubtitles-en-ja", "en", "ja", bin="bin-concat", strip_concat=True, **_OS["en-ja"]),
]

# What each row claims to be, as fairseq parses its config (tests/test_reproduce_tables.py
# checks every row against these; a row whose config silently means something else fails).
BASE = {"encoder_embed_dim": 512, "encoder_ffn_embed_dim": 2048, "encoder_attention_heads": 8, "encoder_layers": 6,
        "decoder_embed_dim": 512, "decoder_layers": 6}
BIG = {"encoder_embed_dim": 1024, "encoder_ffn_embed_dim": 4096, "encoder_attention_heads": 16, "encoder_layers": 6,
       "decoder_embed_dim": 1024, "decoder_layers": 6}


def _stock(dims, **more):
    return {"arch": "transformer" if dims is BASE else "transformer_vaswani_wmt_en_de_big", **dims, **more}


def _yang(enc, dec, apply="both", dims=BASE):
    return {"encoder_context": enc, "decoder_context": dec, "context_apply": apply, **dims}


def _cao(vertical, init):
    return {"arch": "transformer_cross_agg", "routing_vertical": vertical, "routing_horizontal": True,
            "routing_init": init, "routing_side": "encoder", "routing_iters": 3, **BASE}


def _wang(global_, deep, dims=BASE):
    return {"sentential_global": global_, "sentential_deep": deep, **dims}


def _iida(heads, hops, mode="dependent"):
    return {"arch": "lstm_multihop", "attention_heads": heads, "attention_hops": hops, "hop_mode": mode,
            "encoder_hidden_size": 512, "decoder_hidden_size": 1024}


def _iida_rows():
    lstm = {"arch": "lstm", "encoder_bidirectional": True, "encoder_hidden_size": 512, "decoder_hidden_size": 1024}
    rows = [
        ("base", "RNN baseline (1 head, 1 hop)", "lstm.args", [12.12, 9.27, 26.41, 36.39, 13.85, 10.24], 68_460_544, lstm),
        ("h2k1", "Multi-head RNN, single hop (2, 1)", "heads2_hops1.args", [12.38, 9.36, 26.63, 36.60, 14.14, 10.32],
         70_557_696, _iida(2, 1)),
        ("h3k1", "Multi-head RNN, single hop (3, 1)", "heads3_hops1.args", [12.42, 9.55, 26.98, 36.55, 14.28, 10.53],
         72_654_848, _iida(3, 1)),
        ("ind_h2k2", "Multi-hop independent (2, 2)", "independent_heads2_hops2.args",
         [12.47, 9.61, 26.95, 36.31, 14.16, 10.18], 72_654_848, _iida(2, 2, "independent")),
        ("dep_h2k2", "Multi-hop dependent (2, 2)", "lstm_multihop.args", [12.87, 9.89, 27.33, 36.91, 14.41, 10.74],
         75_800_576, _iida(2, 2)),
        ("dep_h2k3", "Multi-hop dependent (2, 3)", "dependent_heads2_hops3.args",
         [12.88, 9.87, 27.39, 37.41, 14.79, 10.79], 81_043_456, _iida(2, 3)),
        ("dep_h3k2", "Multi-hop dependent (3, 2)", "dependent_heads3_hops2.args",
         [13.03, 9.83, 27.27, 37.54, 14.83, 10.55], 79_994_880, _iida(3, 2)),
        ("dep_h3k3", "Multi-hop dependent (3, 3)", "dependent_heads3_hops3.args",
         [13.03, 9.76, 27.21, 37.49, 14.52, 10.76], 87_334_912, _iida(3, 3)),
        ("transformer", "Transformer (4 heads)", "transformer.args", [15.20, 10.95, 27.50, 38.25, 15.98, 11.44],
         81_604_608, {"arch": "transformer_iwslt_de_en", "encoder_attention_heads": 4, "encoder_embed_dim": 512}),
    ]
    return rows


def _yang_t1():
    rows = [
        ("base", "1 Base", "transformer_base.args", 27.31, "88.0M", "n/a", "n/a", _stock(BASE)),
        ("enc_global", "2 encoder: global", "enc_global.args", 27.96, "91.0M", "encoder", "global context",
         _yang("global", "none")),
        ("enc_deep_global", "3 encoder: deep-global", "enc_deep_global.args", 28.15, "99.0M", "encoder",
         "deep-global context", _yang("deep_global", "none")),
        ("enc_deep", "4 encoder: deep", "enc_deep.args", 28.01, "95.9M", "encoder", "deep context", _yang("deep", "none")),
        ("enc_deep_global_deep", "5 encoder: deep-global + deep", "enc_deep_global_deep.args", 28.26, "106.9M", "encoder",
         "deep-global context + deep context", _yang("deep_global+deep", "none")),
        ("dec_deep_global", "6 decoder: deep-global", "dec_deep_global.args", 27.94, "99.0M", "decoder",
         "deep-global context", _yang("none", "deep_global")),
        ("dec_deep_global_deep", "7 decoder: deep-global + deep", "dec_deep_global_deep.args", 28.02, "106.9M", "decoder",
         "deep-global context + deep context", _yang("none", "deep_global+deep")),
        ("both", "8 both: 5 + 7", "both.args", 28.16, "125.8M", "both", "5 + 7",
         _yang("deep_global+deep", "deep_global+deep")),
    ]
    return [Row(k, label, f"yang2019/{cfg}", {"En-De": bleu, "# Para.": params},
                {"Applied to": side, "Context Vectors": ctx}, claims=claims)
            for k, label, cfg, bleu, params, side, ctx, claims in rows]


# Vaswani et al.'s En-Fr Big uses dropout 0.1 (fairseq's transformer_vaswani_wmt_en_fr_big); the
# En-De Big arch's 0.3 is for En-De only
EN_FR_BIG = {"En-Fr": ["--dropout", "0.1"]}

TABLES: Dict[str, Table] = {
    "yang2019_table1": Table("yang2019", "table1", "Yang et al. 2019, Table 1 (WMT14 En-De, Transformer-Base)",
                             [EN_DE], _yang_t1(), speed=True),
    "yang2019_table2": Table("yang2019", "table2", "Yang et al. 2019, Table 2 (WMT17 Zh-En, WMT14 En-De)", [ZH_EN, EN_DE], [
        Row("base", "Transformer-Base", "yang2019/transformer_base.args", {"Zh-En": 24.13, "En-De": 27.31},
            claims=_stock(BASE)),
        Row("enc_deep_global_deep", "+ Context-Aware SANs", "yang2019/enc_deep_global_deep.args",
            {"Zh-En": 24.67, "En-De": 28.26}, claims=_yang("deep_global+deep", "none")),
        Row("big", "Transformer-Big", "yang2019/transformer_big.args", {"Zh-En": 24.56, "En-De": 28.58},
            claims=_stock(BIG)),
        Row("context_aware_big", "+ Context-Aware SANs", "yang2019/context_aware_big.args", {"Zh-En": 25.15, "En-De": 28.89},
            baseline="big", claims=_yang("deep_global+deep", "none", dims=BIG)),
    ], params=True),
    "yang2019_table3": Table("yang2019", "table3", "Yang et al. 2019, Table 3 (query / key, WMT14 En-De dev = newstest2013)",
                             [Column("Dev", "wmt14-en-de", "en", "de", subset="valid")], [
        Row("base", "Transformer-Base (- / -)", "yang2019/transformer_base.args", {"Dev": 25.84}, claims=_stock(BASE)),
        Row("enc_deep_global_deep", "+ Context-Aware (Query v, Key v)", "yang2019/enc_deep_global_deep.args",
            {"Dev": 26.42}, claims=_yang("deep_global+deep", "none", "both")),
        Row("apply_key", "+ Context-Aware (Query x, Key v)", "yang2019/apply_key.args", {"Dev": 26.36},
            claims=_yang("deep_global+deep", "none", "key")),
        Row("apply_query", "+ Context-Aware (Query v, Key x)", "yang2019/apply_query.args", {"Dev": 26.20},
            claims=_yang("deep_global+deep", "none", "query")),
    ]),
    "cao_table1": Table("cao", "table1", "Cao et al., Table 1 (WMT17 Zh-En, length < 50)", [ZH_EN_50], [
        Row("base", "1 Transformer-Base", "cao/transformer_base.args", {"Zh-En": 24.28}, claims=_stock(BASE)),
        Row("horizontal_zero", "2 + Horizontal w/ Zero Initialization", "cao/horizontal_zero.args", {"Zh-En": 24.76},
            claims=_cao(False, "zero")),
        Row("horizontal_self", "3 + Horizontal w/ Self Initialization", "cao/horizontal_self.args", {"Zh-En": 24.88},
            claims=_cao(False, "self")),
        Row("cross_zero", "4 + Vertical + Horizontal w/ Zero Initialization", "cao/cross_zero.args", {"Zh-En": 25.02},
            claims=_cao(True, "zero")),
        Row("cross_self", "5 + Vertical + Horizontal w/ Self Initialization", "cao/cross_self.args", {"Zh-En": 24.68},
            claims=_cao(True, "self")),
    ], delta=True, marks=("\u2191", "\u2191\u2191")),
    "cao_table2": Table("cao", "table2", "Cao et al., Table 2 (WMT17 Zh-En, WMT14 En-De)", [ZH_EN_50, EN_DE], [
        Row("base", "Transformer-Base", "cao/transformer_base.args", {"Zh-En": 24.28, "En-De": 27.43},
            claims=_stock(BASE)),
        Row("cross_zero", "+ Cross Aggregation", "cao/cross_zero.args", {"Zh-En": 25.02, "En-De": 28.04},
            claims=_cao(True, "zero")),
    ]),
    "wang2019_table1": Table("wang2019", "table1", "Wang et al. 2019, Table 1 (WMT14 En-De, Base)", [EN_DE], [
        Row("base", "1 BASE", "wang2019/transformer_base.args", {"En-De": 27.31, "# Para.": "88.0M"}, claims=_stock(BASE)),
        Row("medium", "2 Medium", "wang2019/transformer_medium.args", {"En-De": 27.81, "# Para.": "+25.2M"},
            claims=_stock(BASE, decoder_ffn_embed_dim=6144)),
        Row("shallow_mean", "3 SHALLOW mean pooling", "wang2019/shallow_mean.args", {"En-De": 27.58, "# Para.": "+18.9M"},
            claims=_wang("mean", "none")),
        Row("shallow_max", "4 SHALLOW max pooling", "wang2019/shallow_max.args", {"En-De": 27.81, "# Para.": "+18.9M"},
            claims=_wang("max", "none")),
        Row("shallow_attention", "5 SHALLOW attention", "wang2019/shallow_attention.args",
            {"En-De": 28.04, "# Para.": "+19.9M"}, claims=_wang("attention", "none")),
        Row("deep_rnn", "6 DEEP attention + RNN", "wang2019/deep_rnn.args", {"En-De": 28.38, "# Para.": "+26.8M"},
            claims=_wang("attention", "rnn")),
        Row("deep_tam", "7 DEEP attention + TAM", "wang2019/deep_tam.args", {"En-De": 28.33, "# Para.": "+26.4M"},
            claims=_wang("attention", "tam")),
    ], speed=True),
    "wang2019_table2": Table("wang2019", "table2", "Wang et al. 2019, Table 2 (WMT14 En-De, En-Fr)", [EN_DE, EN_FR], [
        Row("base", "TRANSFORMER-BASE", "wang2019/transformer_base.args", {"En-De": 27.31, "En-Fr": 39.32},
            claims=_stock(BASE)),
        Row("deep_rnn", "+ DEEP (RNN)", "wang2019/deep_rnn.args", {"En-De": 28.38, "En-Fr": 40.15},
            claims=_wang("attention", "rnn")),
        Row("deep_tam", "+ DEEP (TAM)", "wang2019/deep_tam.args", {"En-De": 28.33, "En-Fr": 40.27},
            claims=_wang("attention", "tam")),
        Row("big", "TRANSFORMER-BIG", "wang2019/transformer_big.args", {"En-De": 28.58, "En-Fr": 41.41},
            column_args=EN_FR_BIG, claims=_stock(BIG)),
        Row("big_deep_rnn", "+ DEEP (RNN)", "wang2019/big_deep_rnn.args", {"En-De": 29.04, "En-Fr": 41.87},
            baseline="big", column_args=EN_FR_BIG, claims=_wang("attention", "rnn", dims=BIG)),
        Row("big_deep_tam", "+ DEEP (TAM)", "wang2019/big_deep_tam.args", {"En-De": 29.19, "En-Fr": 42.04},
            baseline="big", column_args=EN_FR_BIG, claims=_wang("attention", "tam", dims=BIG)),
    ]),
    "iida2019_table2": Table("iida2019", "table2", "Iida et al. 2019, Table 2 (OpenSubtitles2018, ASPEC, OpenSubtitles + context)",
                             IIDA_COLUMNS, [Row(k, label, f"iida2019/{cfg}", dict(zip([c.name for c in IIDA_COLUMNS], bleu)),
                                                claims=claims)
                                            for k, label, cfg, bleu, _, claims in _iida_rows()],
                             marks=("\u2020", "\u2021")),
    "iida2019_table5": Table("iida2019", "table5", "Iida et al. 2019, Table 5 (model parameters)", [], [
        Row(k, label, f"iida2019/{cfg}", {"Parameter": params}, claims=claims)
        for k, label, cfg, _, params, claims in _iida_rows()],
        baseline=None, metric="Parameter", params=True, kind="params"),
}
# Iida Tables 3-4: BLEU per source-length bucket of the ASPEC systems of Table 2 (the same trained
# models), on Section 4.3's per-length test sets; marks against both baselines
_IIDA_LENGTH_ROWS = [r for r in TABLES["iida2019_table2"].rows if r.key in ("base", "dep_h2k2", "transformer")]
for _key, _column, _direction in (("iida2019_table3", ASPEC_JA_EN, "ja -> en"), ("iida2019_table4", ASPEC_EN_JA, "en -> ja")):
    TABLES[_key] = Table("iida2019", _key.split("_")[1], f"Iida et al. 2019, Table {_key[-1]} "
                         f"(BLEU per sentence length, ASPEC {_direction})", [_column],
                         [dataclasses.replace(r, paper={}) for r in _IIDA_LENGTH_ROWS], kind="length",
                         baselines=[("base", "\u2020", "\u2021"), ("transformer", "*", "**")])
# Yang Table 1 and Wang Table 1 are BLEU tables with a "# Para." column: params() fills it.
for _key in ("yang2019_table1", "wang2019_table1"):
    TABLES[_key].params = True


# -- assembling a table from finished cells ----------------------------------------------------------


def _paper_cell(table, row_key, column_name):
    paper = paper_tables.PAPER_TABLES.get(table.key) if paper_tables else None
    return paper.rows.get(row_key, {}).get(column_name) if paper else None


def _paper_value(table, row, column_name):
    """The paper's number as the paper prints it, with its own significance mark ("(mark)" where
    a mark is printed but the text extraction does not show which one)."""
    cell = _paper_cell(table, row.key, column_name)
    if cell is not None and cell.value is not None:
        return cell.value + ("(mark)" if cell.mark is None else cell.mark)
    value = row.paper.get(column_name)
    if isinstance(value, float):
        return f"{value:.2f}"
    return "" if value is None else value


def _paper_speed(table, row, column_name):
    """The paper's speed and, in brackets, its ratio to the paper's first row."""
    cell, first = _paper_cell(table, row.key, column_name), _paper_cell(table, table.rows[0].key, column_name)
    if cell is None or not cell.value:
        return ""
    try:
        return f"{cell.value} ({float(cell.value) / float(first.value):.2f})"
    except (TypeError, ValueError, ZeroDivisionError, AttributeError):
        return cell.value


def _paper_params(table, row):
    cells = [(name, _paper_cell(table, row.key, name)) for name in
             ["# Para."] + [f"{c.name} # Para." for c in table.columns]]
    printed = [f"{name.replace(' # Para.', '')} {c.value}" if name != "# Para." else c.value
               for name, c in cells if c is not None and c.value]
    return " / ".join(printed) or row.paper.get("# Para.", row.paper.get("Parameter", ""))


def significance(cell, baseline_cell, subset=None):
    """Paired bootstrap of a cell against its baseline cell (None if either is missing)."""
    from ..evaluation.scoring import compound_flag, paired_bootstrap

    subset = subset or cell.column.subset
    if baseline_cell is None or not (cell.evaluated(subset) and baseline_cell.evaluated(subset)):
        return None
    column = cell.column
    hyp = os.path.join(cell.eval_dir(subset), f"hyp.detok.{column.tgt}")
    base = os.path.join(baseline_cell.eval_dir(subset), f"hyp.detok.{column.tgt}")
    from .runner import raw_path

    ref = raw_path(cell, subset, column.tgt)
    return paired_bootstrap(lines_of(base), lines_of(hyp), lines_of(ref), column.tgt, tokenized=True,
                            compound=compound_flag(cell.table.evaluation.compound_split))


def baseline_key(table, row):
    """The row this row is tested against: the paper's own pairing where it marks one
    (paper_tables' baseline_of: only the rows the paper marks, each against its counterpart,
    e.g. Big rows against Transformer-Big, never a baseline against another), else the
    row's or the table's baseline."""
    paper = paper_tables.PAPER_TABLES.get(table.key) if paper_tables else None
    if paper is not None and paper.baseline_of:
        return paper.baseline_of.get(row.key)
    return row.baseline or table.baseline


def _bleu(result):
    return f"{result['tokenized']['bleu']:.2f}"


def format_table(table: Table, cells, param_counts=None, speed=None, header_note="") -> str:
    """Markdown in the paper's layout: the paper's number beside ours in every column."""
    if table.kind == "length":
        return format_length_table(table, cells, header_note)
    from ..evaluation.scoring import markdown_table, significance_mark
    from .runner import load_result

    by = {(c.row.key, c.column.name): c for c in cells}
    header = ["#", "Model"] + [k for k in (table.rows[0].extra if table.rows else {})]
    if param_counts is not None:
        header += ["# Para. (paper)", "# Para. (ours)", "delta vs first row (ours)"]
    if speed is not None:
        header += ["Train (paper, ratio)", "Train (ours, ratio)", "Decode (paper, ratio)", "Decode (ours, ratio)"]
    for column in table.columns:
        header += [f"{column.name} (paper)", f"{column.name} (ours, tokenized)", f"{column.name} (sacreBLEU)"]
        if table.delta:
            header += [f"\u0394 {column.name} (paper)", f"\u0394 {column.name} (ours)"]
    body, base_count, marks_used = [], None, {}  # baseline key -> labels of the rows tested against it
    for index, row in enumerate(table.rows, 1):
        cells_ = [index, row.label] + list(row.extra.values())
        if param_counts is not None:
            count = param_counts.get(row.key)
            paper = _paper_params(table, row)
            if isinstance(count, int):
                base_count = count if base_count is None else base_count
                cells_ += [f"{paper:,}" if isinstance(paper, int) else paper, f"{count:,} ({count / 1e6:.1f}M)",
                           f"{count - base_count:+,}"]
            else:
                cells_ += [paper, count or "missing", ""]
        if speed is not None:
            mine = speed.get(row.key, {})
            cells_ += [_paper_speed(table, row, "Train"), mine.get("train", "missing"),
                       _paper_speed(table, row, "Decode"), mine.get("decode", "missing")]
        for column in table.columns:
            cell = by.get((row.key, column.name))
            result = load_result(cell) if cell else None
            paper = _paper_value(table, row, column.name)
            value, paper0 = row.paper.get(column.name), table.rows[0].paper.get(column.name)
            paper_delta = f"{value - paper0:+.2f}" if isinstance(value, float) and isinstance(paper0, float) else ""
            if row is table.rows[0]:
                paper_delta = "-"  # as the paper prints row 1's delta
            if result is None:
                cells_ += [paper, "missing", "missing"] + ([paper_delta, ""] if table.delta else [])
                continue
            mark = ""
            base_key = baseline_key(table, row)
            if base_key and base_key != row.key:
                test = significance(cell, by.get((base_key, column.name)))
                if test is not None:
                    mark = significance_mark(test["p_value"], test["delta"], table.marks)
                    tested = marks_used.setdefault(base_key, [])
                    if row.label not in tested:
                        tested.append(row.label)
            ours = result["tokenized"]["bleu"]
            cells_ += [paper, f"{ours:.2f}{mark}", f"{result['sacrebleu']['bleu']:.2f}"]
            if table.delta:  # against row 1 (the paper's Δ), blank where row 1 has no result
                first = load_result(by[(table.rows[0].key, column.name)]) if (table.rows[0].key, column.name) in by \
                    else None
                cells_ += [paper_delta, "-" if row is table.rows[0] else
                           f"{ours - first['tokenized']['bleu']:+.2f}" if first else ""]
        body.append(cells_)
    text = f"### {table.title}\n\n{header_note}" + markdown_table(header, body)
    text += footer(table, cells, marks_used, speed=speed)
    if param_counts is not None:
        from .params import VOCAB

        src, tgt = VOCAB[table.paper]
        text += (f"Parameter counts (ours): fairseq builds of the configs with {src:,} source / {tgt:,} target dictionary "
                 "entries (sizes the papers do not state, fitted to their En-De / ASPEC counts; see "
                 "docs/experiments.md): one count per row" +
                 (", so a per-language-pair count of the paper (e.g. Zh-En) has no counterpart here.\n"
                  if len(table.columns) > 1 else ".\n"))
    return text


def _bucket_label(bucket):
    """'len120' (prepare-aspec.sh's split name) -> '120-129' (the paper's label)."""
    start = int("".join(filter(str.isdigit, bucket)) or 0)
    return f"{start}-{start + 9}"


def format_length_table(table, cells, header_note=""):
    """Iida Tables 3-4: one row per source-length bucket (the paper's buckets and any more we
    have), the paper's and our BLEU per system, marks against each of the table's baselines,
    and the number of sentences per bucket."""
    from ..evaluation.scoring import markdown_table
    from .runner import length_subsets

    by = {c.row.key: c for c in cells}
    subset_of = {}
    for cell in cells:
        subset_of.update({_bucket_label(b): s for s, b in length_subsets(cell.data_dir, cell.column).items()})
    labels = list(paper_tables.IIDA_LENGTH_BUCKETS)
    labels += sorted(set(subset_of) - set(labels), key=lambda label: int(label.split("-")[0]))
    header = ["source length", "sentences (paper)", "sentences (ours)"]
    for row in table.rows:
        header += [f"{row.label} (paper)", f"{row.label} (ours)"]
    body = []
    for label in labels:
        subset = subset_of.get(label)
        count = _paper_cell(table, "n_sentences", label)
        line = [label, count.value if count else "", ""]
        for row in table.rows:
            paper_cell = _paper_cell(table, row.key, label)
            paper = "" if paper_cell is None else paper_cell.value + ("(mark)" if paper_cell.mark is None else paper_cell.mark)
            cell = by.get(row.key)
            if subset is None or cell is None or not cell.evaluated(subset):
                line += [paper, "missing"]
                continue
            with open(cell.result_path(subset), encoding="utf-8") as handle:
                result = json.load(handle)
            line[2] = result["sentences"]
            marks = ""
            for base_key, single, double in table.baselines:
                if row.key in {key for key, _, _ in table.baselines}:
                    break  # the baselines themselves carry no marks
                test = significance(cell, by.get(base_key), subset)
                if test is not None and test["delta"] > 0:
                    marks += double if test["p_value"] < 0.01 else single if test["p_value"] < 0.05 else ""
            line += [paper, f"{result['tokenized']['bleu']:.2f}{marks}"]
        body.append(line)
    text = f"### {table.title}\n\n{header_note}" + markdown_table(header, body)
    for base_key, single, double in table.baselines:
        label = next(r.label for r in table.rows if r.key == base_key)
        text += f"\n{single} / {double} after ours: significantly better than {label} (paired bootstrap, p < 0.05 / 0.01)."
    return text + "\n" + footer(table, cells, {}, marks=False)


def footer(table, cells, marks_used, marks=True, speed=None):
    from .runner import load_result

    lines = []
    signatures = set()
    for cell in cells:
        result = load_result(cell)
        if result:
            signatures.add(result["sacrebleu"]["signature"])
    if signatures:
        lines.append("sacreBLEU: " + "; ".join(sorted(signatures)))
    if marks and table.columns and table.baseline:
        single, double = table.marks
        for base_key in sorted(marks_used or {table.baseline: None}):
            label = next(r.label for r in table.rows if r.key == base_key)
            against = (marks_used or {}).get(base_key) or \
                [r.label for r in table.rows if baseline_key(table, r) == base_key and r.key != base_key]
            lines.append(f"{single} / {double} after ours: significantly better than {label} (paired bootstrap, "
                         f"1000 samples, tokenized BLEU, p < 0.05 / 0.01), for {', '.join(against)}.")
    paper = paper_tables.PAPER_TABLES.get(table.key) if paper_tables else None
    if paper is not None and paper.marks:
        meanings = "; ".join(f"{glyph} = {mark.meaning}" for glyph, mark in paper.marks.items())
        lines.append(f"The paper's marks (as printed beside its numbers): {meanings}. \"(mark)\": a mark is printed "
                     "but the text extraction does not show which one.")
    if speed is not None:
        meta = speed.get("_meta", {})
        lines.append("Train / Decode (ours): training tokens/s and beam-4 decoding sentences/s as a ratio to row 1, "
                     f"measured by the benchmark harness on one batch ({meta.get('device', '?')}, "
                     f"{meta.get('dims', '?')} dims, {meta.get('dtype', '?')}, source length {meta.get('src_len', '?')}); "
                     "paper: its own units with the ratio to its row 1 in brackets.")
    if table.columns:
        lines += assumptions(table)
    return "\n" + "\n".join(lines) + "\n" if lines else ""


def assumptions(table):
    """Evaluation choices the paper does not state, labelled as ours."""
    unstated = " ".join(paper_tables.PAPERS[table.paper].unstated) if paper_tables and \
        table.paper in paper_tables.PAPERS else "checkpoint averaging checkpoint selection beam size length penalty"
    settings = table.evaluation
    choices = [
        ("checkpoint", f"average of the last {settings.average_last} checkpoints" if settings.average_last
         else "checkpoint_best (lowest validation loss)" if settings.checkpoint == "checkpoint_best.pt"
         else settings.checkpoint),
        ("beam size", f"beam {settings.beam}"),
        ("length penalty", f"length penalty {settings.lenpen}"),
    ]
    out = [f"{ours}: {'ASSUMPTION (the paper does not state it)' if what in unstated else 'as the paper states'}"
           for what, ours in choices]
    out.append(f"output length bound --max-len-a {settings.max_len_a} --max-len-b {settings.max_len_b} "
               f"({settings.max_len_a} x source + {settings.max_len_b} tokens): ASSUMPTION (no paper states one; "
               "fairseq's default 200 tokens would cut long ASPEC / WMT outputs)")
    lines = ["Evaluation: " + "; ".join(out) + "."]
    if table.paper in TRAINING_INTERPRETATIONS:
        lines.append("Training: " + TRAINING_INTERPRETATIONS[table.paper])
    return lines


# How a paper's training description is read where it allows two readings
TRAINING_INTERPRETATIONS = {
    "iida2019": ("\"The number of tokens per batch was 2,000 and two GPUs were used in parallel\" read as fairseq's "
                 "--max-tokens 2000 per GPU (effective batch 4,000 tokens): INTERPRETATION (the other reading, 2,000 "
                 "tokens in all, halves the batch; the authors used fairseq, whose --max-tokens is per GPU)."),
}


def main(table_key, argv=None):
    from .runner import main as run_main

    return run_main(table_key, argv)

