"""The --user-dir plugin: registration and the torch.load workaround."""
import importlib
import os
import subprocess
import sys

from tests.conftest import ROOT, USER_DIR, cli_env


def test_every_model_module_registers_an_architecture():
    from fairseq.models import ARCH_MODEL_REGISTRY

    import fairseq_ctx.models

    models_dir = os.path.dirname(fairseq_ctx.models.__file__)
    for name in sorted(os.listdir(models_dir)):
        if name.endswith(".py") and not name.startswith("_"):
            module = importlib.import_module(f"fairseq_ctx.models.{name[:-3]}")
            registered = [arch for arch, cls in ARCH_MODEL_REGISTRY.items() if cls.__module__ == module.__name__]
            assert registered, f"fairseq_ctx/models/{name} registers no architecture"


def test_user_dir_sets_torch_load_workaround_before_any_checkpoint_is_read():
    env = cli_env()
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    code = (
        "import os, argparse\n"
        "from fairseq.utils import import_user_module\n"
        f"import_user_module(argparse.Namespace(user_dir={USER_DIR!r}))\n"
        "print(os.environ.get('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "1"


def test_models_register_when_package_is_imported_before_fairseq_user_dir():
    """fairseq's --user-dir skips a package already in sys.modules: importing it must register."""
    code = (
        "import argparse, fairseq_ctx\n"
        "from fairseq import options\n"
        f"argv = ['data', '--user-dir', {USER_DIR!r}, '--arch', 'transformer_context_aware']\n"
        "args = options.parse_args_and_arch(options.get_training_parser(), argv)\n"
        "print(args.arch)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "transformer_context_aware"
