"""fairseq-ctx-evaluate (fairseq_ctx/evaluation/): every sentence accounted for, corpus order,
sacreBLEU with signature; --paper defaults from the one table the reproduction evaluates with,
explicit options winning, and no second evaluation command."""
import dataclasses
import json
import os
import re

import pytest

from fairseq_ctx import cli
from fairseq_ctx.evaluation import command, defaults
from fairseq_ctx.evaluation.generate import parse_hypotheses
from fairseq_ctx.evaluation.scoring import length_statistics, score
from fairseq_ctx.reproduce import runner, tables
from tests.conftest import ROOT, TINY_TEST_SENTENCES

GENERATE_OUTPUT = "S-1\tb\nH-1\t-0.5\tsecond\nD-1\t-0.5\tsecond\nS-0\ta\nH-0\t-0.1\tfirst\n"
SETTINGS = ("beam", "lenpen", "average_last", "max_len_a", "max_len_b", "compound_split")


def test_hypotheses_are_returned_in_corpus_order():
    assert parse_hypotheses(GENERATE_OUTPUT, 2) == ["first", "second"]


def test_a_dropped_sentence_is_an_error_not_a_lower_score():
    with pytest.raises(RuntimeError, match=r"translated 2 sentences but the reference has 3: missing ids \[2\]"):
        parse_hypotheses(GENERATE_OUTPUT, 3)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x0c", "\x1e"])
def test_a_hypothesis_holding_a_unicode_line_separator_is_kept_whole(separator):
    output = f"S-0\ta\nH-0\t-0.1\tsaid{separator}hello there\nS-1\tb\nH-1\t-0.2\tok\n"
    assert parse_hypotheses(output, 2) == [f"said{separator}hello there", "ok"]


def test_duplicate_hypotheses_are_rejected():
    with pytest.raises(RuntimeError, match="more than one hypothesis"):
        parse_hypotheses(GENERATE_OUTPUT + "H-0\t-0.2\tagain\n", 2)


def test_score_reports_sacrebleu_signature_and_tokenizer_per_language():
    perfect = score(["The cat sat on the mat."], ["The cat sat on the mat."], "en")
    assert perfect["bleu"] == 100.0 and "tok:13a" in perfect["signature"]
    assert "tok:zh" in score(["猫坐在垫子上。"], ["猫坐在垫子上。"], "zh")["signature"]


def test_length_statistics_split_bleu_into_the_brevity_penalty_and_the_precisions():
    """From BLEU's definition (Papineni et al. 2002): BLEU = BP * exp(mean log p_n), BP =
    exp(1 - r / c) when the output length c is below the reference length r, else 1."""
    import math

    ref = ["a b c d e f g h"]  # 8 tokens; 13a tokenisation leaves them
    short = length_statistics(["a b c d e f"], ref, "en")  # every n-gram matches: p_n = 1
    assert short["sys_len"] == 6 and short["ref_len"] == 8 and short["ratio"] == 0.75
    assert short["bp"] == pytest.approx(math.exp(1 - 8 / 6), abs=1e-4)
    assert short["bleu_without_bp"] == 100.0 and short["precisions"] == [100.0] * 4
    assert score(["a b c d e f"], ref, "en")["bleu"] == pytest.approx(100 * math.exp(1 - 8 / 6), abs=0.01)
    long = length_statistics(["a b c d e f g h x y"], ref, "en")  # 10 tokens: p_n = (9 - n) / (11 - n)
    precisions = [(9 - n) / (11 - n) for n in range(1, 5)]
    assert long["bp"] == 1.0 and long["ratio"] == 1.25
    assert long["precisions"] == [round(100 * p, 2) for p in precisions]
    assert long["bleu_without_bp"] == pytest.approx(100 * math.exp(sum(map(math.log, precisions)) / 4), abs=0.01)
    assert length_statistics(ref, ref, "en")["chrf"] == 100.0
    assert length_statistics(["xyz"], ref, "en")["chrf"] == 0.0
    assert "nc:6" in length_statistics(ref, ref, "en")["chrf_signature"]  # chrF's character order, named


def test_bleu_without_bp_is_the_precisions_geometric_mean_when_short_and_when_empty():
    """Short and imperfect (BP < 1 and p_n < 1): BLEU without BP is exp(mean log p_n), with
    sacreBLEU's "exp" smoothing of a precision with no match (1 / (2 totals)); no output at
    all (BP 0): None (no precision to average), not a division by zero."""
    import math

    ref = ["a b c d e f g h"]
    short = length_statistics(["a b c x e f"], ref, "en")  # 6 tokens, "x" breaks the n-grams across it
    precisions = [5 / 6, 3 / 5, 1 / 4, 1 / (2 * 3)]  # 4-grams: 0 of 3 match -> smoothed
    assert short["bp"] == pytest.approx(math.exp(1 - 8 / 6), abs=1e-4)
    assert short["bleu_without_bp"] == pytest.approx(100 * math.exp(sum(map(math.log, precisions)) / 4), abs=0.01)
    assert short["bleu_without_bp"] * short["bp"] == pytest.approx(score(["a b c x e f"], ref, "en")["bleu"], abs=0.02)
    empty = length_statistics([""], ref, "en")
    assert empty["bp"] == 0.0 and empty["sys_len"] == 0 and empty["ratio"] == 0.0
    assert empty["bleu_without_bp"] is None and empty["chrf"] == 0.0


# -- --paper: one table of settings, shared with the reproduction ------------------------------------


@pytest.fixture
def files(tmp_path):
    for name in ("bin", "ckpts"):
        (tmp_path / name).mkdir()
    for name in ("ref", "src", "ckpt.pt"):
        (tmp_path / name).write_text("x\n")
    return tmp_path


def _parse(files, *options, checkpoint=("--save-dir",)):
    where = [*checkpoint, str(files / ("ckpts" if checkpoint == ("--save-dir",) else "ckpt.pt"))]
    return command.parse(["--data", str(files / "bin"), *where, "--src", "en", "--tgt", "de", "--ref",
                          str(files / "ref"), "--out-dir", str(files / "out"), *options])


def _settings(args):
    return {name: getattr(args, name) for name in SETTINGS}


def _eval_commands(table_key):
    """The evaluation commands fairseq-ctx-reproduce TABLE runs (its default options)."""
    table = tables.TABLES[table_key]
    options = runner.build_parser(table).parse_args([])
    options.train_extra = []
    return [runner.eval_command(cell, cell.subsets[0])
            for cell in runner.build_cells(table, table.rows[:1], options, "/results", "/data")]


def _option(cmd, name):
    return cmd[cmd.index(name) + 1]


