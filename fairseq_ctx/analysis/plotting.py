"""matplotlib for the analyses' PNGs: the file backend (no display on cluster nodes) and
its logger quiet (fairseq's logging setup lets matplotlib's font-manager DEBUG lines through,
hundreds of them per plot)."""
import logging


def pyplot():
    """``matplotlib.pyplot``, ready for files; ImportError when matplotlib is absent."""
    import matplotlib

    matplotlib.use("Agg")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib.pyplot as plt

    return plt
