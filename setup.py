from setuptools import find_packages, setup

setup(
    name="fairseq-ctx",
    version="0.1.0",
    description=(
        "fairseq plugin: context-aware self-attention, multi-hop RNN attention, "
        "cross aggregation of multi-head attention, sentential context"
    ),
    packages=find_packages(include=["fairseq_ctx", "fairseq_ctx.*"]),
    python_requires=">=3.10",
    # torch and fairseq are deliberately NOT listed: a plain `torch` requirement pulls
    # the newest CUDA build, and fairseq must be built against the installed torch
    # with --no-build-isolation. scripts/setup-env.sh installs both.
    install_requires=[
        "sacrebleu>=2.3",
        "sacremoses",
        "subword-nmt",
        "sentencepiece",
        "jieba",
    ],
    extras_require={"ja": ["fugashi", "unidic-lite"], "test": ["pytest", "pytest-timeout"]},
)
