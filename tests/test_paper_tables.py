"""paper_tables.py: internal consistency, agreement with tables.TABLES, and every cell against the
papers' text extractions (shared/papers/; those tests skip where the files are absent)."""
import os
import re

import pytest

from fairseq_ctx.reproduce import paper_tables as pt
from fairseq_ctx.reproduce.paper_tables import PAPER_TABLES, PAPERS, Cell

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CANDIDATES = [os.environ.get("FAIRSEQ_CTX_PAPERS", ""), os.path.join(ROOT, "shared", "papers"),
               "/work/shared/papers"]
PAPERS_DIR = next((d for d in _CANDIDATES if d and os.path.isdir(d)), None)
needs_text = pytest.mark.skipif(PAPERS_DIR is None, reason="shared/papers/ text extractions not available")

DECIMAL = re.compile(r"(?<![\d.])[+-]?\d+\.\d+M?(?!\d)")
KIND_FORMAT = {
    "bleu": r"\d{1,2}\.\d\d|n/a|N/A",
    "speed": r"\d\.\d\d|n/a",
    "params": r"\+?\d+(\.\d)?M|\d{2},\d{3},\d{3}|n/a",
    "delta": r"[+-]\d\.\d\d|-",
    "count": r"\d+",
    "index": r"\d+",
    "flag": r"[✓×-]",
}


def text_of(paper, which=None):
    files = PAPERS[paper].files if which is None else [PAPERS[paper].files[which]]
    return "\n".join(open(os.path.join(PAPERS_DIR, f), encoding="utf-8").read() for f in files)


def norm(text):
    """Whitespace collapsed; '$' and '*' (LaTeX math / markdown emphasis of the extraction) dropped."""
    return re.sub(r"\s+", " ", text.replace("$", "").replace("*", "")).strip()


def region(text, start, end):
    i = text.index(start)
    return text[i:text.index(end, i)]


def cells_in_order(table):
    for row, cells in table.rows.items():
        for column in table.columns:
            if column.key in cells:
                yield row, column, cells[column.key]


def printed_forms(cell):
    return cell.extracted or (cell.value,)


# ------------------------------------------------------------------------------ internal checks
def test_every_row_has_every_column_and_only_cells():
    for key, table in PAPER_TABLES.items():
        keys = [c.key for c in table.columns]
        assert len(set(keys)) == len(keys), key
        assert table.rows, key
        for row, cells in table.rows.items():
            assert list(cells) == keys, (key, row)
            assert all(isinstance(c, Cell) for c in cells.values()), (key, row)


def test_values_marks_and_notes():
    for key, table in PAPER_TABLES.items():
        for row, column, cell in cells_in_order(table):
            where = (key, row, column.key)
            if cell.value is None:
                assert cell.note, where  # unreadable values are explained
            elif column.kind in KIND_FORMAT and not (row == "n_sentences"):
                assert re.fullmatch(KIND_FORMAT[column.kind], cell.value), where
            if cell.mark is None:
                assert cell.note and cell.marked, where  # printed but unreadable: explained
            elif cell.mark:
                assert cell.mark in table.marks, where
                assert row in table.baseline_of or table.marks[cell.mark].against, where
                assert column.kind == "bleu", where


def test_baselines_and_marks_refer_to_rows():
    for key, table in PAPER_TABLES.items():
        for row, base in table.baseline_of.items():
            assert row in table.rows and base in table.rows and row != base, key
        for glyph, mark in table.marks.items():
            assert mark.meaning and mark.p in mark.meaning, (key, glyph)
            assert mark.against is None or mark.against in table.rows, (key, glyph)
        assert table.paper in PAPERS and table.caption and table.source and table.significance_test, key


def test_every_paper_records_what_it_does_not_state():
    for name, paper in PAPERS.items():
        unstated = " ".join(paper.unstated)
        for topic in ("checkpoint averaging", "checkpoint selection", "beam size", "length penalty"):
            assert topic in unstated, (name, topic)
        assert paper.stated and paper.files
        assert not any(w in " ".join(paper.stated.values()) for w in ("beam", "averag", "penalty")), name


