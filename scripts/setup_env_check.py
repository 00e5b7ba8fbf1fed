"""Decisions of scripts/setup-env.sh, kept out of the shell so they can be tested.

Run with the venv's own interpreter (``$VENV/bin/python scripts/setup_env_check.py CMD``):
it looks at the torch and fairseq of the interpreter that runs it. Standard library only
(it runs before anything is installed in the venv).

Commands (each prints one line for the shell, or exits 2 with one message on stderr):

``torch-id``
    the present torch as ``2.13.0+cpu cuda=None hip=None``, or ``absent``.
``plan-torch --constraints FILE``
    ``keep VERSION`` (a torch is present and nobody asked for another one),
    ``install SPEC [FALLBACK]`` (none present, or TORCH_SPEC / FORCE_TORCH given),
    or ``skip`` (SKIP_TORCH=1 and a torch is present).
``constraints --base FILE --out FILE [--without-torch]``
    writes the constraints every later pip call uses: FILE without its torch lines,
    plus ``torch==<present version>`` when a torch is present (so nothing can pin or
    pull another torch over it; a torch before 2.3 also keeps its numpy, or gets numpy<2); ``--without-torch``: no torch line at all (for the
    torch install itself, whose spec alone decides).
``fairseq-plan --stamp FILE``
    ``ok`` when fairseq-fixed is installed and the stamp says it was built against the
    present torch, else ``build REASON``.
``fairseq-stamp --stamp FILE``
    records the present torch (version, CUDA, HIP) and Python as fairseq's build.
``verify``
    imports torch and fairseq's compiled extensions; exits 1 with one message if not.
"""
import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import runpy
import sys

FAIRSEQ_DIST = "fairseq-fixed"
# the extensions fairseq-fixed's setup.py always builds (the CUDA ones only with CUDA_HOME)
FAIRSEQ_EXTENSIONS = (
    "fairseq.libbleu",
    "fairseq.libbase",
    "fairseq.libnat",
    "fairseq.data.data_utils_fast",
    "fairseq.data.token_block_utils_fast",
    "alignment_train_cpu_binding",
)
FAIRSEQ_CUDA_EXTENSIONS = ("fairseq.libnat_cuda", "fairseq.ngram_repeat_block_cuda", "alignment_train_cuda_binding")
TRUE = {"1", "true", "yes", "on"}


class SetupError(Exception):
    """One message for the user; the shell script stops on it."""


def _flag(env, name):
    return env.get(name, "").strip().lower() in TRUE


# ---------------------------------------------------------------- the present torch

def present_torch():
    """{"version", "cuda", "hip"} of the torch this interpreter would import, or None.

    Read from torch/version.py without importing torch (fast; it is a plain module of
    constants in every torch 2.x build); an installation without it is imported."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    for location in spec.submodule_search_locations or ():
        path = os.path.join(location, "version.py")
        if os.path.isfile(path):
            try:
                ns = runpy.run_path(path)
                return {"version": str(ns["__version__"]), "cuda": ns.get("cuda"), "hip": ns.get("hip")}
            except Exception:  # noqa: BLE001  (fall back to a real import)
                break
    try:
        import torch  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        raise SetupError(f"a torch is installed ({spec.origin}) but does not import: {exc!r}; "
                         "repair it or reinstall it with FORCE_TORCH=1 (or TORCH_SPEC=...)") from exc
    return {"version": str(torch.__version__), "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None)}


def torch_id(info):
    if info is None:
        return "absent"
    return f"{info['version']} cuda={info['cuda']} hip={info['hip']}"


# ---------------------------------------------------------------- constraints

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def names_distribution(line, name):
    """Whether a requirement/constraint line is about the distribution ``name`` itself
    (for torch: not torchaudio, torch-geometric, ...); comments and options never are."""
    stripped = line.split("#", 1)[0].strip()
    if not stripped or stripped.startswith("-"):
        return False
    match = _NAME.match(stripped)
    return bool(match) and _canonical(match.group(1)) == name


def is_torch_line(line):
    return names_distribution(line, "torch")


def torch_pins(lines):
    """The torch constraint lines (comments removed) of a constraints file."""
    return [line.split("#", 1)[0].strip() for line in lines if is_torch_line(line)]


def is_numpy_line(line):
    return names_distribution(line, "numpy")


def present_numpy():
    """The installed numpy's version (from its metadata, without importing it), or None."""
    from importlib import metadata

    try:
        return metadata.version("numpy")
    except metadata.PackageNotFoundError:
        return None


