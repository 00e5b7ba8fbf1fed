"""scripts/setup-env.sh never fights a torch that is already there (issue 16, item 2).

Two levels, both offline and CPU-only:
- the decisions of scripts/setup_env_check.py (the helper the shell script calls);
- scripts/setup-env.sh itself, run against a throw-away venv (``python -m venv
  --without-pip``) whose ``pip`` is a stub that logs every call (its arguments and the
  PIP_CONSTRAINT file it saw) and fakes what it installs: a torch package reporting the
  requested version (``2.99.0+cu124`` with CUDA 12.4 and so on) and a fairseq whose
  "compiled extensions" refuse to import against a torch other than the one they were
  "built" against. Nothing is downloaded or compiled; a run takes about a second.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "setup-env.sh")
CPU = os.path.join(ROOT, "requirements", "constraints-cpu.txt")
GPU = os.path.join(ROOT, "requirements", "constraints-gpu.txt")

pytestmark = pytest.mark.timeout(120)


def _helper():
    spec = importlib.util.spec_from_file_location("setup_env_check", os.path.join(ROOT, "scripts", "setup_env_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _helper()


def _lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.readlines()


def torch_info(version, cuda=None, hip=None):
    return {"version": version, "cuda": cuda, "hip": hip}


# ------------------------------------------------------------ the helper's decisions

@pytest.mark.parametrize("constraints", [CPU, GPU])
@pytest.mark.parametrize("present", ["2.99.0+cu124", "2.13.0+cpu", "2.11.0", "2.5.1+rocm6.2"])
def test_present_torch_is_kept_and_pinned(constraints, present):
    """(a) + (c): whatever torch is there is kept, and the constraints every later pip call
    uses pin exactly it (never the file's torch==2.13.0)."""
    info = torch_info(present, cuda="12.4" if "cu" in present else None)
    assert check.plan_torch(info, _lines(constraints), {}) == ("keep", present)
    text = check.effective_constraints(_lines(constraints), info)
    assert check.torch_pins(text.splitlines()) == [f"torch=={present}"]
    # everything else is untouched
    others = [line.strip() for line in _lines(constraints) if not check.is_torch_line(line)]
    assert [line for line in text.splitlines() if not check.is_torch_line(line)][: len(others)] == others


def test_torch_install_constraints_have_no_torch_line():
    assert check.torch_pins(check.effective_constraints(_lines(CPU), None).splitlines()) == []


def test_torch_line_detection_is_about_torch_only():
    assert check.is_torch_line("torch==2.13.0\n")
    assert check.is_torch_line("Torch >= 2.0  # comment")
    assert check.is_torch_line("torch[opt-einsum]==2.5.1")
    assert check.is_torch_line("torch==2.5.1; python_version >= '3.10'")
    for other in ("torchaudio==2.5.1", "torch-geometric==2.6", "torch_geometric", "# torch==2.13.0",
                  "-c other.txt", "pytorch-lightning", ""):
        assert not check.is_torch_line(other), other


def test_plan_without_torch_asks_for_the_cpu_build_first():
    """A fresh venv (CI): the CPU build of the constraints' pin, the plain pin as fallback."""
    assert check.plan_torch(None, _lines(CPU), {}) == ("install", ["torch==2.13.0+cpu", "torch==2.13.0"])


def test_plan_explicit_requests():
    present = torch_info("2.99.0+cu124", "12.4")
    assert check.plan_torch(present, _lines(CPU), {"TORCH_SPEC": "torch==2.5.1"}) == ("install", ["torch==2.5.1"])
    assert check.plan_torch(present, _lines(CPU), {"TORCH_SPEC": " torch >= 2.5, < 2.6 "}) == ("install", ["torch>=2.5,<2.6"])
    assert check.plan_torch(present, _lines(CPU), {"FORCE_TORCH": "1"})[0] == "install"
    assert check.plan_torch(present, _lines(CPU), {"FORCE_TORCH": "0"}) == ("keep", "2.99.0+cu124")
    assert check.plan_torch(present, _lines(CPU), {"SKIP_TORCH": "1"}) == ("skip", "2.99.0+cu124")
    with pytest.raises(check.SetupError, match="SKIP_TORCH=1 but no torch"):
        check.plan_torch(None, _lines(CPU), {"SKIP_TORCH": "1"})
    with pytest.raises(check.SetupError, match="TORCH_SPEC"):
        check.plan_torch(None, _lines(GPU), {})  # the GPU pins name no torch: say which to get


def test_rebuild_decision():
    """(b): a record of torch X and a present torch Y -> rebuild; the same -> nothing."""
    x = torch_info("2.13.0+cpu")
    stamp = dict(check.build_record(x), fairseq="0.12.3.1")
    assert check.fairseq_plan(x, "0.12.3.1", stamp) is None
    for y in (torch_info("2.99.0+cu124", "12.4"), torch_info("2.13.0", "12.8"), torch_info("2.13.0+cpu", hip="6.2")):
        reason = check.fairseq_plan(y, "0.12.3.1", stamp)
        assert reason and "built against" in reason, y
    assert "built against cuda" in check.fairseq_plan(torch_info("2.13.0+cpu", "12.4"), "0.12.3.1", stamp)
    assert "not installed" in check.fairseq_plan(x, None, stamp)
    assert "no record" in check.fairseq_plan(x, "0.12.3.1", None)  # never assume
    assert check.fairseq_plan(x, "0.12.3.1", dict(stamp, python="3.10"))
    assert check.fairseq_plan(x, "0.12.3.1", dict(stamp, fairseq="0.12.2"))


def test_gpu_constraints_are_the_cpu_ones_without_torch():
    def pins(path):
        return [line.split("#", 1)[0].strip() for line in _lines(path) if line.split("#", 1)[0].strip()]
    assert [p for p in pins(CPU) if not check.is_torch_line(p)] == pins(GPU)
    assert check.torch_pins(_lines(GPU)) == []
    assert check.torch_pins(_lines(CPU)) == ["torch==2.13.0"]


# ------------------------------------------------------------ the shell script, with a stub pip

FAKE_PIP = r'''
import json, os, re, sys
SITE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def write(rel, text):
    path = os.path.join(SITE, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)

def present_torch():
    path = os.path.join(SITE, "torch", "version.py")
    if not os.path.exists(path):
        return None
    ns = {}
    exec(open(path).read(), ns)
    return ns["__version__"]

args = sys.argv[1:]
constraint = None
if os.environ.get("PIP_CONSTRAINT"):
    constraint = open(os.environ["PIP_CONSTRAINT"]).read()
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    log.write(json.dumps({"args": args, "constraint": constraint, "torch": present_torch()}) + "\n")
if not args or args[0] != "install":
    sys.exit(0)
for arg in args[1:]:
    match = re.fullmatch(r"torch==(\S+)", arg)
    if match:
        version = match.group(1)
        if version.endswith("+cpu") and os.environ.get("FAKE_INDEX_HAS_NO_CPU_TORCH"):
            print(f"ERROR: No matching distribution found for {arg}", file=sys.stderr)
            sys.exit(1)
        local = version.partition("+")[2]
        cuda = None if local in ("", "cpu") else "12.4"
        if not local:
            cuda = "12.8"  # PyPI's plain torch==X is a CUDA build
        write("torch/version.py", f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = None\n")
        write("torch/__init__.py", "from .version import __version__\nfrom . import version\n")
    if arg == "fairseq-fixed":
        built = present_torch()
        if os.environ.get("FAKE_BUILD_BROKEN"):
            built = "something else"
        ext = (f"import torch\nif torch.__version__ != {built!r}:\n"
               f"    raise ImportError('undefined symbol: _ZN3c10 (built against torch {built})')\n")
        write("fairseq/__init__.py", "__version__ = '0.12.3.1'\n")
        for name in ("libbleu", "libbase", "libnat"):
            write(f"fairseq/{name}.py", ext)
        write("fairseq/data/__init__.py", "")
        for name in ("data_utils_fast", "token_block_utils_fast"):
            write(f"fairseq/data/{name}.py", ext)
        write("alignment_train_cpu_binding.py", ext)
        write("fairseq_fixed-0.12.3.1.dist-info/METADATA",
              "Metadata-Version: 2.1\nName: fairseq-fixed\nVersion: 0.12.3.1\n")
if "-e" in args:  # this package, editable
    write("fairseq_ctx-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: fairseq-ctx\nVersion: 0.1.0\n")
'''


class FakeVenv:
    def __init__(self, path, log):
        self.path, self.log = str(path), str(log)
        venv.EnvBuilder(with_pip=False, symlinks=True).create(self.path)
        self.python = os.path.join(self.path, "bin", "python")
        self.site = subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip()
        os.makedirs(os.path.join(self.site, "pip"))
        with open(os.path.join(self.site, "pip", "__init__.py"), "w"):
            pass
        with open(os.path.join(self.site, "pip", "__main__.py"), "w") as handle:
            handle.write(FAKE_PIP)

    def put_torch(self, version, cuda=None):
        os.makedirs(os.path.join(self.site, "torch"), exist_ok=True)
        with open(os.path.join(self.site, "torch", "version.py"), "w") as handle:
            handle.write(f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = None\n")
        with open(os.path.join(self.site, "torch", "__init__.py"), "w") as handle:
            handle.write("from .version import __version__\nfrom . import version\n")

    def torch(self):
        out = subprocess.run([self.python, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
                             capture_output=True, text=True, check=True).stdout.split()
        return out[0], (None if out[1] == "None" else out[1])

    def stamp(self):
        with open(os.path.join(self.path, ".fairseq-ctx-fairseq-build.json"), encoding="utf-8") as handle:
            return json.load(handle)

    def calls(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log, encoding="utf-8") as handle:
            calls = [json.loads(line) for line in handle]
        os.remove(self.log)
        return calls

    def setup(self, ok=True, script=SCRIPT, **knobs):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("PIP_") and k not in ("TORCH_SPEC", "TORCH_INDEX_URL", "FORCE_TORCH",
                                                           "SKIP_TORCH", "WHEELHOUSE", "CONSTRAINTS", "PYTHONPATH")}
        env.update(VENV=self.path, FAKE_PIP_LOG=self.log, FAIRSEQ_CTX_NO_MODELS="1")
        env.update(knobs)
        proc = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=60)
        if ok:
            assert proc.returncode == 0, f"setup-env failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        return proc


def torch_installs(calls):
    return [a for c in calls if c["args"][:1] == ["install"] for a in c["args"][1:] if check.is_torch_line(a)]


def fairseq_installs(calls):
    return [c["args"] for c in calls if "fairseq-fixed" in c["args"]]


@pytest.fixture
def fake(tmp_path):
    return FakeVenv(tmp_path / "venv", tmp_path / "pip.log")


def test_setup_keeps_a_present_cuda_torch(fake):
    """(a) end to end: a venv holding torch 2.99.0+cu124 comes out of setup-env.sh with the
    same torch, every pip call constrained to exactly it, and fairseq built against it."""
    fake.put_torch("2.99.0+cu124", "12.4")
    proc = fake.setup()
    calls = fake.calls()
    assert torch_installs(calls) == [], [c["args"] for c in calls]
    assert fake.torch() == ("2.99.0+cu124", "12.4")
    assert "keeping the torch present" in proc.stdout
    assert calls and all(c["constraint"] is not None for c in calls)
    for call in calls:
        assert check.torch_pins(call["constraint"].splitlines()) == ["torch==2.99.0+cu124"], call["args"]
    (build,) = fairseq_installs(calls)
    for flag in ("--force-reinstall", "--no-deps", "--no-build-isolation", "--no-cache-dir"):
        assert flag in build
    assert fake.stamp()["torch"] == "2.99.0+cu124" and fake.stamp()["cuda"] == "12.4"
    assert "fairseq extensions import" in proc.stdout


def test_second_setup_is_a_no_op_and_a_torch_change_rebuilds_fairseq(fake):
    """(b) end to end: same torch -> no pip call at all; another torch -> fairseq reinstalled
    with --force-reinstall --no-cache-dir and the record updated; a stale record -> rebuild."""
    fake.put_torch("2.99.0+cu124", "12.4")
    fake.setup()
    fake.calls()
    proc = fake.setup()
    assert fake.calls() == [] and proc.stdout == ""

    fake.put_torch("2.99.1+cu126", "12.6")  # the user upgraded torch by hand
    proc = fake.setup()
    calls = fake.calls()
    assert torch_installs(calls) == [] and fake.torch() == ("2.99.1+cu126", "12.6")
    (build,) = fairseq_installs(calls)
    assert "--force-reinstall" in build and "--no-cache-dir" in build
    assert "built against torch 2.99.0+cu124" in proc.stdout
    assert fake.stamp()["torch"] == "2.99.1+cu126"
    for call in calls:
        assert check.torch_pins(call["constraint"].splitlines()) == ["torch==2.99.1+cu126"]

    # a record saying another torch (same files otherwise): the rebuild is decided from the record
    stamp_path = os.path.join(fake.path, ".fairseq-ctx-fairseq-build.json")
    stale = dict(fake.stamp(), torch="2.13.0+cpu", cuda=None)
    with open(stamp_path, "w", encoding="utf-8") as handle:
        json.dump(stale, handle)
    fake.setup()
    assert len(fairseq_installs(fake.calls())) == 1
    fake.setup()
    assert fake.calls() == []


def test_a_second_setup_with_a_relative_venv_path_is_a_no_op(tmp_path):
    """VENV as the Makefile gives it (.venv, relative to the checkout): the check that the
    package is still installed runs from / and must still find the venv's python (it did not:
    every `make` after the first installed the package again)."""
    checkout = tmp_path / "checkout"
    for name in ("scripts/setup-env.sh", "scripts/setup_env_check.py", "requirements/constraints-cpu.txt",
                 "requirements/tools.txt", "setup.py", "pyproject.toml"):
        os.makedirs(checkout / os.path.dirname(name), exist_ok=True)
        shutil.copy(os.path.join(ROOT, name), checkout / name)
    (checkout / "fairseq_ctx").mkdir()
    (checkout / "fairseq_ctx" / "__init__.py").write_text("")  # what the script's last import needs
    fake = FakeVenv(checkout / ".venv", tmp_path / "pip.log")
    fake.put_torch("2.99.0+cu124", "12.4")
    script = str(checkout / "scripts" / "setup-env.sh")
    decoy = tmp_path / "elsewhere"  # an exported CDPATH must not send `cd .venv` there
    (decoy / ".venv" / "bin").mkdir(parents=True)
    fake.setup(script=script, VENV=".venv", CDPATH=str(decoy))
    fake.calls()
    proc = fake.setup(script=script, VENV=".venv", CDPATH=str(decoy))
    assert "no longer installed" not in proc.stderr
    assert fake.calls() == [] and proc.stdout == ""


def test_a_removed_package_is_installed_again_without_rebuilding_fairseq(fake):
    """A pip command (e.g. an install into another prefix) can uninstall this package while
    the stamp still matches: the next setup must notice and install it again, and only it."""
    fake.put_torch("2.99.0+cu124", "12.4")
    fake.setup()
    fake.calls()
    shutil.rmtree(os.path.join(fake.site, "fairseq_ctx-0.1.0.dist-info"))
    proc = fake.setup()
    calls = fake.calls()
    assert "no longer installed" in proc.stderr
    assert fairseq_installs(calls) == [] and any("-e" in c["args"] for c in calls)
    assert os.path.exists(os.path.join(fake.site, "fairseq_ctx-0.1.0.dist-info"))
    fake.setup()
    assert fake.calls() == []


def test_fresh_venv_gets_the_cpu_torch_as_in_ci(fake):
    """CI: no torch in the venv -> torch==2.13.0+cpu (the configured index's CPU build)
    installed under constraints without a torch line, then pinned for everything else."""
    proc = fake.setup()
    calls = fake.calls()
    assert torch_installs(calls) == ["torch==2.13.0+cpu"]
    torch_call = next(c for c in calls if torch_installs([c]))
    assert check.torch_pins(torch_call["constraint"].splitlines()) == []
    for call in calls[calls.index(torch_call) + 1:]:
        assert check.torch_pins(call["constraint"].splitlines()) == ["torch==2.13.0+cpu"], call["args"]
    assert fake.torch() == ("2.13.0+cpu", None)
    assert fake.stamp()["torch"] == "2.13.0+cpu"
    assert "torch 2.13.0+cpu" in proc.stdout


def test_index_without_cpu_build_falls_back_to_the_plain_pin(fake):
    proc = fake.setup(FAKE_INDEX_HAS_NO_CPU_TORCH="1")
    calls = fake.calls()
    assert torch_installs(calls) == ["torch==2.13.0+cpu", "torch==2.13.0"]
    assert "download.pytorch.org/whl/cpu" in proc.stderr
    assert fake.torch() == ("2.13.0", "12.8")


def test_explicit_requests_replace_or_skip(fake):
    fake.put_torch("2.99.0+cu124", "12.4")
    fake.setup(TORCH_SPEC="torch==2.5.1+cu121", TORCH_INDEX_URL="https://download.pytorch.org/whl/cu121")
    calls = fake.calls()
    (torch_call,) = [c for c in calls if torch_installs([c])]
    assert torch_installs([torch_call]) == ["torch==2.5.1+cu121"]
    assert "https://download.pytorch.org/whl/cu121" in torch_call["args"]
    assert fake.torch()[0] == "2.5.1+cu121" and fake.stamp()["torch"] == "2.5.1+cu121"
    # FORCE_TORCH: back to the constraints' (CPU) torch
    fake.setup(FORCE_TORCH="1")
    assert torch_installs(fake.calls()) == ["torch==2.13.0+cpu"]
    # SKIP_TORCH: never installs one, and says so clearly when there is none
    fake.setup(SKIP_TORCH="1")
    assert torch_installs(fake.calls()) == []


def test_skip_torch_without_torch_fails_clearly(fake):
    proc = fake.setup(ok=False, SKIP_TORCH="1")
    assert proc.returncode != 0 and "SKIP_TORCH=1 but no torch" in proc.stderr
    assert torch_installs(fake.calls()) == []


def test_broken_extensions_fail_with_one_message(fake):
    fake.put_torch("2.99.0+cu124", "12.4")
    proc = fake.setup(ok=False, FAKE_BUILD_BROKEN="1")
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("setup-env:")]
    assert len(errors) == 1 and "compiled extensions do not import" in errors[0]
    assert "fairseq.libbase" in errors[0] and "undefined symbol" in errors[0]
    assert not os.path.exists(os.path.join(fake.path, ".fairseq-ctx-installed"))