def test_values_shared_between_tables_agree():
    t = PAPER_TABLES
    for row in ("base", "enc_deep_global_deep"):  # Yang T1 rows repeated in T2's En-De half
        for col in ("En-De", "# Para.", "Train"):
            t2_col = col if col == "En-De" else f"En-De {col}"
            assert t["yang2019_table1"].cell(row, col).value == t["yang2019_table2"].cell(row, t2_col).value
    for row in ("base", "deep_rnn", "deep_tam"):
        assert t["wang2019_table1"].cell(row, "En-De") == t["wang2019_table2"].cell(row, "En-De")
    for row in ("base", "cross_zero"):
        assert t["cao_table1"].cell(row, "Zh-En").value == t["cao_table2"].cell(row, "Zh-En").value
    assert list(t["iida2019_table2"].rows) == list(t["iida2019_table5"].rows)
    for row in t["iida2019_table2"].rows:
        for col in ("Model", "head", "hop"):
            assert t["iida2019_table2"].cell(row, col).value == t["iida2019_table5"].cell(row, col).value


def test_cao_delta_column_is_bleu_minus_row_one():
    table = PAPER_TABLES["cao_table1"]
    base = float(table.cell("base", "Zh-En").value)
    assert table.cell("base", "Δ").value == "-"
    for row in list(table.rows)[1:]:
        assert table.cell(row, "Δ").value == f"{float(table.cell(row, 'Zh-En').value) - base:+.2f}"


def test_wang_params_are_increments_over_base():
    # the text: Base + DEEP (TAM) has 114.4M parameters
    table = PAPER_TABLES["wang2019_table1"]
    assert pt.number(table.cell("base", "# Para.")) + pt.number(table.cell("deep_tam", "# Para.")) == \
        pytest.approx(114.4)


def test_iida_parameter_increments_are_whole_1024_squared_blocks():
    table = PAPER_TABLES["iida2019_table5"]
    base = pt.number(table.cell("base", "Parameter"))
    for row in table.rows:
        if row != "transformer":
            assert (pt.number(table.cell(row, "Parameter")) - base) % (1024 * 1024) == 0, row


def test_iida_length_tables_shape_and_transpose():
    for key in ("iida2019_table3", "iida2019_table4"):
        table = PAPER_TABLES[key]
        assert [c.key for c in table.columns][1:] == list(pt.IIDA_LENGTH_BUCKETS)
        assert list(table.rows) == ["n_sentences", "base", "dep_h2k2", "transformer"]
        transposed = pt.by_bucket(key)
        assert list(transposed) == list(pt.IIDA_LENGTH_BUCKETS)
        assert transposed["120-129"]["n_sentences"].value == "162"


def test_unreadable_marks_are_the_ones_expected():
    unreadable = {(k, r, c.key) for k, t in PAPER_TABLES.items() for r, c, cell in cells_in_order(t)
                  if cell.mark is None}
    assert unreadable == {
        ("iida2019_table3", "dep_h2k2", "130-139"), ("iida2019_table4", "dep_h2k2", "120-129"),
        *{("wang2019_table1", r, "En-De") for r in ("shallow_max", "shallow_attention", "deep_rnn", "deep_tam")},
        *{("wang2019_table2", r, c) for r in ("deep_rnn", "deep_tam") for c in ("En-De", "En-Fr")},
        ("wang2019_table2", "big_deep_rnn", "En-De"), ("wang2019_table2", "big_deep_tam", "En-De"),
        ("wang2019_table2", "big_deep_tam", "En-Fr"),
    }
    assert not any(cell.value is None for t in PAPER_TABLES.values() for _, _, cell in cells_in_order(t))


# ------------------------------------------------------------------------------ tables.TABLES
def test_every_tables_row_has_a_counterpart_with_the_same_numbers():
    from fairseq_ctx.reproduce.tables import TABLES

    for key, table in TABLES.items():
        assert key in PAPER_TABLES, key
        paper = PAPER_TABLES[key]
        assert paper.paper == table.paper and paper.number == int(table.name.replace("table", "")), key
        for row in table.rows:
            assert row.key in paper.rows, (key, row.key)
            for column, value in {**row.paper, **row.extra}.items():
                cell = paper.cell(row.key, column)
                assert cell is not None, (key, row.key, column)
                if isinstance(value, str):
                    assert cell.value == value, (key, row.key, column)
                else:
                    assert pt.number(cell) == pytest.approx(value), (key, row.key, column)
        if table.kind == "length":  # rows = systems, the paper's columns = length buckets
            assert [c.key for c in paper.columns][1:] == list(pt.IIDA_LENGTH_BUCKETS), key
            continue
        for column in table.columns:
            assert column.name in [c.key for c in paper.columns], (key, column.name)


