"""Evaluation, in one place: the ``fairseq-ctx-evaluate`` command and what it is made of.

    command.py         fairseq-ctx-evaluate (``python -m fairseq_ctx.evaluation``): checkpoint
                       choice, generation, scoring, result.json; ``--paper`` for a paper's settings
    defaults.py        each paper's evaluation settings: the one table, shared with
                       fairseq-ctx-reproduce (fairseq_ctx/reproduce/tables.py: Table.evaluation)
    generate.py        fairseq-generate with every sentence accounted for
    scoring.py         sacreBLEU, tokenised BLEU, paired bootstrap, BLEU by source length
    average.py         checkpoint averaging (fairseq-ctx-average-checkpoints)
    length_buckets.py  BLEU by source length of several systems (fairseq-ctx-length-buckets)

Importing the package imports none of them (``defaults`` is pure data: the reproduction
tables import it without torch or fairseq).
"""
