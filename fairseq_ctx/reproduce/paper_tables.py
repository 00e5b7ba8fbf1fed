"""The four papers' tables, cell by cell, as the papers print them (transcribed from the
text extractions of the papers, see PAPERS[...].files; in this project's development tree
they sit in ../shared/papers/, which the tests read).

Every value is the STRING the paper prints ("26.20", "88.0M", "+25.2M", "68,460,544",
"n/a"); significance marks are kept apart from the value:

    Cell.mark == ""     no mark printed
    Cell.mark == "⇑"    that mark (PaperTable.marks[glyph] says what it means, quoting the caption)
    Cell.mark is None   a mark IS printed, but which one the extraction does not let us read
                        (Cell.note says why); Cell.marked is True either way
    Cell.value is None  the value itself is unreadable (never guessed; Cell.note says why)

Cell.extracted holds the string(s) as the extraction shows them where they differ from the
value (tests/test_paper_tables.py checks both against the text files).

PAPER_TABLES is keyed like tables.TABLES ("yang2019_table1", ...) plus the tables that
tables.py does not reproduce yet ("iida2019_table3", "iida2019_table4"); row keys are the row
keys of tables.py where the row exists there. Rows and columns are in the order printed.
PAPERS (keyed like Table.paper) holds what each paper states, quoted, about evaluation,
decoding, checkpoints and hardware, and the list of what it does NOT state (so that table
footers can label our choices for those as assumptions).

Quotations are as extracted (LaTeX such as \\Rightarrow left in); " [...] " marks where the
extraction interrupts a sentence (a table in between); a trailing "(Table N caption)" says where
a quotation comes from.

Pure data: importing this module imports nothing beyond the standard library.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class Cell:
    value: Optional[str]  # as printed; None = unreadable
    mark: Optional[str] = ""  # "" = none printed; None = printed but unreadable which one
    bold: bool = False
    underlined: bool = False
    note: str = ""
    extracted: Tuple[str, ...] = ()  # the extraction's string(s), where they differ from value

    @property
    def marked(self) -> bool:
        return self.mark != ""


@dataclass(frozen=True)
class Column:
    key: str  # tables.py's column / extra key where there is one
    header: str  # the header as printed (arrow glyphs: see the table's notes)
    kind: str  # index | label | flag | params | speed | bleu | delta | count
    group: str = ""  # spanning header above it, as printed
    unit: str = ""  # what the paper says the unit is ("" = not a quantity or not stated; see notes)


@dataclass(frozen=True)
class Mark:
    meaning: str  # the caption's words, quoted
    p: str  # "p < 0.01" etc. as printed
    against: Optional[str] = None  # row key; None = the row's PaperTable.baseline_of entry


@dataclass
class PaperTable:
    paper: str  # key of PAPERS (== tables.Table.paper)
    number: int
    caption: str  # quoted from the extraction (whitespace collapsed)
    columns: List[Column]
    rows: Dict[str, Dict[str, Cell]]  # row key -> column key -> cell, in printed order
    marks: Dict[str, Mark] = field(default_factory=dict)  # glyph -> meaning; {} = the table has none
    baseline_of: Dict[str, str] = field(default_factory=dict)  # row -> row its marks compare against
    row_groups: Dict[str, str] = field(default_factory=dict)  # row -> group heading printed above it
    footer: str = ""  # text printed under / beside the table that is not the caption, quoted
    significance_test: str = ""  # as stated, or "not stated"
    notes: List[str] = field(default_factory=list)
    source: str = ""  # which rendering(s) the cells come from

    def column(self, key) -> Column:
        return next(c for c in self.columns if c.key == key)

    def cell(self, row, column) -> Optional[Cell]:
        return self.rows[row].get(column)


@dataclass
class Paper:
    title: str
    files: Tuple[str, ...]  # text extractions (../shared/papers/ in development), primary rendering first
    stated: Dict[str, str]  # topic -> quotation
    unstated: List[str]  # topics the paper does not state (our choice there is an assumption)
    notes: List[str] = field(default_factory=list)


def _cells(columns, *values, marks=None, cells=None):
    """Row helper: positional values in column order; marks={column: glyph}; cells={column: Cell} overrides."""
    keys = [c if isinstance(c, str) else c.key for c in columns]
    if len(values) != len(keys):
        raise ValueError(f"{len(values)} values for {len(keys)} columns")
    row = {k: Cell(v) for k, v in zip(keys, values)}
    for k, glyph in (marks or {}).items():
        row[k] = Cell(row[k].value, glyph)
    row.update(cells or {})
    return row


NOT_STATED = "not stated"
_UNSTATED_COMMON = [
    "checkpoint averaging (whether, and how many checkpoints)",
    "checkpoint selection (last vs. best on the development set)",
    "beam size",
    "length penalty",
    "BLEU script / tokenization of the references (multi-bleu.perl, sacreBLEU, ...)",
]

# ---------------------------------------------------------------------------------------------
# Yang et al. 2019, Context-Aware Self-Attention Networks (AAAI-19)
# ---------------------------------------------------------------------------------------------
YANG = "yang2019"
_YANG_TRAIN_HW = ("All the models are trained on eight NVIDIA P40 GPUs, each of which is allocated a batch "
                  "of 4096 tokens.")

_y1_cols = [
    Column("#", "#", "index"),
    Column("Model", "Model", "label"),
    Column("Applied to", "Applied to", "label"),
    Column("Context Vectors", "Context Vectors", "label"),
    Column("# Para.", "# Para.", "params", unit="trainable parameters, M = million (caption)"),
    Column("Train", "Train", "speed", unit="steps/second (caption); hardware of the measurement not stated"),
    Column("Decode", "Decode", "speed", unit="sentences/second (caption); hardware, batch and beam not stated"),
    Column("En-De", "BLEU", "bleu", unit="BLEU (newstest2014)"),
]
_y1 = {
    "base": _cells(_y1_cols, "1", "BASE", "n/a", "n/a", "88.0M", "1.28", "1.52", "27.31"),
    "enc_global": _cells(_y1_cols, "2", "Ours", "encoder", "global context", "91.0M", "1.26", "1.50", "27.96"),
    "enc_deep_global": _cells(_y1_cols, "3", "Ours", "encoder", "deep-global context", "99.0M", "1.25", "1.48",
                              "28.15"),
    "enc_deep": _cells(_y1_cols, "4", "Ours", "encoder", "deep context", "95.9M", "1.18", "1.38", "28.01"),
    "enc_deep_global_deep": _cells(_y1_cols, "5", "Ours", "encoder", "deep-global context + deep context",
                                   "106.9M", "1.16", "1.36", "28.26"),
    "dec_deep_global": _cells(_y1_cols, "6", "Ours", "decoder", "deep-global context", "99.0M", "1.23", "1.44",
                              "27.94"),
    "dec_deep_global_deep": _cells(_y1_cols, "7", "Ours", "decoder", "deep-global context + deep context",
                                   "106.9M", "1.15", "1.35", "28.02"),
    "both": _cells(_y1_cols, "8", "Ours", "both", "5 + 7", "125.8M", "1.04", "1.20", "28.16"),
}

_y2_cols = [
    Column("System", "System", "label"),
    Column("Architecture", "Architecture", "label"),
    Column("Zh-En # Para.", "# Para.", "params", group="Zh-En", unit="parameters, M = million (Table 1's caption)"),
    Column("Zh-En Train", "Train", "speed", group="Zh-En",
           unit="not defined in Table 2's caption; Table 1's caption defines Train as steps/second"),
    Column("Zh-En", "BLEU", "bleu", group="Zh-En", unit="BLEU (newstest2017)"),
    Column("En-De # Para.", "# Para.", "params", group="En-De", unit="parameters, M = million (Table 1's caption)"),
    Column("En-De Train", "Train", "speed", group="En-De",
           unit="not defined in Table 2's caption; Table 1's caption defines Train as steps/second"),
    Column("En-De", "BLEU", "bleu", group="En-De", unit="BLEU (newstest2014)"),
]
_y2 = {
    "vaswani_base": _cells(_y2_cols, "(Vaswani et al. 2017)", "TRANSFORMER-BASE", "n/a", "n/a", "n/a", "65M", "n/a",
                           "27.30"),
    "vaswani_big": _cells(_y2_cols, "(Vaswani et al. 2017)", "TRANSFORMER-BIG", "n/a", "n/a", "n/a", "213M", "n/a",
                          "28.40"),
    "hassan_big": _cells(_y2_cols, "(Hassan et al. 2018)", "TRANSFORMER-BIG", "n/a", "n/a", "24.20", "n/a", "n/a",
                         "n/a"),
    "base": _cells(_y2_cols, "this work", "TRANSFORMER-BASE", "107.9M", "1.21", "24.13", "88.0M", "1.28", "27.31"),
    "enc_deep_global_deep": _cells(_y2_cols, "this work", "+ Context-Aware SANs", "126.8M", "1.10", "24.67",
                                   "106.9M", "1.16", "28.26", marks={"Zh-En": "⇑", "En-De": "⇑"}),
    "big": _cells(_y2_cols, "this work", "TRANSFORMER-BIG", "303.9M", "0.58", "24.56", "264.1M", "0.61", "28.58"),
    "context_aware_big": _cells(
        _y2_cols, "this work", "+ Context-Aware SANs", "379.4M", "0.41", "25.15", "339.6M", "0.44", "28.89",
        marks={"Zh-En": "⇑"},
        cells={"En-De": Cell("28.89", "", note="no mark in the alt rendering, which does print ⇑ on the three other "
                   "Context-Aware cells of this table; the primary rendering drops every mark glyph, so it "
                   "can neither confirm nor refute this")}),
}

_y3_cols = [
    Column("Model", "Model", "label"),
    Column("Query", "Query", "flag"),
    Column("Key", "Key", "flag"),
    Column("Dev", "Dev", "bleu", unit="BLEU (En-De validation set = newstest2013)"),
]
_y3 = {
    "base": _cells(_y3_cols, "TRANSFORMER-BASE", "-", "-", "25.84"),
    "enc_deep_global_deep": _cells(_y3_cols, "+ Context-Aware", "✓", "✓", "26.42"),
    "apply_key": _cells(_y3_cols, "+ Context-Aware", "×", "✓", "26.36"),
    "apply_query": _cells(_y3_cols, "+ Context-Aware", "✓", "×", "26.20"),
}

# ---------------------------------------------------------------------------------------------
# Wang et al. 2019, Exploiting Sentential Context for Neural Machine Translation (ACL 2019)
# ---------------------------------------------------------------------------------------------
WANG = "wang2019"
_WANG_MARK_NOTE = ("a significance mark is printed, but the extraction renders both of the caption's glyphs "
                   "(p < 0.05 and p < 0.01) as ↑, so which one this is cannot be read")


def _wang_marked(value, bold=False, extracted=()):
    return Cell(value, None, bold=bold, note=_WANG_MARK_NOTE, extracted=extracted)


_w1_cols = [
    Column("#", "#", "index"),
    Column("Model", "Model", "label"),
    Column("GLOBAL(·)", "GLOBAL(·)", "label"),
    Column("DEEP(·)", "DEEP(·)", "label"),
    Column("# Para.", "# Para.", "params",
           unit="parameters, M = million; rows 2-7 print the increase over BASE (88.0M) with a '+'"),
    Column("Train", "Train", "speed", unit="steps/second on a Tesla P40 (caption)"),
    Column("Decode", "Decode", "speed", unit="sentences/second on a Tesla P40 (caption)"),
    Column("En-De", "BLEU", "bleu", unit="case-sensitive BLEU (caption)"),
]
_w1 = {
    "base": _cells(_w1_cols, "1", "BASE", "n/a", "n/a", "88.0M", "1.39", "3.85", "27.31"),
    "medium": _cells(_w1_cols, "2", "Medium", "n/a", "n/a", "+25.2M", "1.08", "3.09", "27.81"),
    "shallow_mean": _cells(_w1_cols, "3", "SHALLOW", "Mean Pooling", "n/a", "+18.9M", "1.35", "3.45", "27.58"),
    "shallow_max": _cells(_w1_cols, "4", "SHALLOW", "Max Pooling", "n/a", "+18.9M", "1.34", "3.43", "27.81"),
    "shallow_attention": _cells(_w1_cols, "5", "SHALLOW", "Attention", "n/a", "+19.9M", "1.22", "3.23", "28.04"),
    "deep_rnn": _cells(_w1_cols, "6", "DEEP", "Attention", "Rnn", "+26.8M", "1.03", "3.14", "28.38"),
    "deep_tam": _cells(_w1_cols, "7", "DEEP", "Attention", "TAM", "+26.4M", "1.07", "3.03", "28.33"),
}
for _k in ("shallow_max", "shallow_attention", "deep_rnn", "deep_tam"):
    _w1[_k]["En-De"] = _wang_marked(_w1[_k]["En-De"].value)

_w2_cols = [
    Column("Model", "Model", "label"),
    Column("En-De", "En⇒De", "bleu", unit="case-sensitive BLEU (caption), WMT14 test set"),
    Column("En-Fr", "En⇒Fr", "bleu", unit="case-sensitive BLEU (caption), WMT14 test set"),
]
_w2 = {
    "base": _cells(_w2_cols, "TRANSFORMER-BASE", "27.31", "39.32"),
    "deep_rnn": {"Model": Cell("+ DEEP (RNN)"), "En-De": _wang_marked("28.38"), "En-Fr": _wang_marked("40.15")},
    "deep_tam": {"Model": Cell("+ DEEP (TAM)"), "En-De": _wang_marked("28.33"),
                 "En-Fr": _wang_marked("40.27", bold=True)},
    "big": _cells(_w2_cols, "TRANSFORMER-BIG", "28.58", "41.41"),
    "big_deep_rnn": {"Model": Cell("+ DEEP (RNN)"), "En-De": _wang_marked("29.04"), "En-Fr": Cell("41.87")},
    "big_deep_tam": {"Model": Cell("+ DEEP (TAM)"), "En-De": _wang_marked("29.19"),
                     "En-Fr": _wang_marked("42.04", bold=True)},
}

# ---------------------------------------------------------------------------------------------
# Cao, Zhao, Yu: Cross Aggregation of Multi-Head Attention for Neural Machine Translation
# ---------------------------------------------------------------------------------------------
CAO = "cao"
_c1_cols = [
    Column("#", "#", "index"),
    Column("Model", "Model", "label"),
    Column("Zh-En", "BLEU", "bleu", unit="case-sensitive 4-gram NIST BLEU (Setup), newstest2017"),
    Column("Δ", "Δ", "delta", unit="BLEU difference to row 1 (the printed values equal BLEU minus 24.28)"),
]
_c1 = {
    "base": _cells(_c1_cols, "1", "Transformer-Base", "24.28", "-"),
    "horizontal_zero": _cells(_c1_cols, "2", "+ Horizontal w/ Zero Initialization", "24.76", "+0.48"),
    "horizontal_self": _cells(_c1_cols, "3", "+ Horizontal w/ Self Initialization", "24.88", "+0.60",
                              marks={"Zh-En": "↑"}),
    "cross_zero": _cells(_c1_cols, "4", "+ Vertical + Horizontal w/ Zero Initialization", "25.02", "+0.74",
                         marks={"Zh-En": "↑"}),
    "cross_self": _cells(_c1_cols, "5", "+ Vertical + Horizontal w/ Self Initialization", "24.68", "+0.40"),
}
_c2_cols = [
    Column("System", "System", "label"),
    Column("Architecture", "Architecture", "label"),
    Column("Zh-En", "Zh⇒En", "bleu", unit="case-sensitive 4-gram NIST BLEU (Setup), newstest2017"),
    Column("En-De", "En⇒De", "bleu", unit="case-sensitive 4-gram NIST BLEU (Setup), newstest2014"),
]
_c2 = {
    "wu_rnn": _cells(_c2_cols, "Wu et al. [40]", "RNN with 8 layers", "N/A", "26.30"),
    "gehring_cnn": _cells(_c2_cols, "Gehring et al. [8]", "CNN with 15 layers", "N/A", "26.36"),
    "vaswani_base": _cells(_c2_cols, "Vaswani et al. [32]", "Transformer-Base", "N/A", "27.30"),
    "vaswani_big": _cells(_c2_cols, "Vaswani et al. [32]", "Transformer-Big", "N/A", "28.40"),
    "hassan_big": _cells(_c2_cols, "Hassan et al. [10]", "Transformer-Big", "24.20", "N/A"),
    "li_effective_aggregation": _cells(_c2_cols, "Li et al. [16]", "Transformer-Base + Effective Aggregation",
                                       "24.68", "27.98"),
    "base": _cells(_c2_cols, "this work", "Transformer-Base", "24.28", "27.43"),
    "cross_zero": _cells(_c2_cols, "this work", "+ Cross Aggregation", "25.02", "28.04"),
}

# ---------------------------------------------------------------------------------------------
# Iida et al. 2019, multi-hop attention for RNN NMT (8th Workshop on Patent and Scientific
# Literature Translation)
# ---------------------------------------------------------------------------------------------
IIDA = "iida2019"
IIDA_BLEU_COLUMNS = ("OS ja-en", "OS en-ja", "ASPEC ja-en", "ASPEC en-ja", "OS+ctx ja-en", "OS+ctx en-ja")
_IIDA_GROUPS = {"OS": "OpenSubtitles 2018", "ASPEC": "ASPEC", "OS+ctx": "OpenSubtitles 2018 with context"}
_i2_cols = [Column("Model", "Model", "label"), Column("head", "head", "index"), Column("hop", "hop", "index")] + [
    Column(k, k.split()[1].replace("-", "→"), "bleu", group=_IIDA_GROUPS[k.split()[0]], unit="BLEU")
    for k in IIDA_BLEU_COLUMNS]
_I_MH = "Multi-head RNN (single-hop attention)"
_I_IND = "Proposed Method (multi-hop independent attention)"
_I_DEP = "Proposed Method (multi-hop dependent attention)"


def _iida_row(label, head, hop, *bleu):
    """bleu: '12.38‡' style strings: value then its mark glyph(s), as printed."""
    cells = {"Model": Cell(label), "head": Cell(head), "hop": Cell(hop)}
    for key, printed in zip(IIDA_BLEU_COLUMNS, bleu):
        value = printed.rstrip("†‡")
        cells[key] = Cell(value, printed[len(value):])
    return cells


_i2 = {
    "base": _iida_row("RNN baseline", "1", "1", "12.12", "9.27", "26.41", "36.39", "13.85", "10.24"),
    "h2k1": _iida_row(_I_MH, "2", "1", "12.38‡", "9.36†", "26.63", "36.60†", "14.14‡", "10.32"),
    "h3k1": _iida_row(_I_MH, "3", "1", "12.42‡", "9.55‡", "26.98†", "36.55", "14.28‡", "10.53‡"),
    "ind_h2k2": _iida_row(_I_IND, "2", "2", "12.47‡", "9.61‡", "26.95†", "36.31", "14.16‡", "10.18"),
    "dep_h2k2": _iida_row(_I_DEP, "2", "2", "12.87‡", "9.89‡", "27.33‡", "36.91‡", "14.41‡", "10.74‡"),
    "dep_h2k3": _iida_row(_I_DEP, "2", "3", "12.88‡", "9.87‡", "27.39‡", "37.41‡", "14.79‡", "10.79‡"),
    "dep_h3k2": _iida_row(_I_DEP, "3", "2", "13.03‡", "9.83‡", "27.27‡", "37.54‡", "14.83‡", "10.55‡"),
    "dep_h3k3": _iida_row(_I_DEP, "3", "3", "13.03‡", "9.76‡", "27.21‡", "37.49‡", "14.52‡", "10.76‡"),
    "transformer": _iida_row("Transformer", "4", "1", "15.20", "10.95", "27.50", "38.25", "15.98", "11.44"),
}

IIDA_LENGTH_BUCKETS = ("0-9", "10-19", "20-29", "30-39", "40-49", "50-59", "60-69", "70-79", "80-89", "90-99",
                       "100-109", "110-119", "120-129", "130-139")
_ilen_cols = [Column("sentence length", "sentence length", "label")] + [
    Column(b, b, "bleu", unit="BLEU (count in the 'number of sentences' row)") for b in IIDA_LENGTH_BUCKETS]
_UNREADABLE_IIDA_MARK = ("a mark is printed but the extraction shows the glyph U+0820 (SAMARITAN VOWEL SIGN AA), "
                         "which is none of the footer's marks; unreadable")


def _iida_len_row(label, *printed):
    """printed: value + mark as printed; '_' prefix = underlined; trailing '?' = unreadable mark glyph."""
    if len(printed) != len(IIDA_LENGTH_BUCKETS):
        raise ValueError(label)
    cells = {"sentence length": Cell(label)}
    for bucket, text in zip(IIDA_LENGTH_BUCKETS, printed):
        underlined = text.startswith("_")
        text = text.lstrip("_")
        if text.endswith("?"):
            cells[bucket] = Cell(text[:-1], None, underlined=underlined, note=_UNREADABLE_IIDA_MARK)
            continue
        value = text.rstrip("†‡")
        cells[bucket] = Cell(value, text[len(value):], underlined=underlined)
    return cells


_i3 = {
    "n_sentences": _iida_len_row("number of sentences", "1594", "1248", "810", "579", "457", "372", "315", "272",
                                 "238", "214", "192", "176", "162", "151"),
    "base": _iida_len_row("RNN baseline", "5.94", "18.47", "27.10", "27.16", "25.44", "22.97", "23.71", "21.70",
                          "21.34", "20.96", "23.14", "21.18", "19.78", "18.73"),
    "dep_h2k2": _iida_len_row("multi-hop dependent (head2, hop2)", "6.40‡", "19.43‡", "27.62", "27.78",
                              "_26.49†", "24.08‡", "_25.02‡", "22.42", "_22.74‡", "_22.72‡", "23.11", "20.62",
                              "20.56††", "_20.62?"),
    "transformer": _iida_len_row("Transformer", "7.50", "19.70", "27.29", "28.83", "25.67", "23.62", "24.31",
                                 "22.39", "22.34", "21.90", "22.89", "20.80", "17.88", "17.36"),
}
_i4 = {
    "n_sentences": _iida_len_row("number of sentences", "2531", "1303", "823", "591", "458", "373", "314", "272",
                                 "239", "213", "193", "177", "162", "108"),
    "base": _iida_len_row("RNN baseline", "24.44", "32.41", "36.60", "36.16", "35.58", "33.29", "31.75", "28.65",
                          "29.72", "28.43", "27.14", "25.21", "20.82", "16.86"),
    "dep_h2k2": _iida_len_row("multi-hop dependent (head2, hop2)", "24.90†", "32.83", "37.03", "37.28‡", "35.91",
                              "33.17", "33.40‡", "30.12†", "30.54", "28.52", "26.33", "25.43", "_24.18?",
                              "_20.01†"),
    "transformer": _iida_len_row("Transformer", "25.06", "_34.41", "_38.79", "38.69", "37.09", "34.10", "_33.95",
                                 "31.49", "32.35", "29.49", "27.00", "24.43", "21.90", "18.22"),
}

_i5_cols = [Column("Model", "Model", "label"), Column("head", "head", "index"), Column("hop", "hop", "index"),
            Column("Parameter", "Parameter", "params", unit="parameters (exact count)")]
_i5 = {
    "base": _cells(_i5_cols, "RNN baseline", "1", "1", "68,460,544"),
    "h2k1": _cells(_i5_cols, _I_MH, "2", "1", "70,557,696"),
    "h3k1": _cells(_i5_cols, _I_MH, "3", "1", "72,654,848"),
    "ind_h2k2": _cells(
        _i5_cols, _I_IND, "2", "2", "72,654,848",
        cells={"Parameter": Cell("72,654,848", note=(
            "the extraction garbles this cell into two readings, '72 654 848' (separators lost) and "
            "'72,054,040'. Recorded as 72,654,848: the first reading says so digit for digit, and every "
            "other row differs from the baseline by a whole multiple of 1024*1024 = 1,048,576 (this one: "
            "4 x 1,048,576, as for the (3, 1) model); 72,054,040 would differ by 3,593,496, no multiple. "
            "The head/hop cells are garbled the same way ('2 2' and '2' + blank); Table 2 prints 2 / 2."),
            extracted=("72 654 848", "72,054,040"))}),
    "dep_h2k2": _cells(_i5_cols, _I_DEP, "2", "2", "75,800,576"),
    "dep_h2k3": _cells(_i5_cols, _I_DEP, "2", "3", "81,043,456"),
    "dep_h3k2": _cells(_i5_cols, _I_DEP, "3", "2", "79,994,880"),
    "dep_h3k3": _cells(_i5_cols, _I_DEP, "3", "3", "87,334,912"),
    "transformer": _cells(_i5_cols, "Transformer", "4", "1", "81,604,608"),
}

# ---------------------------------------------------------------------------------------------
# What each paper states (quoted) and does not state
# ---------------------------------------------------------------------------------------------
PAPERS: Dict[str, Paper] = {
    YANG: Paper(
        title="Context-Aware Self-Attention Networks (Yang, Li, Wong, Chao, Wang, Tu; AAAI-19)",
        files=("yang2019-context-aware-self-attention.txt", "yang2019-context-aware-self-attention.alt-rendering.txt"),
        stated={
            "metric": "We used BLEU score (Papineni et al. 2002) as the evaluation metric.",
            "preprocessing": ("The English and German sentences were tokenized using the scripts provided in Moses. "
                              "Then, all tokenized sentences were processed by byte-pair encoding (BPE) to "
                              "alleviate the Out-of-Vocabulary problem (Sennrich, Haddow, and Birch 2016) with 32K "
                              "merge operations for both language pairs."),
            "data En-De": ("For the En De task, we trained on the widely-used WMT14 dataset consisting of about "
                           "4.56 million sentence pairs. The models were validated on newstest2013 and examined on "
                           "newstest2014."),
            "data Zh-En": ("For the Zh En task, the models were trained using all of the available parallel corpus "
                           "from WMT17 dataset, consisting of about 20.62 million sentence pairs. We used "
                           "newsdev2017 as the development set and newstest2017 as the test set."),
            "configuration": ("We followed (Vaswani et al. 2017) to set the configurations and reproduced their "
                              "reported results on the En De task. We tested both the Base and Big models, which "
                              "differ at the layer size (512 vs. 1024) and the number of attention heads (8 vs. "
                              "16)."),
            "hardware": _YANG_TRAIN_HW,
            "speed units": ("Train and Decode denote the training speed (steps/second) and the decoding speed "
                            "(sentences/second), respectively. (Table 1 caption)"),
            "significance": ("significant over the conventional self-attention counterpart (p < 0.01), tested by "
                             "bootstrap resampling. (Table 2 caption)"),
            "analysis set": "All the results are reported on En De validation set with TRANSFORMER-BASE.",
            "default model after the ablation": (
                "Unless otherwise stated, considering the training speed, we only applied the context-aware model "
                "to the encoder-side SANs in the following experiments, which employs a deepglobal context + deep "
                "context strategy (Row #5 in Table 1)."),
        },
        unstated=_UNSTATED_COMMON + [
            "case sensitivity of BLEU",
            "number of training steps / stopping criterion",
            "Chinese word segmentation (only English and German tokenization is described)",
            "hardware, batch size and beam of the decoding-speed measurement",
            "whether 'the configurations' of Vaswani et al. 2017 include its decoding setup",
        ],
        notes=[
            "Two renderings: the primary (AAAI version) drops every arrow glyph (language-pair arrows and "
            "significance marks) and the Table 3 check marks; the alt rendering (arXiv version, same numbers) keeps "
            "the ⇑ marks and ✓/× but has no captions. Marks and Table 3 flags come from the alt rendering.",
            "The evaluation defaults for this paper (evaluation/defaults.py: average_last=5, beam=4, lenpen=0.6) are Vaswani et al. 2017's published "
            "Base setup, not anything this paper states: label them as assumptions.",
        ]),
    WANG: Paper(
        title="Exploiting Sentential Context for Neural Machine Translation (Wang, Tu, Wang, Shi; ACL 2019)",
        files=("wang2019-sentential-context.txt",),
        stated={
            "metric": "We reported experimental results with case-sensitive 4gram BLEU score.",
            "preprocessing": ("We used byte-pair encoding (BPE) (Sennrich et al., 2016) with 32K merge operations "
                              "to alleviate the out-of-vocabulary problem."),
            "data": ("We conducted experiments on WMT14 En⇒De and En⇒Fr benchmarks, which contain 4.5M and 35.5M "
                     "sentence pairs respectively."),
            "configuration": ("We followed Vaswani et al. (2017) to set the model configurations, and reproduced "
                              "their reported results. We tested both Base and Big models, which differ at the "
                              "layer size (512 vs. 1024) and the number of attention heads (8 vs. 16)."),
            "hardware": ('"Train" denotes the training speed (steps/second), and "Decode" denotes the decoding '
                         'speed (sentences/second) on a Tesla P40. (Table 1 caption)'),
            "significance": ("significant over TRANSFORMER counterpart (p < 0.05/0.01), tested by bootstrap "
                             "resampling (Koehn, 2004). (Table 1 caption)"),
            "medium baseline": ("we build a new baseline model (MEDIUM in Table 1) which has a similar model size "
                                "as the proposed deep sentential context model. We change the filter size from 1024 "
                                "to 3072 in the decoder's feed-forward network (Eq.2)."),
            "parameters of Base + DEEP": ("TRANSFORMER-BASE with deep sentential context achieves comparable "
                                          "performance with the vanilla TRANSFORMER-BIG, with only less than half "
                                          "of the parameters (114.4M [...] vs. 264.1M, not shown in the table)."),
        },
        unstated=_UNSTATED_COMMON + [
            "development and test sets (newstest2013 / newstest2014 are not named)",
            "tokenizer (Moses or other)",
            "number of GPUs and batch size for training (only the speed measurement is 'on a Tesla P40')",
            "number of training steps / stopping criterion",
            "whether 'the model configurations' of Vaswani et al. 2017 include its decoding setup",
        ],
        notes=["The extraction renders both significance glyphs as ↑ (caption: '↑ / ↑ ... (p < 0.05/0.01)'), "
               "so marked cells carry mark=None. ⇑ as the key of the p < 0.01 mark is the convention of the "
               "same group's papers (Yang 2019 Table 2), not something this extraction shows.",
               "Superscript vs. inline ↑ in the extraction (<sup>↑</sup> vs ↑) is formatting noise, not a "
               "distinction between the two marks: both occur within the same column."]),
    CAO: Paper(
        title="Cross Aggregation of Multi-Head Attention for Neural Machine Translation (Cao, Zhao, Yu)",
        files=("cao-cross-aggregation-multi-head-attention.txt",),
        stated={
            "metric": ("We use the OpenNMT-py framework [14] to implement our method and use the case-sensitive "
                       "4-gram NIST BLEU score [25] as the metric to evaluate our models."),
            "data Zh-En": ("For Zh \\Rightarrow En task, the parallel corpus dataset contains total 20.6M sentence "
                           "pairs, but we only keep those with the sentence length less than 50. The newsdev2017 "
                           "is used as the validation set and the newstest2017 as the test set through the "
                           "training process."),
            "data En-De": ("While for En \\Rightarrow De task, the dataset consists of 4.6M sentence pairs, and we "
                           "choose newstest2013 as the validation set and newstest2014 is used to test the model "
                           "performance. We employ byte-pair encoding (BPE) [29] and set the merge operations as "
                           "32K for both WMT17 and WMT14 in order to reduce the vocabulary size."),
            "configuration": ("We follow their parameter configuration of the *Base* model to train our baseline "
                              "on both Zh \\Rightarrow En and En \\Rightarrow De tasks."),
            "batch": "We set batch size to 2048 tokens and the gradient accumulation times to 12 before the "
                     "back-propagation.",
            "hardware": "All the model trainings are on two NVIDIA GeForce GTX 1080 Ti GPUs.",
            "routing iterations": ("Empirically, we set the parameter iteration times T of all the models using "
                                   "the aggregation method with the number 3."),
            "significance": "significantly better than the baseline counterpart ($p < 0.05/0.01$). (Table 1 caption)",
        },
        unstated=_UNSTATED_COMMON + [
            "significance test method (the Table 1 caption gives p-values but names no test)",
            "tokenizer",
            "number of training steps / stopping criterion",
            "which Table 1 variant is Table 2's '+ Cross Aggregation' (its Zh⇒En 25.02 equals Table 1 row 4)",
            "training or decoding speed (no speed column in either table)",
        ],
        notes=["The paper prints no parameter counts and no speeds."]),
    IIDA: Paper(
        title="Multi-hop (and multi-head) attention for RNN-based NMT (Iida et al. 2019; 8th Workshop on Patent "
              "and Scientific Literature Translation)",
        files=("iida2019-multi-hop-attention-rnn.txt",),
        stated={
            "metric": "we used BLEU (Papineni et al., 2002) as the evaluation measure.",
            "implementation": "We used fairseq (Gehring et al., 2017) for implementation.",
            "training length": "For all the models, the number of epochs in training was 20.",
            "batch and hardware": ("The number of tokens per batch was 2,000 and two GPUs were used in parallel"
                                   "⁵."),
            "speed (footnote 5)": ("The speed of the decoder of the proposed multi-head and multi-hop dependent "
                                   "attention model is roughly two-thirds of that of the baseline RNN model where the "
                                   "numbers of heads and hops are 2."),
            "optimizer": ("we used Nesterov's Accelerated Gradient (Sutskever et al., 2013) as optimizer with a "
                          "learning rate of 0.005. The embedding size was 512, the hidden size was 1024, and the "
                          "encoder and the decoder are of one layer each."),
            "transformer": ("the number of heads was set to 4 according to the default setting⁴ of fairseq, and "
                            "its learning rate was set to 0.0001 following the result of investigating the value "
                            "at which its loss converged."),
            "transformer (footnote 4)": ("Its embedding size is 512, its hidden size is 512, the optimizer used is "
                                         "adam, the encoder and the decoder are of 6 layers each."),
            "tokenization": ("For tokenization, we used the SentencePiece tool (Kudo and Richardson, 2018) to set "
                             "the vocabulary size of 32,000 each for both Japanese and English in order to avoid "
                             "unknown words. Before splitting into subword units by SentencePiece, tokenization is "
                             "performed by the morphological analysis tool MeCab² for Japanese, and by Moses "
                             "Tokenizer (Koehn et al., 2007) for English³."),
            "context evaluation": ("By translating the concatenated source sentence pair, a pair of translated "
                                   "target sentences concatenated with a \\langle CONCAT \\rangle token is "
                                   "obtained. Then, only the second sentence after the \\langle CONCAT \\rangle "
                                   "token is extracted and evaluated."),
            "length buckets": ("The widths of the sentence length are segmented with the intervals of 10 words such "
                               "as 0-9 words, 10-19 words, ..., etc. Each subset for a range of the sentence length "
                               "is constructed by collecting sentences within that range according to the criterion "
                               "that the total number of word tokens within each subset is kept as 20,000."),
            "length-bucket data": ("held out sentence pairs other than those training/development/test data sets "
                                   "are used for the evaluation per sentence length in Section 4.3."),
            "no model selection on dev (conclusion)": (
                "one future work is to study how to estimate the pair of the numbers of multi-head and multi-hop "
                "with the optimal BLEU score by introducing a held-out development data set."),
        },
        unstated=_UNSTATED_COMMON + [
            "significance test method (the captions give p-values but name no test)",
            "GPU model",
            "which side's length (source or target) defines the length buckets, and in what units "
            "(the text says 'words' and 'tokens')",
            "what the underlining in Tables 3 and 4 means (the extracted footer does not say)",
        ],
        notes=["The evaluation defaults for iida2019 (evaluation/defaults.py: average_last=0, beam=5, lenpen=1.0) are fairseq's defaults, "
               "not anything the paper states: label them as assumptions."]),
}

# ---------------------------------------------------------------------------------------------
# The tables
# ---------------------------------------------------------------------------------------------
_YANG_ARROW_NOTE = ("The extraction drops the arrow between the language codes (caption: 'En De', 'Zh En'); "
                    "column keys use 'En-De' / 'Zh-En' as tables.py does.")

PAPER_TABLES: Dict[str, PaperTable] = {
    "yang2019_table1": PaperTable(
        YANG, 1,
        caption=("Table 1: Experimental results on WMT14 En De translation task using TRANSFORMER-BASE. # Para. "
                 "denotes the trainable parameter size of each model (M = million). Train and Decode denote the "
                 "training speed (steps/second) and the decoding speed (sentences/second), respectively."),
        columns=_y1_cols, rows=_y1, marks={},
        significance_test="none in this table (no marks printed, none defined by the caption)",
        notes=[
            "No significance marks: neither rendering prints one in this table and the caption defines none.",
            "'Model' is printed once per group: 'BASE' (row 1; 'Base' in the alt rendering) and 'Ours' "
            "(rows 2-8, alt rendering only). 'Applied to' is printed once per group: 'encoder' spans rows 2-5 "
            "(the primary rendering drops it), 'decoder' rows 6-7. Filled into every row here.",
            "Row 8's 'Context Vectors' cell is printed as '5 + 7' (rows 5 and 7 combined).",
            _YANG_ARROW_NOTE,
        ],
        source="primary rendering, cross-checked against the alt rendering (identical numbers)"),
    "yang2019_table2": PaperTable(
        YANG, 2,
        caption=("Table 2: Comparing with the existing NMT systems on WMT17 Zh En and WMT14 En De test sets. : "
                 "significant over the conventional self-attention counterpart (p < 0.01), tested by bootstrap "
                 "resampling."),
        columns=_y2_cols, rows=_y2,
        marks={"⇑": Mark("significant over the conventional self-attention counterpart (p < 0.01), tested by "
                         "bootstrap resampling", "p < 0.01")},
        baseline_of={"enc_deep_global_deep": "base", "context_aware_big": "big"},
        row_groups={"vaswani_base": "Existing NMT systems", "vaswani_big": "Existing NMT systems",
                    "hassan_big": "Existing NMT systems", "base": "Our NMT systems",
                    "enc_deep_global_deep": "Our NMT systems", "big": "Our NMT systems",
                    "context_aware_big": "Our NMT systems"},
        significance_test="bootstrap resampling (caption)",
        notes=[
            "The caption's mark glyph is dropped by the primary rendering (': significant ...'); the alt "
            "rendering has no caption but prints ⇑ on three cells: 24.67, 28.26 and 25.15. The Big "
            "+ Context-Aware En-De cell (28.89) is printed without a mark there.",
            "Only one mark (p < 0.01) is defined; there is no p < 0.05 mark in this table.",
            "'Train' is not defined in this caption; Table 1's caption defines it as steps/second, and this "
            "table's En-De Base rows repeat Table 1's values (1.28, 1.16).",
            "'System' is printed once per group: '(Vaswani et al. 2017)' spans two rows; 'this work' "
            "(alt rendering only) spans the four rows of our systems.",
            "'+ Context-Aware SANs' is Table 1's row 5 (deep-global context + deep context on the encoder), per "
            "the text quoted in PAPERS['yang2019'].stated['default model after the ablation'].",
            _YANG_ARROW_NOTE,
        ],
        source="numbers: both renderings (identical); marks, 'this work': alt rendering"),
    "yang2019_table3": PaperTable(
        YANG, 3,
        caption=("Table 3: BLEU scores on the En De validation set with respect to integrate context vector into "
                 "queries and keys."),
        columns=_y3_cols, rows=_y3, marks={},
        significance_test="none in this table",
        notes=[
            "Query / Key: ✓ = context applied, × = not applied, '-' = baseline. The primary rendering drops "
            "✓ and × ('+ Context-Aware 26.42 26.36 26.20'); the flags come from the alt rendering. The text "
            "agrees: 'self-attention networks indeed benefit more from incorporating global information into "
            "keys than that of queries' (key only 26.36 > query only 26.20).",
            "'+ Context-Aware' is printed once, spanning the three rows.",
            "Dev = the En-De validation set (newstest2013, per the Setup section).",
        ],
        source="numbers: both renderings; ✓/×: alt rendering"),
    "wang2019_table1": PaperTable(
        WANG, 1,
        caption=('Table 1: Impact of components on WMT14 En $\\Rightarrow$ De translation task. BLEU scores in '
                 'the table are case sensitive. "Train" denotes the training speed (steps/second), and "Decode" '
                 'denotes the decoding speed (sentences/second) on a Tesla P40. "TAM" denotes the transparent '
                 'attention model to implement the function DEEP(·). " $\\uparrow$ / $\\uparrow$ ": significant '
                 'over TRANSFORMER counterpart (p < 0.05/0.01), tested by bootstrap resampling (Koehn, 2004).'),
        columns=_w1_cols, rows=_w1,
        marks={"↑": Mark("significant over TRANSFORMER counterpart (p < 0.05), tested by bootstrap resampling "
                         "(Koehn, 2004)", "p < 0.05"),
               "⇑": Mark("significant over TRANSFORMER counterpart (p < 0.01), tested by bootstrap resampling "
                         "(Koehn, 2004)", "p < 0.01")},
        baseline_of={k: "base" for k in _w1 if k != "base"},
        significance_test="bootstrap resampling (Koehn, 2004) (caption)",
        notes=[
            "Marked cells: rows 4-7 (27.81, 28.04, 28.38, 28.33), kind unreadable (see PAPERS['wang2019'].notes). "
            "Row 2 (Medium, also 27.81) and row 3 (27.58) are unmarked.",
            "'# Para.' of rows 2-7 is the increase over BASE's 88.0M: the text gives Base + DEEP (TAM) as "
            "114.4M = 88.0M + 26.4M.",
            "Cells printed once per group, filled into every row: Model 'SHALLOW' (rows 3-5), GLOBAL(·) "
            "'Attention' (rows 6-7), DEEP(·) 'n/a' (rows 3-5, printed on row 3 only in the extraction). The "
            "extraction merges rows 3-4's GLOBAL(·) cells into 'Mean Pooling Max Pooling' on row 3; Mean Pooling "
            "is row 3 and Max Pooling row 4 (the text: 'mean pooling ... and max pooling').",
            "Row 6's DEEP(·) is extracted as 'Rnn' (small capitals; Table 2 and the text write RNN); row 2's "
            "Model 'Medium' is written MEDIUM in the text.",
        ],
        source="the single extraction"),
    "wang2019_table2": PaperTable(
        WANG, 2,
        caption=('Table 2: Case-sensitive BLEU scores on WMT14 En $\\Rightarrow$ De and En $\\Rightarrow$ Fr test '
                 'sets. " $\\uparrow / \\uparrow$ ": significant over TRANSFORMER counterpart (p < 0.05/0.01), '
                 'tested by bootstrap resampling.'),
        columns=_w2_cols, rows=_w2,
        marks={"↑": Mark("significant over TRANSFORMER counterpart (p < 0.05), tested by bootstrap resampling",
                         "p < 0.05"),
               "⇑": Mark("significant over TRANSFORMER counterpart (p < 0.01), tested by bootstrap resampling",
                         "p < 0.01")},
        baseline_of={"deep_rnn": "base", "deep_tam": "base", "big_deep_rnn": "big", "big_deep_tam": "big"},
        significance_test="bootstrap resampling (caption)",
        notes=[
            "Marked: every + DEEP cell except TRANSFORMER-BIG + DEEP (RNN) En⇒Fr (41.87), which is unmarked; kind "
            "unreadable (see PAPERS['wang2019'].notes).",
            "Bold (best per column and model size, as extracted): En⇒Fr 40.27 and 42.04.",
            "TRANSFORMER counterpart = TRANSFORMER-BASE for the Base rows, TRANSFORMER-BIG for the Big rows.",
        ],
        source="the single extraction"),
    "cao_table1": PaperTable(
        CAO, 1,
        caption=("Table 1. Translation performances of model variations on WMT17 Chinese-to-English (Zh "
                 "\\Rightarrow En) task. “[↑] / ^{↑↑}”: significantly better than the baseline counterpart "
                 "($p < 0.05/0.01$)."),
        columns=_c1_cols, rows=_c1,
        marks={"↑": Mark("significantly better than the baseline counterpart (p < 0.05)", "p < 0.05"),
               "↑↑": Mark("significantly better than the baseline counterpart (p < 0.01)", "p < 0.01")},
        baseline_of={k: "base" for k in _c1 if k != "base"},
        significance_test=NOT_STATED,
        notes=[
            "The paper prints a Δ column (BLEU minus row 1's 24.28; row 1 prints '-').",
            "Marks: rows 3 and 4 carry the single ↑ (extracted '[↑]', the caption's p < 0.05 form); no cell "
            "carries ↑↑. Rows 2 and 5 are unmarked.",
            "Zh⇒En training data filtered to sentences shorter than 50 (Setup).",
        ],
        source="the single extraction"),
    "cao_table2": PaperTable(
        CAO, 2,
        caption=("Table 2. Comparing with existing NMT systems on WMT17 Chinese-to-English (Zh⇒En) and WMT14 "
                 "English-to-German (En⇒De) tasks."),
        columns=_c2_cols, rows=_c2, marks={},
        row_groups={**{k: "Existing NMT Systems" for k in ("wu_rnn", "gehring_cnn", "vaswani_base", "vaswani_big",
                                                            "hassan_big", "li_effective_aggregation")},
                    "base": "Our NMT Systems", "cross_zero": "Our NMT Systems"},
        significance_test="none in this table",
        notes=[
            "No significance marks and no caption definition of any.",
            "'Vaswani et al. [32]' and 'this work' are printed once, spanning two rows each.",
            "'+ Cross Aggregation' is not tied to a Table 1 row by the paper; its Zh⇒En 25.02 equals Table 1 "
            "row 4 (zero initialization), hence tables.py's key cross_zero.",
        ],
        source="the single extraction"),
    "iida2019_table2": PaperTable(
        IIDA, 2,
        caption="Table 2: Evaluation Result",
        footer=("Proposed methods that significantly outperform the RNN baseline are indicated by $\\frac{1}{p} "
                "\\leq 0.05$ and $\\frac{1}{p} (p \\leq 0.01)$."),
        columns=_i2_cols, rows=_i2,
        marks={"†": Mark("significantly outperform the RNN baseline (p ≤ 0.05)", "p ≤ 0.05", "base"),
               "‡": Mark("significantly outperform the RNN baseline (p ≤ 0.01)", "p ≤ 0.01", "base")},
        baseline_of={k: "base" for k in _i2 if k not in ("base", "transformer")},
        significance_test=NOT_STATED,
        notes=[
            "The footer's two glyphs are garbled in the extraction ('\\frac{1}{p}'); the cells print † and ‡, "
            "and Table 3's footer defines † (p ≤ 0.05) and ‡ (p ≤ 0.01) against the RNN baseline.",
            "The multi-head single-hop rows are marked too although the footer speaks of 'proposed methods'. "
            "The Transformer row is unmarked (not tested).",
            "The text adds: dependent (2, 2) vs independent (2, 2) on ASPEC, 'Both differences are significant "
            "at the level of 1% respectively.' (no mark in the table).",
            "Model is printed once per group (multi-line cells): 'Multi-head RNN (single-hop attention)', "
            "'Proposed Method (multi-hop independent attention)', 'Proposed Method (multi-hop dependent "
            "attention)'. The header 'ASPEC' is extracted as 'AS PEC'.",
        ],
        source="the single extraction"),
    "iida2019_table3": PaperTable(
        IIDA, 3,
        caption="Table 3: BLEU per sentence length (ASPEC $ja \\rightarrow en$)",
        footer=("roposed methods that significantly outperform the RNN Baseline are indicated by $\\dagger (p \\le "
                "0.05)$ and $\\ddagger (p \\le 0.01)$. Proposed methods that significantly outperform the "
                "Transformer are indicated by $\\dagger (p \\le 0.05)$ and $\\dagger \\dagger (p \\le 0.01)$."),
        columns=_ilen_cols, rows=_i3,
        marks={"†": Mark("significantly outperform the RNN Baseline (p ≤ 0.05) -- but the extracted footer also "
                         "gives † (p ≤ 0.05) for 'significantly outperform the Transformer', so a lone † is "
                         "ambiguous between the two", "p ≤ 0.05", "base"),
               "‡": Mark("significantly outperform the RNN Baseline (p ≤ 0.01)", "p ≤ 0.01", "base"),
               "††": Mark("significantly outperform the Transformer (p ≤ 0.01)", "p ≤ 0.01", "transformer")},
        baseline_of={"dep_h2k2": "base"},
        significance_test=NOT_STATED,
        notes=[
            "Layout as printed: buckets are columns, systems rows; by_bucket() transposes.",
            "Two mark families (vs RNN Baseline, vs Transformer); as extracted, † belongs to both, so a lone † "
            "cannot be attributed. Where the proposed method is below the Transformer a mark can only be the "
            "RNN one. The text: 'the proposed method significantly outperforms Transformer when the sentence "
            "length was between 120 and 129 tokens both direction'.",
            "130-139 of the proposed method: a mark is printed but extracted as U+0820 (unreadable): mark=None.",
            "Underlined cells (as extracted) are recorded in Cell.underlined; the extracted footer does not say "
            "what underlining means.",
            "The footer is extracted once, under this table, starting 'roposed' (its P lost); Table 4 uses the "
            "same glyphs.",
            "Data: held-out ASPEC sentence pairs, buckets of about 20,000 word tokens each (quoted in PAPERS).",
        ],
        source="the single extraction"),
    "iida2019_table4": PaperTable(
        IIDA, 4,
        caption="Table 4: BLEU per sentence length (ASPEC $en \\rightarrow ja$)",
        columns=_ilen_cols, rows=_i4,
        marks={"†": Mark("significantly outperform the RNN Baseline (p ≤ 0.05) -- but Table 3's extracted footer "
                         "also gives † (p ≤ 0.05) for 'significantly outperform the Transformer', so a lone † is "
                         "ambiguous between the two", "p ≤ 0.05", "base"),
               "‡": Mark("significantly outperform the RNN Baseline (p ≤ 0.01)", "p ≤ 0.01", "base"),
               "††": Mark("significantly outperform the Transformer (p ≤ 0.01)", "p ≤ 0.01", "transformer")},
        baseline_of={"dep_h2k2": "base"},
        significance_test=NOT_STATED,
        notes=[
            "Layout as printed: buckets are columns, systems rows; by_bucket() transposes.",
            "No footer is extracted under this table; Table 3's footer defines the glyphs it uses.",
            "120-129 of the proposed method: a mark is printed but extracted as U+0820 (unreadable): mark=None. "
            "The text says the proposed method significantly outperforms the Transformer at 120-129 in both "
            "directions.",
            "130-139 of the proposed method (20.01) carries a lone †: RNN or Transformer family cannot be told "
            "(it is above both). 0-9 (24.90†) and 70-79 (30.12†) are below the Transformer, so their † can "
            "only be the RNN one.",
            "Underlined cells (as extracted), including three Transformer cells, are recorded in "
            "Cell.underlined; the meaning of underlining is not stated in the extraction.",
        ],
        source="the single extraction"),
    "iida2019_table5": PaperTable(
        IIDA, 5,
        caption="Table 5: Model Parameters",
        columns=_i5_cols, rows=_i5, marks={},
        significance_test="not applicable",
        notes=["The independent (2, 2) row is garbled in the extraction; see its Parameter cell's note."],
        source="the single extraction"),
}


def by_bucket(table_key) -> Dict[str, Dict[str, Cell]]:
    """Iida Tables 3/4 transposed: bucket label -> row key (n_sentences, base, dep_h2k2, transformer) -> cell."""
    table = PAPER_TABLES[table_key]
    return {b: {row: cells[b] for row, cells in table.rows.items()} for b in IIDA_LENGTH_BUCKETS}


def number(cell: Cell):
    """The printed value as a number (float for decimals, int for counts; None for n/a, '-', unreadable)."""
    if cell.value is None:
        return None
    text = cell.value.replace(",", "").rstrip("M")
    try:
        return int(text) if text.lstrip("+-").isdigit() else float(text)
    except ValueError:
        return None


def paper_value(table_key, row, column) -> Optional[Cell]:
    return PAPER_TABLES[table_key].cell(row, column)