# ------------------------------------------------------------------------------ against the text
@needs_text
def test_every_numeric_cell_occurs_in_the_paper_text():
    for key, table in PAPER_TABLES.items():
        text = text_of(table.paper)
        for row, column, cell in cells_in_order(table):
            for form in printed_forms(cell):
                if form and re.search(r"\d", form):
                    assert re.search(r"(?<![\d.,])" + re.escape(form) + r"(?![\d])", text), (key, row, column.key)


@needs_text
def test_captions_footers_and_quotations_occur_in_the_text():
    for key, table in PAPER_TABLES.items():
        text = norm(text_of(table.paper))
        assert norm(table.caption) in text, key
        if table.footer:
            assert norm(table.footer) in text, key
    for name, paper in PAPERS.items():
        text = norm(text_of(name))
        for topic, quote in paper.stated.items():
            quote = re.sub(r"\s*\((Table \d caption)\)$", "", quote)
            for part in quote.split(" [...] "):
                assert norm(part) in text, (name, topic, part[:60])


@needs_text
def test_label_cells_occur_in_the_text():
    for key, table in PAPER_TABLES.items():
        text = norm(text_of(table.paper))
        for row, column, cell in cells_in_order(table):
            if column.kind == "label":
                # Iida's multi-line cells ('Proposed Method (multi-hop dependent attention)') are extracted
                # line by line, interleaved with the numbers: there, check word by word
                for part in re.split(r" (?=\()", cell.value):
                    ok = norm(part) in text or (table.paper == "iida2019" and all(w in text for w in part.split()))
                    assert ok, (key, row, column.key, part)


# The tables' regions in each extraction: (file index, start, end).
REGIONS = {
    "yang2019_table1": [(0, "# Model Applied to Context Vectors", "Table 1: Experimental"),
                        (1, "| # | Model | Applied to", "Deep-Global Context\n")],
    "yang2019_table2": [(0, "System Architecture Zh En", "Table 2: Comparing"),
                        (1, "| System | Architecture", "Ablation Study on the Context Vector")],
    "yang2019_table3": [(0, "Model Query Key Dev", "Table 3: BLEU"),
                        (1, "| Model | Query | Key | Dev |", "Keys Required")],
    "wang2019_table1": [(0, "| # | Model ", "Table 1: Impact")],
    "wang2019_table2": [(0, "| Model            | En⇒De", "Table 2: Case-sensitive")],
    "cao_table1": [(0, "#\tModel\tBLEU\tΔ", "Table 1. Translation")],
    "cao_table2": [(0, "System\tArchitecture\tZh⇒En", "Table 2. Comparing")],
    "iida2019_table2": [(0, "Model\thead\thop\tja→en", "Table 2: Evaluation Result")],
    "iida2019_table3": [(0, "Table 3: BLEU per sentence length", "roposed methods")],
    "iida2019_table4": [(0, "Table 4: BLEU per sentence length", "4.2 Experimental Setup")],
    "iida2019_table5": [(0, "Model\thead\thop\tParameter", "Table 5: Model Parameters")],
}


def table_region(key, index=0):
    which, start, end = REGIONS[key][index]
    return region(text_of(PAPER_TABLES[key].paper, which), start, end)


@needs_text
@pytest.mark.parametrize("key", sorted(REGIONS))
def test_decimal_cells_in_printed_order(key):
    """The decimals of each rendering's table region, in reading order, are exactly ours."""
    ours = [form for _, _, cell in cells_in_order(PAPER_TABLES[key]) for form in printed_forms(cell)
            if form and DECIMAL.fullmatch(form)]
    for index in range(len(REGIONS[key])):
        assert DECIMAL.findall(table_region(key, index)) == ours, (key, index)


@needs_text
def test_yang_marks():
    t2 = PAPER_TABLES["yang2019_table2"]
    # the alt rendering keeps the marks: every decimal with the glyph that follows it
    alt = re.findall(r"(\d+\.\d+M?)([⇑↑]?)", table_region("yang2019_table2", 1))
    ours = [(c.value, c.mark) for _, _, c in cells_in_order(t2) if DECIMAL.fullmatch(c.value)]
    assert alt == ours
    assert not re.search("[↑⇑]", table_region("yang2019_table2", 0))  # the primary rendering drops them
    for key in ("yang2019_table1", "yang2019_table3"):
        for index in range(2):
            assert not re.search("[↑⇑†‡*]", table_region(key, index)), key
        assert not any(c.marked for _, _, c in cells_in_order(PAPER_TABLES[key]))