@pytest.mark.parametrize("key", sorted(k for k, t in tables.TABLES.items() if t.columns))
def test_paper_defaults_are_what_the_reproduction_evaluates_with(key, files):
    table = tables.TABLES[key]
    args = _parse(files, "--paper", table.paper)
    assert _settings(args) == {name: getattr(table.evaluation, name) for name in SETTINGS}
    assert args.checkpoint == table.evaluation.checkpoint
    for cmd in _eval_commands(key):  # the runner's command spells out the same values
        assert _option(cmd, "--paper") == table.paper
        for name in SETTINGS:
            assert _option(cmd, "--" + name.replace("_", "-")) == str(getattr(args, name)), (key, name)


def test_a_changed_paper_setting_changes_the_command_and_the_reproduction_alike(files, monkeypatch):
    """The numbers exist once: change cao's entry and fairseq-ctx-evaluate --paper cao, the Cao
    tables, their evaluation commands and their footers all follow."""
    changed = dataclasses.replace(defaults.PAPER_DEFAULTS["cao"], beam=7, lenpen=0.9, average_last=3, max_len_a=1.5,
                                  max_len_b=20, compound_split="yes")
    monkeypatch.setitem(defaults.PAPER_DEFAULTS, "cao", changed)
    want = {name: getattr(changed, name) for name in SETTINGS}
    assert _settings(_parse(files, "--paper", "cao")) == want
    for key in ("cao_table1", "cao_table2"):
        assert tables.TABLES[key].evaluation == changed
        for cmd in _eval_commands(key):
            assert {name: _option(cmd, "--" + name.replace("_", "-")) for name in SETTINGS} == \
                {name: str(value) for name, value in want.items()}
        footer = " ".join(tables.assumptions(tables.TABLES[key]))
        assert "average of the last 3 checkpoints" in footer and "beam 7" in footer and "length penalty 0.9" in footer
        assert "--max-len-a 1.5 --max-len-b 20" in footer
    assert _settings(_parse(files, "--paper", "yang2019"))["beam"] == defaults.PAPER_DEFAULTS["yang2019"].beam != 7


def test_without_paper_the_demo_defaults(files):
    args = _parse(files)
    demo = defaults.PAPER_DEFAULTS["demo"]
    assert args.paper == "demo" == defaults.DEFAULT_PAPER
    assert _settings(args) == {name: getattr(demo, name) for name in SETTINGS}
    # what scripts/demo.sh evaluated before: fairseq-generate's own lenpen and length bound, beam 5,
    # the last checkpoint (the demo trains with --disable-validation: there is no checkpoint_best.pt)
    assert (args.beam, args.lenpen, args.max_len_a, args.max_len_b) == (5, 1.0, 0, 200)
    assert args.average_last == 0 and args.checkpoint == "checkpoint_last.pt"


def test_explicit_options_override_the_paper(files):
    args = _parse(files, "--paper", "yang2019", "--beam", "9", "--lenpen", "1.2", "--max-len-b", "300",
                  "--compound-split", "no")
    yang = defaults.PAPER_DEFAULTS["yang2019"]
    assert (args.beam, args.lenpen, args.max_len_b, args.compound_split) == (9, 1.2, 300, "no")
    assert (args.max_len_a, args.average_last) == (yang.max_len_a, yang.average_last)  # the rest: the paper's
    assert _parse(files, "--paper", "yang2019", "--average-last", "0").average_last == 0
    with pytest.raises(SystemExit):  # -1 averaged every checkpoint but the oldest
        _parse(files, "--paper", "yang2019", "--average-last", "-1")
    assert _parse(files, "--paper", "iida2019", "--average-last", "2").average_last == 2
    # a checkpoint file is evaluated as it is: the paper's averaging does not apply
    assert _parse(files, "--paper", "yang2019", checkpoint=("--path",)).average_last == 0


