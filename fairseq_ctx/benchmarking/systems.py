"""The systems of a benchmark: ``NAME=ARGS`` specs, and each system built exactly as
``fairseq-train`` builds it (fairseq's training parser with ``--user-dir fairseq_ctx``, the
omegaconf config, a ``TranslationTask`` over a synthetic joint dictionary, the criterion, Adam)."""
from __future__ import annotations

import argparse
import dataclasses
import shlex
from typing import Dict, List, Optional, Sequence

import torch

from ..paths import PACKAGE_DIR as USER_DIR
from ..reproduce.params import make_dictionary  # noqa: F401  (re-exported: a joint synthetic dictionary)
from ..reproduce.params import parse_training_args

# Size overrides, keyed by model family. Each entry is (namespace attribute, option,
# value or None for a store_true flag); an entry is only passed when the architecture's
# parsed arguments have that attribute (i.e. the arch accepts the option). They go
# BEFORE the system's own arguments, so an option given explicitly in a system string
# wins (argparse keeps the last occurrence).
DIM_OVERRIDES: Dict[str, Dict[str, List[tuple]]] = {
    "tiny": {
        "transformer": [
            ("encoder_embed_dim", "--encoder-embed-dim", "64"),
            ("encoder_ffn_embed_dim", "--encoder-ffn-embed-dim", "128"),
            ("encoder_layers", "--encoder-layers", "2"),
            ("encoder_attention_heads", "--encoder-attention-heads", "4"),
            ("decoder_embed_dim", "--decoder-embed-dim", "64"),
            ("decoder_ffn_embed_dim", "--decoder-ffn-embed-dim", "128"),
            ("decoder_layers", "--decoder-layers", "2"),
            ("decoder_attention_heads", "--decoder-attention-heads", "4"),
            ("decoder_output_dim", "--decoder-output-dim", "64"),
            ("decoder_input_dim", "--decoder-input-dim", "64"),
        ],
        "lstm": [
            ("encoder_embed_dim", "--encoder-embed-dim", "64"),
            ("encoder_hidden_size", "--encoder-hidden-size", "64"),
            ("encoder_layers", "--encoder-layers", "1"),
            ("encoder_bidirectional", "--encoder-bidirectional", None),
            ("decoder_embed_dim", "--decoder-embed-dim", "64"),
            ("decoder_hidden_size", "--decoder-hidden-size", "128"),
            ("decoder_layers", "--decoder-layers", "1"),
            ("decoder_out_embed_dim", "--decoder-out-embed-dim", "64"),
        ],
    },
    # base: the Transformer's own defaults (d 512, FFN 2048, 8 heads, 6+6 layers) are
    # the papers' base; for the LSTM family use Iida et al.'s base (1-layer
    # bidirectional encoder 512 per direction, decoder hidden 1024, embeddings 512,
    # out-embed 512), which fairseq's stock `lstm` defaults are not.
    "base": {
        "transformer": [],
        "lstm": [
            ("encoder_embed_dim", "--encoder-embed-dim", "512"),
            ("encoder_hidden_size", "--encoder-hidden-size", "512"),
            ("encoder_layers", "--encoder-layers", "1"),
            ("encoder_bidirectional", "--encoder-bidirectional", None),
            ("decoder_embed_dim", "--decoder-embed-dim", "512"),
            ("decoder_hidden_size", "--decoder-hidden-size", "1024"),
            ("decoder_layers", "--decoder-layers", "1"),
            ("decoder_out_embed_dim", "--decoder-out-embed-dim", "512"),
        ],
    },
}
DEFAULT_VOCAB = {"tiny": 8000, "base": 32000}

# Options used for every system (a system string may override them).
COMMON_ARGS = [
    "--task", "translation",
    "--source-lang", "src", "--target-lang", "tgt",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--optimizer", "adam",
]


# Options whose model changes with the optimizer updates done (u), through fairseq's
# set_num_updates, for u < N: a system timed from --at-update U < N is timed in that
# early regime (the report says so).
SCHEDULED_OPTIONS = {
    "routing_ramp_updates": "--routing-ramp-updates",
    "routing_stop_gradient_updates": "--routing-stop-gradient-updates",
}


def schedule_note(args: argparse.Namespace, first: int, last: int) -> Optional[str]:
    """Which scheduled options of a system are in their early regime (u < N) at any timed
    update u = first..last, or None."""
    early = [(opt, getattr(args, dest)) for dest, opt in SCHEDULED_OPTIONS.items()
             if (getattr(args, dest, 0) or 0) > first]
    if not early:
        return None
    where = ", ".join(f"{opt} {n} ({'all of them' if n > last else f'updates {first}-{n - 1} of them'} "
                      f"before its end)" for opt, n in early)
    return (f"timed at updates {first}-{last}: {where}; --at-update U with U + warm-up >= N times "
            f"the model past its schedule")


