"""Where the package's own files are, in a checkout and in an installed copy alike.

The training configs (``configs/<paper>/*.args``) and the data-preparation shell scripts
(``scripts/prepare-tatoeba.sh``, ``scripts/data/*.sh``) are package data: they are found
next to this module, never through a checkout root, so a wheel install works from any
directory. They are plain files on disk (bash and fairseq need real paths), which is what
setuptools installs: zip imports are not supported.
"""
import os
import site
import sys

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))  # also fairseq's --user-dir
# the directory holding the package: child processes run from it (or get it on PYTHONPATH)
# so that ``python -m fairseq_ctx...`` imports this very copy
IMPORT_ROOT = os.path.dirname(PACKAGE_DIR)
CONFIGS = os.path.join(PACKAGE_DIR, "configs")
SHELL_SCRIPTS = os.path.join(PACKAGE_DIR, "scripts")
DATA_SCRIPTS = os.path.join(SHELL_SCRIPTS, "data")
TATOEBA_SCRIPT = os.path.join(SHELL_SCRIPTS, "prepare-tatoeba.sh")

# A source checkout (the package imported from it, or installed from it in development
# mode) keeps its work/ directory and git provenance at its root; an installed copy
# (site-packages) has neither, and uses the current directory for work/.
CHECKOUT = IMPORT_ROOT if os.path.isfile(os.path.join(IMPORT_ROOT, "setup.py")) else None


def _cwd():
    try:
        return os.getcwd()
    except OSError:  # a deleted working directory must not break importing the package
        return os.curdir


WORK_ROOT = CHECKOUT or _cwd()
# prepared data and results, read and written by every command; FAIRSEQ_CTX_WORK moves it
WORK_DIR = os.path.abspath(os.environ.get("FAIRSEQ_CTX_WORK") or os.path.join(WORK_ROOT, "work"))


def config_path(name):
    """A config given as a path, or by its name among the shipped configs: ``yang2019/both.args``,
    ``yang2019/both`` or ``configs/yang2019/both.args`` (the checkout path of older command lines)."""
    if os.path.exists(name) or os.path.isabs(name):
        return name
    rel = os.path.normpath(name)
    if rel.startswith("configs" + os.sep):
        rel = rel[len("configs" + os.sep):]
    for candidate in (rel, rel + ".args"):
        if os.path.isfile(os.path.join(CONFIGS, candidate)):
            return os.path.join(CONFIGS, candidate)
    return name  # not found: the caller reports the name as given


def _site_dirs():
    try:
        dirs = site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # an old virtualenv's site module
        dirs = []
    return {os.path.realpath(d) for d in dirs}


def python_env(env=None):
    """An environment whose ``python -m fairseq_ctx...`` / ``import fairseq_ctx`` gets this very copy."""
    env = dict(os.environ if env is None else env)
    # no working directory first on the children's sys.path (``python -m`` / ``-c`` put it there):
    # a fairseq_ctx where the user runs a command (a checkout beside an installed copy) would
    # be imported by the children instead of this copy
    env["PYTHONSAFEPATH"] = "1"
    # nor through an empty / "." PYTHONPATH entry (`export PYTHONPATH=$PYTHONPATH:/x` with none set)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p not in ("", os.curdir)]
    env["PYTHONPATH"] = os.pathsep.join(inherited)
    if not inherited:
        del env["PYTHONPATH"]
    # a checkout (or a --target directory) is put on PYTHONPATH; a site-packages directory is
    # not: the interpreter finds it anyway, and on PYTHONPATH it would come before the stdlib
    if os.path.realpath(IMPORT_ROOT) not in _site_dirs():
        env["PYTHONPATH"] = IMPORT_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def script_env(env=None):
    """The environment of a shipped shell script: its ``$PY -m fairseq_ctx...`` children are this
    interpreter importing this very copy, this environment's tools (fairseq-preprocess,
    subword-nmt) come first on PATH, and their default output root is WORK_DIR."""
    env = python_env(env)
    # always this interpreter: an inherited PY (the Makefile exports a relative .venv/bin/python)
    # may name another Python, or none from where the command runs
    env["PY"] = sys.executable
    # where the scripts put a corpus by default: where the reproduction looks for it
    env["FAIRSEQ_CTX_WORK"] = WORK_DIR
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env