def _fails(capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        cli.evaluate(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    return errors[0]


def test_unknown_paper_is_one_clear_error_with_exit_2(files, capsys):
    base = ["--data", str(files / "bin"), "--save-dir", str(files / "ckpts"), "--src", "en", "--tgt", "de",
            "--ref", str(files / "ref"), "--out-dir", str(files / "out")]
    line = _fails(capsys, ["--paper", "vaswani2017", *base])
    assert "--paper" in line and "'vaswani2017'" in line and all(p in line for p in defaults.PAPER_DEFAULTS)
    without_save_dir = base[:2] + base[4:]
    assert "--average-last" in _fails(capsys, ["--path", str(files / "ckpt.pt"), "--average-last", "3", *without_save_dir])
    assert "--source" in _fails(capsys, ["--length-buckets", *base])
    assert "--bucket-width must be at least 1" in _fails(capsys, ["--length-buckets", "--source", str(files / "src"),
                                                                   "--bucket-width", "0", *base])
    assert not (files / "out").exists()


def test_generate_args_after_the_separator_are_used_and_recorded_or_refused(files, capsys):
    """`-- --beam 9` made fairseq-generate decode with beam 9 while result.json said the
    paper's beam: now such an option (or its alias) is taken as this command's own (used and
    recorded); one without an equivalent here is refused, pointing at the right one."""
    base = ["--data", str(files / "bin"), "--save-dir", str(files / "ckpts"), "--src", "en", "--tgt", "de",
            "--ref", str(files / "ref"), "--out-dir", str(files / "out"), "--paper", "yang2019"]
    args = _parse(files, "--paper", "yang2019", "--", "--beam", "9", "--lenpen=-0.5", "--unkpen", "1",
                  "--max-len-b", "7", "--max-sentences", "3", "--remove-bpe", "--sacrebleu")
    assert (args.beam, args.lenpen, args.max_len_b, args.batch_size) == (9, -0.5, 7, 3)
    assert args.remove_bpe == "@@ " and args.extra == ["--unkpen", "1", "--sacrebleu"]
    assert args.max_len_a == defaults.PAPER_DEFAULTS["yang2019"].max_len_a
    assert "use --subset instead" in _fails(capsys, [*base, "--", "--gen-subset", "valid"])
    assert "use --tgt instead" in _fails(capsys, [*base, "--", "-t", "en"])
    assert "needs a value" in _fails(capsys, [*base, "--", "--beam", "-s", "de"])
    assert "cannot be changed" in _fails(capsys, [*base, "--", "--nbest", "3"])
    assert "give it once" in _fails(capsys, [*base, "--beam", "4", "--", "--beam", "9"])
    assert not (files / "out").exists()


def test_line_counts_are_checked_before_anything_is_generated(files, capsys):
    """A 50-line --baseline-hyp against 100 references failed only after the whole generation."""
    (files / "short").write_text("x\n")
    (files / "ref").write_text("x\ny\n")
    base = ["--data", str(files / "bin"), "--path", str(files / "ckpt.pt"), "--src", "en", "--tgt", "de",
            "--ref", str(files / "ref"), "--out-dir", str(files / "out")]
    line = _fails(capsys, [*base, "--baseline-hyp", str(files / "short")])
    assert "--baseline-hyp" in line and "has 1 lines" in line and "has 2" in line, line
    line = _fails(capsys, [*base, "--length-buckets", "--source", str(files / "src")])
    assert "--source" in line and "has 1 lines" in line, line
    assert not (files / "out").exists()


def test_a_reference_in_another_encoding_is_one_line_before_anything_is_generated(files, capsys):
    (files / "ref").write_bytes("caf\u00e9\n".encode("latin-1"))
    base = ["--data", str(files / "bin"), "--path", str(files / "ckpt.pt"), "--src", "en", "--tgt", "de",
            "--ref", str(files / "ref"), "--out-dir", str(files / "out")]
    line = _fails(capsys, base)
    assert "--ref" in line and "not valid UTF-8" in line, line
    assert not (files / "out").exists()


def test_strip_concat_refuses_a_2to2_reference_before_anything_is_generated(files, capsys, monkeypatch):
    """--strip-concat strips the hypotheses only: scored against the 2-to-2 target file (context
    <CONCAT> sentence), a perfect system got 36 BLEU instead of 100."""
    from fairseq_ctx.evaluation import generate

    def never(*_args, **_kwargs):
        raise AssertionError("fairseq-generate ran")

    monkeypatch.setattr(generate, "generate", never)
    (files / "ref").write_text("first\nfirst <CONCAT> second\n")
    base = ["--data", str(files / "bin"), "--path", str(files / "ckpt.pt"), "--src", "en", "--tgt", "de",
            "--ref", str(files / "ref"), "--out-dir", str(files / "out")]
    line = _fails(capsys, [*base, "--strip-concat"])
    assert "--ref" in line and "line 2 contains <CONCAT>" in line and "sentence-level reference" in line, line
    assert "fairseq-ctx-strip-concat-context" in line, line
    assert not (files / "out").exists()
    (files / "ref").write_text("first\nsecond\n")  # the sentence-level reference is accepted
    assert command.parse([*base, "--strip-concat"]).strip_concat


def _evaluate_with(monkeypatch, files, generated, *options, ref=b"first\nsecond\n"):
    """command.run with fairseq-generate replaced by ``generated`` (its output, or an exception)."""
    from fairseq_ctx.evaluation import generate

    def fake(*_args, **_kwargs):
        if isinstance(generated, Exception):
            raise generated
        return generated

    monkeypatch.setattr(generate, "generate", fake)
    (files / "ref").write_bytes(ref)
    (files / "src").write_text("a\nb\n")
    return command.run(_parse(files, *options, checkpoint=("--path",)))


def test_a_reference_with_a_bom_or_crlf_line_ends_is_scored_as_its_text(files, monkeypatch):
    """Read in text mode, a UTF-8 BOM stayed on the first reference sentence: its first word no longer
    matched the hypothesis's, and the score dropped without a word."""
    generated = "H-0\t-0.1\tthe first one here\nH-1\t-0.5\tand the second one\n"
    text = b"the first one here\nand the second one\n"
    assert _evaluate_with(monkeypatch, files, generated, ref=text)["sacrebleu"]["bleu"] == 100.0
    for ref in (b"\xef\xbb\xbf" + text, text.replace(b"\n", b"\r\n"), b"\xef\xbb\xbf" + text.replace(b"\n", b"\r\n")[:-2]):
        assert _evaluate_with(monkeypatch, files, generated, ref=ref)["sacrebleu"]["bleu"] == 100.0, ref


def test_a_carriage_return_inside_a_reference_sentence_is_one_line_before_anything_is_generated(files, capsys):
    """Text mode split the line there: one reference more than the subset's sentences (refused
    by the count, naming neither the line nor the cause), or, where the subset had been binarised
    from that same file, every later sentence scored against its own reference but with no word
    of the split."""
    (files / "ref").write_bytes(b"first\rhalf\nsecond\n")
    line = _fails(capsys, ["--data", str(files / "bin"), "--path", str(files / "ckpt.pt"), "--src", "en", "--tgt",
                           "de", "--ref", str(files / "ref"), "--out-dir", str(files / "out")])
    assert "--ref" in line and "line 1 holds a carriage return" in line, line
    assert not (files / "out").exists()


def _folder(path):
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))}


def test_an_evaluation_replaces_the_earlier_one_in_its_folder_whole_or_not_at_all(files, monkeypatch, capsys):
    """Into a folder that held another system's evaluation, a failed run left its new generate.out and
    hypotheses beside the old result.json and length files, and a finished one left the old length
    files: a folder that looked complete and mixed two systems."""
    out = files / "out"
    _evaluate_with(monkeypatch, files, GENERATE_OUTPUT, "--length-buckets", "--source", str(files / "src"))
    assert {"result.json", "generate.out", "hyp.detok.de", "length.md"} <= set(os.listdir(out))
    (out / "notes.txt").write_text("mine")  # not an evaluation's: never touched
    first = _folder(out)

    with pytest.raises(RuntimeError, match="generate broke"):
        _evaluate_with(monkeypatch, files, RuntimeError("generate broke"))
    assert _folder(out) == first  # nothing half-written, nothing left over
    from fairseq_ctx.evaluation import scoring

    def late(*_args, **_kwargs):
        raise ValueError("broke late")

    with monkeypatch.context() as patch:  # fails after the hypotheses are written: still nothing
        patch.setattr(scoring, "bleu_by_length", late)
        with pytest.raises(ValueError, match="broke late"):
            _evaluate_with(monkeypatch, files, GENERATE_OUTPUT, "--length-buckets", "--source", str(files / "src"))
    assert _folder(out) == first

    capsys.readouterr()
    other = GENERATE_OUTPUT.replace("first", "other")
    result = _evaluate_with(monkeypatch, files, other)  # no --length-buckets this time
    assert "replacing the earlier evaluation" in capsys.readouterr().err
    assert _visible(out) == ["generate.out", "hyp.detok.de", "notes.txt", "result.json"]
    assert (out / "hyp.detok.de").read_text().splitlines() == ["other", "second"]
    assert json.loads((out / "result.json").read_text()) == result and "length_buckets" not in result


def _visible(folder):
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def test_an_evaluation_keeps_the_checkpoint_it_evaluates_and_any_target_language_name(files, monkeypatch):
    """The average an earlier evaluation kept in OUT, evaluated again with --path into OUT, was
    deleted as an earlier output; a --tgt with a digit lost its hypotheses file."""
    from fairseq_ctx.evaluation import generate

    monkeypatch.setattr(generate, "generate", lambda *a, **k: GENERATE_OUTPUT)
    out = files / "out"
    out.mkdir()
    (out / "average_last5.pt").write_bytes(b"weights")
    (out / "partial-evaluate.killed").mkdir()  # left by an evaluation killed before its finally
    (files / "ref").write_text("first\nsecond\n")
    args = command.parse(["--data", str(files / "bin"), "--path", str(out / "average_last5.pt"), "--src", "en",
                          "--tgt", "de2", "--ref", str(files / "ref"), "--out-dir", str(out)])
    command.run(args)
    assert _visible(out) == ["average_last5.pt", "generate.out", "hyp.detok.de2", "result.json"]
    assert (out / "average_last5.pt").read_bytes() == b"weights"


