"""Analysis of trained models and runs: gate / routing statistics (model_statistics.py), seed-level
statistics (seed_statistics.py), learning curves (learning_curves.py). Evaluation (BLEU, bootstrap,
BLEU by length, checkpoint averaging) is fairseq_ctx/evaluation/."""