def test_extensions_broken_behind_an_unchanged_record_are_rebuilt(fake):
    """The record says the present torch, but the extensions do not import (e.g. torch was
    reinstalled over itself as another build with the same version string): rebuild."""
    fake.put_torch("2.99.0+cu124", "12.4")
    fake.setup(FAKE_BUILD_BROKEN="1", ok=False)
    fake.setup()  # a good build
    fake.calls()
    with open(os.path.join(fake.site, "fairseq", "libbase.py"), "w") as handle:
        handle.write("raise ImportError('undefined symbol: _ZN3c10')\n")
    proc = fake.setup()
    assert "rebuilding fairseq-fixed" in proc.stderr
    assert len(fairseq_installs(fake.calls())) == 1


@pytest.mark.parametrize("numpy_present", ["1.26.4", None, "2.1.0"])
def test_an_older_torch_kept_keeps_a_numpy_1(numpy_present):
    """torch < 2.3 is built against NumPy 1.x: the file's numpy 2 pin (or a NumPy 2 already
    there) would break it."""
    text = check.effective_constraints(_lines(CPU), torch_info("2.1.2+cu118", cuda="11.8"), numpy_present)
    numpy_lines = [line for line in text.splitlines() if check.is_numpy_line(line)]
    want = "numpy==1.26.4" if numpy_present == "1.26.4" else "numpy<2"
    assert numpy_lines == [want], numpy_lines


def test_a_recent_torch_kept_keeps_the_numpy_pin():
    text = check.effective_constraints(_lines(CPU), torch_info("2.5.1+cu124", cuda="12.4"), "2.1.0")
    pinned = [line.strip() for line in _lines(CPU) if check.is_numpy_line(line)]
    assert len(pinned) == 1 and [line for line in text.splitlines() if check.is_numpy_line(line)] == pinned