def _release(version):
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:2])


def effective_constraints(base_lines, present, numpy_version=None):
    """``base_lines`` without any torch line, plus the exact present torch (if any:
    ``present=None`` gives the constraints for installing torch itself).

    A kept torch older than 2.3 also keeps its numpy: such wheels are built against NumPy
    1.x and break on the file's NumPy 2 pin (``torch.from_numpy``, which fairseq's datasets
    use). The present numpy is pinned instead of the file's where it is a NumPy 1.x, else
    ``numpy<2``. (torch 2.3 and later work with NumPy 2: the file's pin stays.)"""
    keep_numpy = present is not None and _release(present["version"]) < (2, 3)
    out = [line.rstrip("\n") for line in base_lines
           if not is_torch_line(line) and not (keep_numpy and is_numpy_line(line))]
    if present is not None:
        out.append("# the torch present in the environment (kept; scripts/setup-env.sh)")
        out.append(f"torch=={present['version']}")
        if keep_numpy and numpy_version and _release(numpy_version) < (2,):
            out.append("# and the numpy beside it (a torch before 2.3 is built against NumPy 1.x)")
            out.append(f"numpy=={numpy_version}")
        elif keep_numpy:
            out.append("# a torch before 2.3 is built against NumPy 1.x")
            out.append("numpy<2")
    return "\n".join(out) + "\n"


def _read_lines(path):
    with open(path, encoding="utf-8") as handle:
        return handle.readlines()


# ---------------------------------------------------------------- torch plan

def default_torch_specs(constraint_lines):
    """What to install when no torch is present and TORCH_SPEC is not given: the
    constraints' torch pin, asking first for its CPU build (``torch==X+cpu``, offered by
    PyTorch's CPU index and by this project's configured index) and falling back to the
    plain pin (on public PyPI the plain ``torch==X`` is the CUDA build)."""
    pins = torch_pins(constraint_lines)
    if not pins:
        raise SetupError("no torch is present in the venv and the constraints pin none: set TORCH_SPEC "
                         "(and TORCH_INDEX_URL for a CUDA build), e.g. TORCH_SPEC='torch==2.5.1' "
                         "TORCH_INDEX_URL=https://download.pytorch.org/whl/cu124")
    pin = pins[0].replace(" ", "")
    match = re.fullmatch(r"torch==([0-9][0-9A-Za-z.!]*)", pin)
    if match:  # an exact public version: prefer its CPU build
        return [f"torch=={match.group(1)}+cpu", pin]
    return [pin]


def plan_torch(present, constraint_lines, env):
    """("keep", version) | ("skip", version) | ("install", [spec, fallback...])."""
    spec = "".join(env.get("TORCH_SPEC", "").split())  # one word for the shell: "torch >= 2.5" -> "torch>=2.5"
    if _flag(env, "SKIP_TORCH"):
        if present is None:
            raise SetupError("SKIP_TORCH=1 but no torch is importable from the venv (create it with "
                             "`python -m venv --system-site-packages` over a Python that has torch, "
                             "or install torch into it first)")
        return ("skip", present["version"])
    if spec:
        return ("install", [spec])
    if _flag(env, "FORCE_TORCH") or present is None:
        return ("install", default_torch_specs(constraint_lines))
    return ("keep", present["version"])


# ---------------------------------------------------------------- fairseq build