def test_a_second_evaluation_into_the_same_folder_is_refused_at_once(files, monkeypatch, capsys):
    from fairseq_ctx.evaluation import generate
    from fairseq_ctx.run_lock import RunLock

    monkeypatch.setattr(generate, "generate", lambda *a, **k: pytest.fail("generated while another evaluation ran"))
    (files / "out").mkdir()
    with RunLock(str(files / "out"), ".evaluate.lock", inherited=False):
        with pytest.raises(SystemExit) as exit_info:
            command.main(["--data", str(files / "bin"), "--path", str(files / "ckpt.pt"), "--src", "en", "--tgt", "de",
                          "--ref", str(files / "ref"), "--out-dir", str(files / "out")])
    assert "another evaluation is writing" in str(exit_info.value.code)
    assert _visible(files / "out") == []


def test_the_printed_line_says_when_the_bootstrap_is_no_test(files, monkeypatch, capsys):
    bootstrap = {"baseline": 0.0, "system": 0.0, "delta": 0.0, "p_value": 0.001, "samples": 1000,
                 "p_value_meaningful": False, "on": "tokenized BLEU"}
    result = {"sacrebleu": {"bleu": 0.0, "signature": "sig"}, "tokenized": {"bleu": 0.0}, "sentences": 1,
              "bootstrap": bootstrap}
    monkeypatch.setattr(command, "run", lambda args: result)
    argv = ["--data", str(files / "bin"), "--path", str(files / "ckpt.pt"), "--src", "en", "--tgt", "de",
            "--ref", str(files / "ref"), "--out-dir", str(files / "out")]
    command.main(argv)
    line = capsys.readouterr().out.splitlines()[-1]
    assert "+0.00 tokenized BLEU" in line and "p not meaningful" in line and "p=" not in line, line
    bootstrap.update(p_value_meaningful=True, delta=1.5, system=1.5)
    command.main(argv)
    assert "+1.50 tokenized BLEU, paired bootstrap p=0.0010" in capsys.readouterr().out


