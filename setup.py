import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "README.md"), encoding="utf-8") as handle:
    README = handle.read()

# What users run; the files under scripts/ of a checkout call the same functions.
CONSOLE_SCRIPTS = [
    "fairseq-ctx-reproduce = fairseq_ctx.cli:reproduce",
    "fairseq-ctx-rehearsal = fairseq_ctx.cli:rehearsal",
    "fairseq-ctx-train = fairseq_ctx.cli:train",
    "fairseq-ctx-prepare-data = fairseq_ctx.cli:prepare_data",
    "fairseq-ctx-evaluate = fairseq_ctx.cli:evaluate",
    "fairseq-ctx-average-checkpoints = fairseq_ctx.cli:average_checkpoints",
    "fairseq-ctx-benchmark = fairseq_ctx.cli:benchmark",
    "fairseq-ctx-quality-compare = fairseq_ctx.cli:quality_compare",
    "fairseq-ctx-make-concat-context = fairseq_ctx.cli:make_concat_context",
    "fairseq-ctx-strip-concat-context = fairseq_ctx.cli:strip_concat_context",
    "fairseq-ctx-gate-statistics = fairseq_ctx.cli:gate_statistics",
    "fairseq-ctx-routing-statistics = fairseq_ctx.cli:routing_statistics",
    "fairseq-ctx-length-buckets = fairseq_ctx.cli:length_buckets",
]

setup(
    name="fairseq-ctx",
    version="0.1.0",
    description=(
        "fairseq plugin: context-aware self-attention, multi-hop RNN attention, "
        "cross aggregation of multi-head attention, sentential context"
    ),
    long_description=README,
    long_description_content_type="text/markdown",
    author="fairseq-ctx authors",
    license="MIT",  # an SPDX expression (PEP 639): no License classifier beside it
    license_files=["LICENSE"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Science/Research",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Text Processing :: Linguistic",
    ],
    keywords="fairseq machine-translation nmt attention transformer",
    packages=find_packages(include=["fairseq_ctx", "fairseq_ctx.*"]),
    # the training configs and the data-preparation scripts are read / run from the
    # installed package (fairseq_ctx/paths.py), so every command works outside a checkout
    package_data={
        "fairseq_ctx": [
            "configs/*/*.args",
            "configs/*/*.common",
            "scripts/*.sh",
            "scripts/data/*.sh",
        ],
    },
    zip_safe=False,  # bash and fairseq need the configs and scripts as real files
    python_requires=">=3.11",  # the tested pins (requirements/) are for 3.11
    # torch and fairseq are deliberately NOT listed: a plain `torch` requirement pulls
    # the newest CUDA build, and fairseq must be built against the installed torch
    # with --no-build-isolation. scripts/setup-env.sh installs both.
    install_requires=[
        "sacrebleu>=2.3",
        "sacremoses",
        "subword-nmt>=0.3.8",  # learn_bpe(is_dict=True), driven by fairseq_ctx.data.bpe
        "sentencepiece",
        "jieba",
        "tqdm>=4.60",  # data-preparation progress (delay=)
        "tensorboard",  # fairseq-train --tensorboard-logdir is a silent no-op without it
        "matplotlib",  # learning curves and analysis plots
    ],
    extras_require={
        # Japanese: MeCab tokenisation (fugashi + unidic-lite) and sacreBLEU's ja-mecab scoring
        "ja": ["fugashi", "unidic-lite", "sacrebleu[ja]"],
        "test": ["pytest", "pytest-timeout", "pytest-xdist"],
    },
    entry_points={"console_scripts": CONSOLE_SCRIPTS},
)
