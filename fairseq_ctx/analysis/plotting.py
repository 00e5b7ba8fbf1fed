"""matplotlib for the analyses' PNGs: the file backend (no display on cluster nodes) and
its logger quiet (fairseq's logging setup lets matplotlib's font-manager DEBUG lines through,
hundreds of them per plot)."""
import logging


def pyplot():
    """``matplotlib.pyplot``, ready for files; ImportError when matplotlib is absent."""
    # quiet before the import: matplotlib logs its paths and platform at DEBUG while importing
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