def test_help_lists_every_papers_defaults(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.evaluate(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.startswith("usage: fairseq-ctx-evaluate")
    for paper, s in defaults.PAPER_DEFAULTS.items():
        row = next(line.split() for line in out.splitlines() if line.split()[:1] == [paper])
        assert [str(s.beam), str(s.lenpen)] == row[1 + (paper == defaults.DEFAULT_PAPER):][:2], (paper, row)
        assert f"{s.max_len_a} / {s.max_len_b}" in " ".join(row) and row[-1] == s.compound_split
        assert (f"average of the last {s.average_last}" if s.average_last else s.checkpoint) in " ".join(row)


def test_one_evaluation_command():
    """fairseq-ctx-bleu and its module are gone; fairseq-ctx-evaluate is the one command."""
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as handle:
        entries = dict(re.findall(r'"(fairseq-ctx-[\w-]+) = ([\w.:]+)"', handle.read()))
    assert entries["fairseq-ctx-evaluate"] == "fairseq_ctx.cli:evaluate"
    assert not [name for name in entries if "bleu" in name] and not hasattr(cli, "bleu")
    assert not any(target.startswith("fairseq_ctx.evaluate") for target in entries.values())
    for gone in ("fairseq_ctx/evaluate.py", "fairseq_ctx/analysis/evaluation.py", "scripts/eval"):
        assert not os.path.exists(os.path.join(ROOT, gone)), gone


# -- end to end ---------------------------------------------------------------------------------------


def test_stock_transformer_cli_roundtrip_then_evaluate_every_sentence(cli_roundtrip, tiny_corpus, tmp_path, capsys):
    """Foundation check: train -> resume -> generate -> interactive on real data, then score."""
    arch = ["--arch", "transformer", "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
            "--encoder-layers", "1", "--encoder-attention-heads", "2", "--decoder-embed-dim", "16",
            "--decoder-ffn-embed-dim", "32", "--decoder-layers", "1", "--decoder-attention-heads", "2"]
    result = cli_roundtrip(arch)
    assert len(result["hypotheses"]) == TINY_TEST_SENTENCES
    out = tmp_path / "eval"
    # no --paper: the demo's settings, its checkpoint (checkpoint_last.pt) of --save-dir
    cli.evaluate(["--data", str(tiny_corpus / "bin"), "--save-dir", str(tmp_path / "checkpoints"), "--src", "zh",
                  "--tgt", "en", "--ref", str(tiny_corpus / "raw" / "test.en"), "--beam", "2", "--out-dir", str(out),
                  "--", "--max-len-b", "10", "--unkpen", "0.5"])
    printed = capsys.readouterr().out
    scored = json.loads((out / "result.json").read_text())
    assert scored["sentences"] == TINY_TEST_SENTENCES and 0.0 <= scored["sacrebleu"]["bleu"] <= 100.0
    assert scored["checkpoint"].endswith("checkpoint_last.pt") and scored["paper"] == "demo"
    assert scored["generation"]["beam"] == 2 and scored["tokenized"]["bleu"] >= 0.0
    assert scored["generation"]["max_len_b"] == 10 and scored["generation"]["extra_generate_args"] == ["--unkpen", "0.5"]
    assert scored["generation"]["batch_size"] == 128
    assert scored["sacrebleu"]["signature"].startswith("nrefs:1|")
    assert f"({scored['sacrebleu']['signature']})" in printed and f"{TINY_TEST_SENTENCES} sentences" in printed
    with open(out / "hyp.detok.en", encoding="utf-8") as handle:
        assert len(handle.read().splitlines()) == TINY_TEST_SENTENCES
    # the reverse direction: refused in one line from the real checkpoint, nothing generated
    line = _fails(capsys, ["--data", str(tiny_corpus / "bin"), "--save-dir", str(tmp_path / "checkpoints"), "--src",
                           "en", "--tgt", "zh", "--ref", str(tiny_corpus / "raw" / "test.zh"), "--out-dir",
                           str(tmp_path / "reverse")])
    assert "was trained zh -> en (inferred by fairseq from its training data" in line, line
    assert not (tmp_path / "reverse").exists()


def test_too_few_checkpoints_to_average_is_one_message(files):
    for n in (1, 2):
        (files / "ckpts" / f"checkpoint_1_{n}00.pt").write_text("x")
    args = _parse(files, "--paper", "yang2019")  # averages the last 5
    with pytest.raises(SystemExit) as exit_info:
        command.run(args)
    message = str(exit_info.value.code)
    assert "wanted the last 5" in message and "found 2" in message and "--average-last" in message, message


def test_average_checkpoints_command_with_too_few_is_one_message(files, capsys):
    from fairseq_ctx.evaluation import average

    (files / "ckpts" / "checkpoint_1_100.pt").write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        average.main(["--save-dir", str(files / "ckpts"), "--last", "3", "--output", str(files / "avg.pt")])
    assert exit_info.value.code == 2 and "found 1" in capsys.readouterr().err
    # the ones it counted, by update (checkpoint_best / _last listed beside them read as counted)
    for name in ("checkpoint_1_1200.pt", "checkpoint_best.pt"):
        (files / "ckpts" / name).write_text("x")
    with pytest.raises(SystemExit):
        average.main(["--save-dir", str(files / "ckpts"), "--last", "3", "--output", str(files / "avg.pt")])
    assert "found 2 (checkpoint_1_100.pt, checkpoint_1_1200.pt)\n" in capsys.readouterr().err
    assert not (files / "avg.pt").exists()
    for last in ("0", "-2"):  # averaged nothing (a traceback) / all but the oldest two
        with pytest.raises(SystemExit) as exit_info:
            average.main(["--save-dir", str(files / "ckpts"), "--last", last, "--output", str(files / "avg.pt")])
        assert exit_info.value.code == 2 and f"--last {last}: average at least one" in capsys.readouterr().err
    for where in ("ckpts/checkpoint_1_100.pt", "nowhere"):  # a file, or nothing there: one line (a traceback)
        with pytest.raises(SystemExit) as exit_info:
            average.main(["--save-dir", str(files / where), "--last", "1", "--output", str(files / "avg.pt")])
        assert exit_info.value.code == 2 and "no such directory" in capsys.readouterr().err, where
        assert not (files / "avg.pt").exists()


def test_average_checkpoints_never_replaces_a_training_checkpoint_or_an_existing_file(files, capsys):
    """--output ckpts/checkpoint_best.pt replaced the training's best checkpoint, and an average
    written as checkpoint_last.pt was resumed by fairseq-train from update 0, without a word."""
    import torch

    from fairseq_ctx.evaluation import average

    for n in (1, 2):
        torch.save({"model": {"w": torch.full((2,), float(n))}}, files / "ckpts" / f"checkpoint_1_{n}00.pt")
    before = {p.name: p.read_bytes() for p in (files / "ckpts").iterdir()}
    for name in ("checkpoint_best.pt", "checkpoint_last.pt", "checkpoint3.pt", "checkpoint_1_200.pt",
                 "checkpoint_last-shard0.pt", "checkpoint.best_loss_4.20.pt"):
        with pytest.raises(SystemExit) as exit_info:
            average.main(["--save-dir", str(files / "ckpts"), "--last", "2", "--output", str(files / "ckpts" / name)])
        assert exit_info.value.code == 2 and "named as fairseq names" in capsys.readouterr().err, name
    assert {p.name: p.read_bytes() for p in (files / "ckpts").iterdir()} == before

    out = files / "average_last2.pt"
    average.main(["--save-dir", str(files / "ckpts"), "--last", "2", "--output", str(out)])
    assert torch.load(out, weights_only=True)["model"]["w"].tolist() == [1.5, 1.5]
    out.write_bytes(b"mine")
    with pytest.raises(SystemExit) as exit_info:
        average.main(["--save-dir", str(files / "ckpts"), "--last", "2", "--output", str(out)])
    assert exit_info.value.code == 2 and "--overwrite" in capsys.readouterr().err and out.read_bytes() == b"mine"
    average.main(["--save-dir", str(files / "ckpts"), "--last", "2", "--output", str(out), "--overwrite"])
    assert torch.load(out, weights_only=True)["model"]["w"].tolist() == [1.5, 1.5]


def test_a_reference_of_another_length_than_the_subset_is_refused_before_generating(tiny_corpus, tmp_path, capsys):
    """It was found only after fairseq-generate had translated the whole subset (a traceback):
    a big model's beam search over newstest2014 lost. The reference of another subset with
    another sentence count (--subset valid with raw/test.en) is caught the same way."""
    from tests.conftest import TINY_TEST_SENTENCES

    test_ref = (tiny_corpus / "raw" / "test.en").read_text().splitlines()
    assert len(test_ref) == TINY_TEST_SENTENCES
    short = tmp_path / "short.en"
    short.write_text("".join(line + "\n" for line in test_ref[:-1]))
    checkpoint = tmp_path / "checkpoint.pt"
    checkpoint.write_text("never loaded")

    def parse(*options):
        return command.parse(["--data", str(tiny_corpus / "bin"), "--path", str(checkpoint), "--src", "zh",
                              "--tgt", "en", "--out-dir", str(tmp_path / "out"), *options])

    for ref, subset in ((short, "test"), (tiny_corpus / "raw" / "test.en", "valid")):
        with pytest.raises(SystemExit) as exit_info:
            parse("--ref", str(ref), "--subset", subset)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"but the subset '{subset}' of" in err, err
    assert parse("--ref", str(tiny_corpus / "raw" / "test.en")).subset == "test"
    assert not (tmp_path / "out").exists()
    # the test reference where valid is translated, both of one count: scored silently before
    valid_count = len((tiny_corpus / "raw" / "valid.en").read_text().splitlines())
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "test.en").write_text("".join(f"line {i}\n" for i in range(valid_count)))
    capsys.readouterr()
    assert parse("--ref", str(tmp_path / "raw" / "test.en"), "--subset", "valid").subset == "valid"
    assert "named as the 'test' subset's reference, but --subset 'valid'" in capsys.readouterr().err
    assert parse("--ref", str(tiny_corpus / "raw" / "valid.en"), "--subset", "valid").subset == "valid"
    assert "warning" not in capsys.readouterr().err


def test_a_huffman_subsets_count_is_read_from_its_header(tmp_path):
    """fairseq-generate loads huffman data too (--dataset-impl unset): its count was skipped."""
    from fairseq.data.huffman.huffman_mmap_indexed_dataset import HuffmanMMapIndex

    prefix = str(tmp_path / "test.zh-en.zh")
    with HuffmanMMapIndex.writer(prefix + ".idx", 123) as writer:
        writer.write([3, 1, 4, 1, 5], [0, 3, 4, 8, 9])
    open(prefix + ".bin", "wb").close()
    assert len(HuffmanMMapIndex(prefix + ".idx")) == 5
    assert command.subset_size(str(tmp_path), "test", "zh", "en") == 5


@pytest.mark.parametrize("impl", ["mmap", "cached", "raw"])
def test_the_subsets_sentence_count_is_fairseqs_without_importing_fairseq(tmp_path, impl):
    """The count read from the index header equals the length fairseq's loader gives, for each
    format fairseq-generate infers; the evaluation's own process no longer imports fairseq for it
    (~5.6 s of CPU in every one of a table's evaluations: fairseq-generate imports it anyway)."""
    import subprocess
    import sys

    import torch
    from fairseq.data import data_utils, indexed_dataset

    prefix = str(tmp_path / "test.zh-en.zh")
    sentences = [[4, 5, 6, 2], [7, 2], [8, 9, 2]] * 3 + [[2]]
    if impl == "raw":
        with open(prefix, "w", encoding="utf-8") as handle:
            handle.write("".join(" ".join("x" * len(s)) + "\n" for s in sentences))
    else:
        builder = indexed_dataset.make_builder(prefix + ".bin", impl=impl, vocab_size=100)
        for sentence in sentences:
            builder.add_item(torch.tensor(sentence))
        builder.finalize(prefix + ".idx")
    if impl != "raw":  # (the raw format needs a dictionary to load; its count is its lines)
        assert len(data_utils.load_indexed_dataset(prefix)) == len(sentences)
    assert command.subset_size(str(tmp_path), "test", "zh", "en") == len(sentences)
    assert command.subset_size(str(tmp_path), "test", "en", "zh") is None  # no test.*.en
    assert command.subset_size(str(tmp_path), "valid", "zh", "en") is None
    probe = (f"import sys; from fairseq_ctx.evaluation import command; "
             f"assert command.subset_size({str(tmp_path)!r}, 'test', 'zh', 'en') == {len(sentences)}; "
             "assert 'fairseq' not in sys.modules, 'fairseq imported'")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=dict(os.environ, FAIRSEQ_CTX_NO_MODELS="1"), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


class _Meters(list):
    """A list subclass, as a pickle may hold one (its items come through APPENDS)."""


def _checkpoint(path, task, args=None, legacy=False):
    """A checkpoint as fairseq saves one (zip format, or torch's format before 1.6 with ``legacy``):
    cfg as plain containers, tensors, and objects of other classes (a fairseq meter, a
    defaultdict, a deque, a list subclass) in extra_state."""
    import collections

    import torch
    from fairseq.logging.meters import AverageMeter

    state = {"args": args, "cfg": None if task is None else {"task": task, "model": {"_name": "transformer"}},
             "model": {"encoder.w": torch.zeros(3)}, "optimizer_history": [{"num_updates": 7}],
             "extra_state": {"metrics": {"train": AverageMeter()}, "counts": collections.defaultdict(int, a=1),
                             "recent": collections.deque([1, 2]), "meters": _Meters([AverageMeter()])}}
    torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    return str(path)


def test_the_trained_direction_is_read_from_the_checkpoint_without_torch_or_fairseq(tmp_path, monkeypatch):
    """The cfg's languages where named; else those fairseq inferred from the training data (where
    that directory is here); else the evaluation data's, marked as a guess; nothing imported."""
    import argparse
    import subprocess
    import sys

    from fairseq_ctx.evaluation.direction import trained_direction

    train_data, eval_data = tmp_path / "train-bin", tmp_path / "eval-bin"
    for folder, pair in ((train_data, "de-en"), (eval_data, "en-fr")):
        folder.mkdir()
        (folder / f"train.{pair}.{pair[:2]}.idx").write_text("")
    named = _checkpoint(tmp_path / "named.pt", {"source_lang": "en", "target_lang": "de", "data": str(train_data)})
    assert trained_direction(named)[:2] == ("en", "de") and not trained_direction(named).guessed
    inferred = _checkpoint(tmp_path / "inferred.pt", {"source_lang": None, "target_lang": None,
                                                     "data": f"{train_data}:{tmp_path / 'more'}"})
    assert trained_direction(inferred, str(eval_data))[:2] == ("de", "en")
    assert "inferred by fairseq from its training data" in trained_direction(inferred).whence
    elsewhere = _checkpoint(tmp_path / "elsewhere.pt", {"source_lang": None, "target_lang": None,
                                                       "data": "/cluster/data/bin"})
    guess = trained_direction(elsewhere, str(eval_data))
    assert guess[:2] == ("en", "fr") and guess.guessed and trained_direction(elsewhere) is None
    legacy = _checkpoint(tmp_path / "legacy.pt", None, args=argparse.Namespace(source_lang="fr", target_lang="en"))
    assert trained_direction(legacy)[:2] == ("fr", "en")
    old_format = _checkpoint(tmp_path / "old.pt", None, args=argparse.Namespace(source_lang="fr", target_lang="en"),
                             legacy=True)
    assert trained_direction(old_format)[:2] == ("fr", "en")  # fairseq's 2018-19 hub models
    namespace_task = _checkpoint(tmp_path / "ns.pt", argparse.Namespace(source_lang="fr", target_lang="de"))
    assert trained_direction(namespace_task)[:2] == ("fr", "de")
    # a relative path is stored as typed, relative to the training's working directory: known only
    # where it is the evaluation's --data itself, never another directory of that name here
    relative = _checkpoint(tmp_path / "relative.pt", {"source_lang": None, "target_lang": None,
                                                     "data": "eval-bin"})
    monkeypatch.chdir(tmp_path)
    assert trained_direction(relative, "eval-bin") == ("en", "fr", "inferred by fairseq from its training data "
                                                       "eval-bin", False)
    assert trained_direction(relative, str(eval_data)).guessed is False  # spelled otherwise, the same directory
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "eval-bin").mkdir()
    (tmp_path / "other" / "eval-bin" / "train.fr-en.fr.idx").write_text("")
    monkeypatch.chdir(tmp_path / "other")  # an unrelated eval-bin here: not taken for the training's
    assert trained_direction(relative, str(eval_data)) == ("en", "fr", f"as fairseq infers them from {eval_data}; "
                                                           "its training data eval-bin is not here (or is a "
                                                           "relative path, stored as typed)", True)
    moved = _checkpoint(tmp_path / "moved.pt", {"source_lang": None, "target_lang": None,
                                               "data": f"/cluster/{tmp_path.name}/eval-bin"})
    assert trained_direction(moved, str(eval_data)).guessed  # the same last names prove nothing
    assert trained_direction(elsewhere, f"{eval_data}:{train_data}")[:2] == ("en", "fr")  # sharded --data
    weird = _checkpoint(tmp_path / "weird.pt", {"source_lang": ["x"], "target_lang": None, "data": [[["deep"]]]})
    assert trained_direction(weird, str(eval_data)).guessed  # values of other types: not read
    monkeypatch.chdir(tmp_path)
    (train_data / "train.en-de.en.idx").write_text("")  # a second pair where it trained: not known which
    ambiguous = trained_direction(inferred, str(eval_data))
    assert ambiguous.guessed and ambiguous.whence.endswith(f"its training data {train_data} does not name one pair")
    (tmp_path / "text.pt").write_text("not a checkpoint")
    assert trained_direction(str(tmp_path / "text.pt"), str(eval_data)) is None
    probe = ("import sys; from fairseq_ctx.evaluation.direction import trained_direction; "
             f"assert trained_direction({named!r})[:2] == ('en', 'de'); "
             "assert not {'torch', 'fairseq', 'numpy'} & set(sys.modules), 'imported'")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=dict(os.environ, FAIRSEQ_CTX_NO_MODELS="1"), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_reverse_of_the_trained_direction_is_refused_before_generating(files, capsys):
    """With a joined dictionary, a zh -> en checkpoint evaluated with --src en --tgt zh translated
    without a word and scored like a bad model; another pair, or a direction only guessed from the
    evaluation's data, is said and evaluated."""
    checkpoint = _checkpoint(files / "ckpt.pt", {"source_lang": "de", "target_lang": "en", "data": "/elsewhere"})
    base = ["--data", str(files / "bin"), "--path", checkpoint, "--ref", str(files / "ref"), "--out-dir",
            str(files / "out")]
    line = _fails(capsys, [*base, "--src", "en", "--tgt", "de"])
    assert "ckpt.pt was trained de -> en (named in its training options); pass --src de --tgt en" in line, line
    command.parse([*base, "--src", "de", "--tgt", "en"])
    assert capsys.readouterr().err == ""
    command.parse([*base, "--src", "fr", "--tgt", "en"])
    assert "warning: --src fr --tgt en, but" in capsys.readouterr().err
    _checkpoint(files / "ckpt.pt", {"source_lang": None, "target_lang": None, "data": "/elsewhere"})
    (files / "bin" / "test.de-en.de.idx").write_text("")
    command.parse([*base, "--src", "en", "--tgt", "de"])  # a guess: said, not refused
    assert "was trained de -> en (as fairseq infers them from" in capsys.readouterr().err
    # --save-dir: the paper's checkpoint file there, else any
    _checkpoint(files / "ckpts" / "checkpoint_3_100.pt", {"source_lang": "de", "target_lang": "en", "data": ""})
    line = _fails(capsys, ["--data", str(files / "bin"), "--save-dir", str(files / "ckpts"), "--ref",
                           str(files / "ref"), "--out-dir", str(files / "out"), "--src", "en", "--tgt", "de"])
    assert "checkpoint_3_100.pt was trained de -> en" in line, line


