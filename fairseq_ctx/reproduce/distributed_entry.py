"""fairseq-train under torchrun, on GPUs or CPU processes (gloo).

fairseq's own torchrun support (``_infer_torch_distributed_launch_init``) computes the
device as ``rank % torch.cuda.device_count()``, a ZeroDivisionError without GPUs, and
its spawn path starts ``min(cuda.device_count(), world size)`` = 0 processes on CPU.
This entry reads torchrun's RANK / LOCAL_RANK / WORLD_SIZE and passes them to fairseq
explicitly (``--distributed-init-method env:// --distributed-no-spawn``), which works on
both. Everything else is fairseq_cli.train.
"""
import os
import sys


def distributed_argv(argv, environ=os.environ):
    missing = [k for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in environ]
    if missing:
        raise SystemExit(f"distributed_entry: run me under torchrun ({', '.join(missing)} not set)")
    return [*argv, "--distributed-init-method", "env://", "--distributed-no-spawn",
            "--distributed-world-size", environ["WORLD_SIZE"], "--distributed-rank", environ["RANK"],
            "--device-id", environ["LOCAL_RANK"]]


def main():
    sys.argv = [sys.argv[0], *distributed_argv(sys.argv[1:])]
    import fairseq  # noqa: F401
    from fairseq_cli.train import cli_main

    # this package was imported before fairseq, so --user-dir finds it "already
    # imported" and does nothing; the package import registered the models and tasks (explicit here)
    import fairseq_ctx.models  # noqa: F401
    import fairseq_ctx.tasks  # noqa: F401

    cli_main()


if __name__ == "__main__":
    main()