def fairseq_version():
    try:
        return importlib.metadata.version(FAIRSEQ_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def build_record(present):
    return {
        "torch": present["version"] if present else None,
        "cuda": present["cuda"] if present else None,
        "hip": present["hip"] if present else None,
        "python": "%d.%d" % sys.version_info[:2],
    }


def read_stamp(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def fairseq_plan(present, installed_version, stamp):
    """None when fairseq needs nothing, else the reason to (re)build it."""
    if installed_version is None:
        return f"{FAIRSEQ_DIST} is not installed"
    if stamp is None:
        return "no record of the torch fairseq was built against"
    want = build_record(present)
    for key in ("torch", "cuda", "hip", "python"):
        if stamp.get(key) != want[key]:
            return f"fairseq was built against {key} {stamp.get(key)}, the venv has {want[key]}"
    if stamp.get("fairseq") != installed_version:
        return f"the record is of {FAIRSEQ_DIST} {stamp.get('fairseq')}, {installed_version} is installed"
    return None


def write_stamp(path, present):
    record = dict(build_record(present), fairseq=fairseq_version())
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(record, handle, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)
    return record


# ---------------------------------------------------------------- verification

def verify():
    """Import torch and fairseq's compiled extensions; raise SetupError naming what failed."""
    try:
        import torch  # noqa: PLC0415,F401  (the C++ extensions need libtorch loaded first)
    except Exception as exc:  # noqa: BLE001
        raise SetupError(f"torch does not import in the venv: {exc!r}. Reinstall it "
                         "(FORCE_TORCH=1 or TORCH_SPEC=...) and run the setup again") from exc
    # the CUDA extensions are built only with CUDA_HOME set: checked where they were built
    names = list(FAIRSEQ_EXTENSIONS) + [n for n in FAIRSEQ_CUDA_EXTENSIONS if _findable(n)]
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001
            failed.append(f"{name} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
    if failed:
        raise SetupError("fairseq's compiled extensions do not import against torch "
                         f"{torch_id(present_torch())}: " + "; ".join(failed)
                         + f". Rebuild fairseq: delete the venv's .fairseq-ctx-fairseq-build.json and run "
                         "the setup again (it reinstalls fairseq-fixed with --force-reinstall "
                         "--no-build-isolation --no-cache-dir)")
    return names


def _findable(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


# ---------------------------------------------------------------- command line

def main(argv=None, env=None):
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog="setup_env_check.py")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("torch-id")
    plan = sub.add_parser("plan-torch")
    plan.add_argument("--constraints", required=True)
    cons = sub.add_parser("constraints")
    cons.add_argument("--base", required=True)
    cons.add_argument("--out", required=True)
    cons.add_argument("--without-torch", action="store_true",
                      help="no torch line at all (for the torch install itself)")
    for name in ("fairseq-plan", "fairseq-stamp"):
        sub.add_parser(name).add_argument("--stamp", required=True)
    sub.add_parser("verify")
    args = parser.parse_args(argv)
    try:
        if args.command == "torch-id":
            print(torch_id(present_torch()))
        elif args.command == "plan-torch":
            action, what = plan_torch(present_torch(), _read_lines(args.constraints), env)
            print(action, " ".join(what) if isinstance(what, list) else what)
        elif args.command == "constraints":
            present = None if args.without_torch else present_torch()
            text = effective_constraints(_read_lines(args.base), present,
                                         present_numpy() if present is not None else None)
            with open(args.out, "w", encoding="utf-8") as handle:
                handle.write(text)
            print(args.out)
        elif args.command == "fairseq-plan":
            reason = fairseq_plan(present_torch(), fairseq_version(), read_stamp(args.stamp))
            print("ok" if reason is None else f"build {reason}")
        elif args.command == "fairseq-stamp":
            print(json.dumps(write_stamp(args.stamp, present_torch()), sort_keys=True))
        elif args.command == "verify":
            print("fairseq extensions import:", " ".join(verify()))
    except SetupError as exc:
        print(f"setup-env: {exc}", file=sys.stderr)
        return 1 if args.command == "verify" else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
