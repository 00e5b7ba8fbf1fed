"""The commands the README walkthrough and the experiment guide show exist, and every
option they pass is one the command accepts (its --help names it): docs that drift from
the code fail here, not in a user's first hour."""
import os
import re
import shlex

import pytest

from fairseq_ctx import cli, paths

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", os.path.join("docs", "experiments.md")]
FENCE = re.compile(r"```bash\n(.*?)```", re.S)


def _setup_console_scripts():
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as handle:
        text = handle.read()
    return dict(re.findall(r'"(fairseq-ctx-[\w-]+) = fairseq_ctx\.cli:(\w+)"', text))


def documented_commands():
    """(doc, command line words) of every fairseq-ctx-* command in a bash block."""
    found = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as handle:
            text = handle.read()
        for block in FENCE.findall(text):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #", 1)[0].strip()
                if line.startswith("fairseq-ctx-"):
                    words = shlex.split(line.replace("[", " ").replace("]", " ").replace("...", " "))
                    found.append((doc, words))
    return found


def _help_text(command, words, capsys):
    function = getattr(cli, _setup_console_scripts()[command])
    if command == "fairseq-ctx-prepare-data":
        # the shipped script's own usage header (prepare_data execs bash: not in-process)
        script = cli.DATA_SCRIPTS[words[1]][0]
        texts = [open(script, encoding="utf-8").read()]
        if words[1].startswith("wmt"):
            texts.append(open(os.path.join(paths.DATA_SCRIPTS, "prepare-wmt.sh"), encoding="utf-8").read())
        return "\n".join(texts)
    head = [words[1]] if command == "fairseq-ctx-reproduce" else []
    with pytest.raises(SystemExit) as exit_info:
        function([*head, "--help"])
    assert exit_info.value.code in (0, None)
    return capsys.readouterr().out


CASES = documented_commands()


def test_the_docs_show_commands():
    commands = {words[0] for _, words in CASES}
    assert {"fairseq-ctx-prepare-data", "fairseq-ctx-train", "fairseq-ctx-evaluate",
            "fairseq-ctx-reproduce"} <= commands


@pytest.mark.parametrize("doc,words", CASES, ids=[" ".join(w[:3]) for _, w in CASES])
def test_documented_command_accepts_its_options(doc, words, capsys):
    command = words[0]
    assert command in _setup_console_scripts(), f"{doc}: {command} is not a console script"
    if words[1:2] == ["--help"]:
        return
    if command == "fairseq-ctx-prepare-data":
        assert words[1] in cli.DATA_SCRIPTS, f"{doc}: unknown corpus {words[1]}"
    help_text = _help_text(command, words, capsys)
    options = [w.split("=", 1)[0] for w in words[1:] if w.startswith("--")]
    unknown = [o for o in options if not re.search(re.escape(o) + r"(?![\w-])", help_text)]
    assert not unknown, f"{doc}: `{' '.join(words)}`: {unknown} not in {command}'s --help"
