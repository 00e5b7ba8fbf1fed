"""Which stock fairseq baseline an architecture is compared with (fairseq-ctx-quality-compare,
fairseq-ctx-benchmark): its model family, read off the arch's name."""

# each family's stock arch, the one its systems are compared with first: ours are built on it
# (the *_big archs call fairseq's transformer_vaswani_wmt_en_de_big, then add their modules)
FAMILY_ARCH = {"transformer": "transformer", "lstm": "lstm", "transformer_big": "transformer_vaswani_wmt_en_de_big"}
# fairseq's stock archs a quality comparison takes as baselines -> their family
STOCK_ARCHS = {"transformer": "transformer", "lstm": "lstm",
               **dict.fromkeys(("transformer_vaswani_wmt_en_de_big", "transformer_vaswani_wmt_en_fr_big",
                                "transformer_wmt_en_de_big", "transformer_wmt_en_de_big_t2t"), "transformer_big")}


def family_of(arch: str) -> str:
    """lstm for lstm*; transformer_big for a Transformer-Big (transformer*_big, *_big_t2t,
    *_big_align: fairseq's and ours), not to be compared with the base Transformer (the sizes
    differ, 1024 / 4096 / 16 heads); else transformer (lightconv_*_big too: not a Transformer-Big)."""
    if arch.startswith("lstm"):
        return "lstm"
    if arch.startswith("transformer") and arch.endswith(("_big", "_big_t2t", "_big_align")):
        return "transformer_big"
    return "transformer"


def first_of_family(baselines) -> dict:
    """{family: name} of the baseline each family's systems are compared with, from ``baselines``
    [(name, arch)] in order: the first whose arch is the family's FAMILY_ARCH, else its first."""
    chosen = {}
    for name, arch in baselines:
        family = family_of(arch)
        if family not in chosen or (arch == FAMILY_ARCH[family] != chosen[family][1]):
            chosen[family] = (name, arch)
    return {family: name for family, (name, _) in chosen.items()}