def test_the_direction_our_training_recorded_is_read_where_its_data_is_not_here(files, capsys, monkeypatch):
    """fairseq-ctx-train and the tables name no languages (fairseq infers them), so the checkpoint's
    cfg holds none: evaluated where its training data is not, the reverse was only a warning. The
    records our drivers keep beside it (fairseq-ctx-train's starts record in its --save-dir, the
    runner's train.json in the cell) give the direction, for a training on the stored data only."""
    from fairseq_ctx.evaluation.direction import trained_direction
    from fairseq_ctx.reproduce import train

    (files / "bin" / "test.en-de.en.idx").write_text("")  # the evaluation's data: a guess would say en -> de
    cell = files / "cell"
    (cell / "checkpoints").mkdir(parents=True)
    checkpoint = _checkpoint(cell / "checkpoints" / "checkpoint_best.pt",
                             {"source_lang": None, "target_lang": None, "data": "/cluster/data/bin"})
    assert trained_direction(checkpoint, str(files / "bin")).guessed
    cmd = ["python", "-m", "fairseq_cli.train", "/cluster/data/bin", "--arch", "transformer"]
    start = {"event": "start", "command": cmd, **train.training_direction(cmd)}
    assert start["data"] == "/cluster/data/bin" and start["languages"] is None  # (no such directory here)
    record = cell / "checkpoints" / train.STARTS_RECORD
    train.record_start(str(cell / "checkpoints"), {**start, "languages": ["de", "en"]})
    train.record_start(str(cell / "checkpoints"), {"event": "end", "exit_code": 0})
    assert trained_direction(checkpoint, str(files / "bin")) == (
        "de", "en", "recorded in train_starts.jsonl when it was trained on /cluster/data/bin", False)
    base = ["--data", str(files / "bin"), "--path", checkpoint, "--ref", str(files / "ref"), "--out-dir",
            str(files / "out")]
    line = _fails(capsys, [*base, "--src", "en", "--tgt", "de"])
    assert "was trained de -> en (recorded in train_starts.jsonl when it was trained on /cluster" in line, line
    # another training's record (other data), lines that are no record, a start that names no (or an
    # empty) language: not read
    record.write_text("not json\n[]\n1\n" + json.dumps({"data": "/cluster/other/bin", "languages": ["en", "de"]})
                      + "\n" + json.dumps(start) + "\n" + json.dumps(start | {"languages": ["", "de"]}) + "\n"
                      + record.read_text())
    assert trained_direction(checkpoint, str(files / "bin"))[:2] == ("de", "en")
    # starts on the same data that disagree (its files changed between starts): none taken
    train.record_start(str(cell / "checkpoints"), {**start, "languages": ["en", "de"]})
    assert trained_direction(checkpoint, str(files / "bin")).guessed
    record.unlink()
    # the tables' cell: train.json above the checkpoints (the runner's: with its training key)
    cell_record = {"training_key": "k", "data": "/cluster/data/bin", "languages": ["de", "en"]}
    (cell / "train.json").write_text(json.dumps(cell_record))
    assert trained_direction(checkpoint, str(files / "bin")) == (
        "de", "en", "recorded in train.json when it was trained on /cluster/data/bin", False)
    # through a link to the checkpoint file: beside the file it points to
    (files / "links").mkdir()
    (files / "links" / "model.pt").symlink_to(checkpoint)
    assert trained_direction(str(files / "links" / "model.pt"), str(files / "bin"))[:2] == ("de", "en")
    (files / "links" / train.STARTS_RECORD).write_text(json.dumps(start | {"languages": ["en", "fr"]}))
    assert trained_direction(str(files / "links" / "model.pt"), str(files / "bin")).guessed  # and beside the link
    (files / "links" / train.STARTS_RECORD).unlink()
    for other in ({**cell_record, "data": "/cluster/data/bin-2"},  # another training's
                  {"data": "/cluster/data/bin", "languages": ["de", "en"]},  # not the runner's (a data set?)
                  {**cell_record, "padding": "x" * (1 << 20)}):  # too big to be the runner's: not read
        (cell / "train.json").write_text(json.dumps(other))
        assert trained_direction(checkpoint, str(files / "bin")).guessed
    (cell / "train.json").write_text("[" * 100000)  # nested too deep for json: skipped, no traceback
    record.write_text("[" * 100000 + "\n" + json.dumps(start | {"languages": ["de", "en"]}) + "\n")
    assert trained_direction(checkpoint, str(files / "bin"))[:2] == ("de", "en")
    # languages the checkpoint's options name come first
    named = _checkpoint(cell / "checkpoints" / "checkpoint_last.pt",
                        {"source_lang": "en", "target_lang": "de", "data": "/cluster/data/bin"})
    assert trained_direction(named, str(files / "bin")) == ("en", "de", "named in its training options", False)
    # the data argument is kept as fairseq stores it: a relative one as typed
    monkeypatch.chdir(files)
    relative = train.training_direction(["python", "-m", "fairseq_cli.train", "bin", "--arch", "transformer"])
    assert relative == {"data": "bin", "languages": ["en", "de"]}
    # the languages as fairseq-train's parser takes them: the last of either spelling, '-sde' as '-s de'
    for named_now in (["--source-lang", "en", "-s", "de", "-t", "en"], ["-sde", "-ten"], ["-s", "de", "--target-lang=en"]):
        assert train.trained_pair(["python", "-m", "fairseq_cli.train", "bin", *named_now]) == ("de", "en")