@dataclasses.dataclass
class SystemSpec:
    name: str
    args: str
    baseline: Optional[str] = None  # None for a baseline
    is_baseline: bool = False

    @staticmethod
    def parse(text: str, is_baseline: bool) -> "SystemSpec":
        """``name=ARGS`` or, for a system, ``name@baseline=ARGS``."""
        if "=" not in text:
            raise ValueError(f"expected NAME=ARGS, got {text!r}")
        name, args = text.split("=", 1)
        name = name.strip()
        baseline = None
        if "@" in name:
            if is_baseline:
                raise ValueError(f"a baseline cannot name a baseline: {text!r}")
            name, baseline = (s.strip() for s in name.split("@", 1))
        if not name:
            raise ValueError(f"empty system name in {text!r}")
        return SystemSpec(name=name, args=args.strip(), baseline=baseline,
                          is_baseline=is_baseline)


def resolve_systems(baselines: Sequence[str], systems: Sequence[str]) -> List[SystemSpec]:
    """Baselines first, then systems; a system without ``@baseline`` gets the first."""
    if not baselines:
        raise ValueError("at least one --baseline is needed")
    specs = [SystemSpec.parse(b, True) for b in baselines]
    names = [s.name for s in specs]
    for text in systems:
        s = SystemSpec.parse(text, False)
        if s.baseline is None:
            s.baseline = specs[0].name
        if s.baseline not in names[: len(baselines)]:
            raise ValueError(f"system {s.name!r}: unknown baseline {s.baseline!r}")
        specs.append(s)
    seen = set()
    for s in specs:
        if s.name in seen:
            raise ValueError(f"duplicate system name {s.name!r}")
        seen.add(s.name)
    return specs


def model_family(args: argparse.Namespace) -> str:
    if hasattr(args, "encoder_hidden_size") or hasattr(args, "decoder_hidden_size"):
        return "lstm"
    if hasattr(args, "encoder_ffn_embed_dim") or hasattr(args, "decoder_ffn_embed_dim"):
        return "transformer"
    return "other"


def build_argv(system_args: str, dims: str, data_dir: str, share_all: bool = True,
               seed: int = 1) -> List[str]:
    """The fairseq-train argv for one system at the given dims (arch-accepted only)."""
    user = shlex.split(system_args)
    head = [data_dir, "--user-dir", USER_DIR, *COMMON_ARGS, "--seed", str(seed)]
    user = [u for u in user if u != "--no-share-all-embeddings"]
    probe, parser = parse_training_args(head + user, return_parser=True)
    accepted = parser._option_string_actions
    family = model_family(probe)
    overrides: List[str] = []
    for dest, opt, val in DIM_OVERRIDES[dims].get(family, []):
        if opt in accepted:
            overrides += [opt] if val is None else [opt, val]
    if share_all and "--share-all-embeddings" in accepted and "--share-all-embeddings" not in user \
            and "--no-share-all-embeddings" not in shlex.split(system_args):
        overrides.append("--share-all-embeddings")
    return head + overrides + user


class Built:
    """One system, built as fairseq-train builds it: args, cfg, task, model, criterion, Adam."""

    def __init__(self, spec: SystemSpec, argv: List[str], dictionary, device: str,
                 at_update: int = 0):
        from fairseq import utils
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf
        from fairseq.tasks.translation import TranslationTask

        self.spec = spec
        self.argv = argv
        self.args = parse_training_args(argv)
        self.family = model_family(self.args)
        utils.set_torch_seed(self.args.seed)
        self.cfg = convert_namespace_to_omegaconf(self.args)
        self.task = TranslationTask(self.cfg.task, dictionary, dictionary)
        self.model = self.task.build_model(self.cfg.model).to(device)
        self.criterion = self.task.build_criterion(self.cfg.criterion).to(device)
        self.n_params = sum(p.numel() for p in self.model.parameters())
        # torch's Adam (fairseq's FairseqAdam wraps the same update) with the papers'
        # betas; foreach/fused left at torch's defaults for the device.
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=5e-4,
                                          betas=(0.9, 0.98), eps=1e-8)
        self.device = device
        # Optimizer updates done so far (u): every training step hands it to the model the
        # way fairseq's trainer does (``set_num_updates``), for the options that follow a
        # schedule in u (e.g. transformer_cross_agg's --routing-ramp-updates /
        # --routing-stop-gradient-updates); ``at_update`` times the model as at update U.
        self.at_update(at_update)

    def at_update(self, num_updates: int) -> None:
        """The model as after ``num_updates`` optimizer updates (the next step is that one)."""
        self.num_updates = num_updates
        self.model.set_num_updates(num_updates)