@needs_text
def test_yang_table3_query_key_flags():
    alt = table_region("yang2019_table3", 1)
    t3 = PAPER_TABLES["yang2019_table3"]
    assert "| Transformer-Base | - | - | 25.84 |" in alt
    first = True
    for row in ("enc_deep_global_deep", "apply_key", "apply_query"):
        q, k, dev = (t3.cell(row, c).value for c in ("Query", "Key", "Dev"))
        label = "| + Context-Aware " if first else ""
        assert f"{label}| {q} | {k} | {dev} |" in alt, row
        first = False
    assert "✓" not in table_region("yang2019_table3", 0)  # dropped by the primary rendering


@needs_text
def test_wang_marks_and_bold():
    for key in ("wang2019_table1", "wang2019_table2"):
        found = re.findall(r"(<b>)?\s*([+-]?\d+\.\d+M?)\s*(?:</b>)?\s*(?:<sup>)?\s*(↑)?", table_region(key))
        theirs = [(v, bool(arrow), bool(b)) for b, v, arrow in found]
        ours = [(c.value, c.marked, c.bold) for _, _, c in cells_in_order(PAPER_TABLES[key])
                if DECIMAL.fullmatch(c.value)]
        assert theirs == ours, key
        assert "⇑" not in table_region(key)  # both glyphs extracted as ↑: their kind is unreadable


@needs_text
def test_cao_marks():
    found = re.findall(r"([+-]?\d+\.\d+)( \[↑\]| \^\{↑↑\})?", table_region("cao_table1"))
    theirs = [(v, {"": "", " [↑]": "↑", " ^{↑↑}": "↑↑"}[m]) for v, m in found]
    ours = [(c.value, c.mark) for _, _, c in cells_in_order(PAPER_TABLES["cao_table1"]) if DECIMAL.fullmatch(c.value)]
    assert theirs == ours
    assert not re.search("[↑⇑†‡]", table_region("cao_table2"))


@needs_text
def test_iida_table2_marks():
    theirs = re.findall(r"(\d+\.\d+)([†‡]*)", table_region("iida2019_table2"))
    ours = [(c.value, c.mark) for _, _, c in cells_in_order(PAPER_TABLES["iida2019_table2"])
            if DECIMAL.fullmatch(c.value)]
    assert theirs == ours


@needs_text
@pytest.mark.parametrize("key", ["iida2019_table3", "iida2019_table4"])
def test_iida_length_tables_marks_underlines_and_labels(key):
    text = table_region(key)
    found = re.findall(r"(<u>)?(\d+\.\d+)(?:</u>)?( ?[†‡\u0820]+)?", text)
    theirs = [(v, None if "\u0820" in (m or "") else (m or "").strip(), bool(u)) for u, v, m in found]
    table = PAPER_TABLES[key]
    ours = [(c.value, c.mark, c.underlined) for _, _, c in cells_in_order(table) if DECIMAL.fullmatch(c.value)]
    assert theirs == ours
    lines = {line.split("\t")[0]: line.rstrip("\t").split("\t")[1:] for line in text.splitlines() if "\t" in line}
    assert lines["sentence length"] == list(pt.IIDA_LENGTH_BUCKETS)
    assert lines["number of sentences"] == [table.cell("n_sentences", b).value for b in pt.IIDA_LENGTH_BUCKETS]
    for row in ("base", "dep_h2k2", "transformer"):
        assert len(lines[table.cell(row, "sentence length").value]) == len(pt.IIDA_LENGTH_BUCKETS)


@needs_text
def test_iida_parameters_in_printed_order():
    theirs = re.findall(r"\d{2}[, ]\d{3}[, ]\d{3}", table_region("iida2019_table5"))
    ours = [form for _, _, c in cells_in_order(PAPER_TABLES["iida2019_table5"]) for form in printed_forms(c)
            if re.search(r"\d{3}", form)]
    assert theirs == ours


@needs_text
def test_spot_checks_against_the_raw_text():
    yang_alt = text_of("yang2019", 1)
    assert "| + Context-Aware SANs | 126.8M | 1.10 | 24.67⇑ | 106.9M | 1.16 | 28.26⇑ |" in yang_alt
    assert "| 2 | Ours | encoder | global context | 91.0M | 1.26 | 1.50 | 27.96 |" in yang_alt
    iida = text_of("iida2019")
    assert "Proposed Method\t2\t2\t12.87‡\t9.89‡\t27.33‡\t36.91‡\t14.41‡\t10.74‡" in iida
    assert "3\t+ Horizontal w/ Self Initialization\t24.88 [↑]\t+0.60" in text_of("cao")
    assert "| + DEEP (RNN)     | 29.04 <sup>↑</sup> | 41.87                     |" in text_of("wang2019")