def test_an_average_kept_apart_from_its_checkpoints_is_read_in_the_direction_they_were_trained(files, capsys):
    """The evaluation keeps its average of the last N in its --out-dir, away from the records beside
    the checkpoints (fairseq-ctx-train's starts record, the cell's train.json): evaluated again there
    or copied alone, the reverse direction was only a warning. The average records the direction
    in itself; a direction the checkpoint's options name, or one not known, is not recorded."""
    import torch

    from fairseq_ctx.evaluation import average
    from fairseq_ctx.evaluation.direction import AVERAGE_RECORD, trained_direction
    from fairseq_ctx.reproduce import train

    (files / "bin" / "test.en-de.en.idx").write_text("")  # the evaluation's data: a guess would say en -> de
    unnamed = {"source_lang": None, "target_lang": None, "data": "/cluster/data/bin"}
    for n in (1, 2):
        _checkpoint(files / "ckpts" / f"checkpoint_1_{n}00.pt", unnamed)
    train.record_start(str(files / "ckpts"), {"event": "start", "data": "/cluster/data/bin", "languages": ["de", "en"]})
    kept = files / "out" / "average_last2.pt"
    kept.parent.mkdir()
    average.main(["--save-dir", str(files / "ckpts"), "--last", "2", "--output", str(kept)])
    whence = "recorded in this average of checkpoints: recorded in train_starts.jsonl when it was trained on /cluster/data/bin"
    assert trained_direction(str(kept), str(files / "bin")) == ("de", "en", whence, False)
    line = _fails(capsys, ["--data", str(files / "bin"), "--path", str(kept), "--ref", str(files / "ref"),
                           "--out-dir", str(files / "out"), "--src", "en", "--tgt", "de"])
    assert f"was trained de -> en ({whence})" in line, line
    # an average of the average keeps it (its checkpoints' records are not beside it either), as it was read
    (files / "out" / "checkpoint_1_300.pt").write_bytes(kept.read_bytes())
    again = files / "again.pt"
    average.main(["--save-dir", str(files / "out"), "--last", "1", "--output", str(again)])
    assert trained_direction(str(again), str(files / "bin")) == ("de", "en", whence, False)
    # an average someone put in the --save-dir is not what the evaluation of that directory reads
    # (its paper's checkpoint there, else the first of the training's checkpoints)
    foreign = files / "foreign"
    foreign.mkdir()
    for n in (1, 2):
        _checkpoint(foreign / f"checkpoint_1_{n}00.pt", {**unnamed, "data": "/cluster/en-de/bin"})
    train.record_start(str(foreign), {"event": "start", "data": "/cluster/en-de/bin", "languages": ["en", "de"]})
    (foreign / "average_last2.pt").write_bytes(kept.read_bytes())
    assert trained_direction(str(foreign / "average_last2.pt"))[:2] == ("de", "en")
    args = command.parse(["--data", str(files / "bin"), "--save-dir", str(foreign), "--average-last", "2", "--ref",
                          str(files / "ref"), "--out-dir", str(files / "out-2"), "--src", "en", "--tgt", "de"])
    assert args.save_dir == str(foreign)
    # checkpoints of two trainings in different directions averaged: warned of, nothing recorded
    _checkpoint(foreign / "checkpoint_1_300.pt", unnamed)  # trained de -> en (the record of /cluster/data/bin)
    train.record_start(str(foreign), {"event": "start", "data": "/cluster/data/bin", "languages": ["de", "en"]})
    capsys.readouterr()
    average.main(["--save-dir", str(foreign), "--last", "3", "--output", str(again), "--overwrite"])
    assert "trained in different directions (checkpoint_1_200.pt en -> de, checkpoint_1_300.pt de -> en)" in \
        capsys.readouterr().err
    assert AVERAGE_RECORD not in torch.load(again, weights_only=False)
    average.main(["--save-dir", str(foreign), "--last", "2", "--output", str(again), "--overwrite"])  # (1_100 out)
    assert "different directions" in capsys.readouterr().err
    # the evaluation of the last N of such a directory reads the newest of them (not the first there)
    evaluate = ["--data", str(files / "bin"), "--save-dir", str(foreign), "--ref", str(files / "ref"), "--out-dir",
                str(files / "out-2")]
    assert command.parse([*evaluate, "--average-last", "1", "--src", "de", "--tgt", "en"]).average_last == 1
    assert "was trained de -> en" in _fails(capsys, [*evaluate, "--average-last", "1", "--src", "en", "--tgt", "de"])
    assert "was trained en -> de" in _fails(capsys, [*evaluate, "--average-last", "0", "--src", "de", "--tgt", "en"])
    # a checkpoint file given as --save-dir: one line (it was a traceback when its average was made)
    evaluate[evaluate.index("--save-dir") + 1] = str(foreign / "checkpoint_1_100.pt")
    assert "not a directory" in _fails(capsys, [*evaluate, "--average-last", "2", "--src", "en", "--tgt", "de"])
    os.remove(foreign / "checkpoint_1_300.pt")
    average.main(["--save-dir", str(foreign), "--last", "2", "--output", str(again), "--overwrite"])
    assert "different directions" not in capsys.readouterr().err
    assert torch.load(again, weights_only=False)[AVERAGE_RECORD]["languages"] == ["en", "de"]
    # a record of another training's data (the average's own cfg says which): not read
    state = torch.load(kept, weights_only=False)
    state[AVERAGE_RECORD]["data"] = "/cluster/other/bin"
    torch.save(state, kept)
    assert trained_direction(str(kept), str(files / "bin")).guessed
    (files / "out" / "checkpoint_1_300.pt").write_bytes(kept.read_bytes())  # and not kept by its average
    average.main(["--save-dir", str(files / "out"), "--last", "1", "--output", str(again), "--overwrite"])
    assert AVERAGE_RECORD not in torch.load(again, weights_only=False)
    # nothing recorded where the checkpoints' direction is not known here, or their options name it
    (files / "ckpts" / train.STARTS_RECORD).unlink()
    average.main(["--save-dir", str(files / "ckpts"), "--last", "2", "--output", str(kept), "--overwrite"])
    assert AVERAGE_RECORD not in torch.load(kept, weights_only=False)
    for n in (1, 2):
        _checkpoint(files / "ckpts" / f"checkpoint_1_{n}00.pt", {**unnamed, "source_lang": "en", "target_lang": "de"})
    average.main(["--save-dir", str(files / "ckpts"), "--last", "2", "--output", str(kept), "--overwrite"])
    assert AVERAGE_RECORD not in torch.load(kept, weights_only=False)
    assert trained_direction(str(kept), str(files / "bin"))[:3] == ("en", "de", "named in its training options")
