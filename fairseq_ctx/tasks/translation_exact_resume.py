"""``--task translation_exact_resume``: fairseq's ``translation``, except that a training
resumed in a later epoch goes on with the batches the uninterrupted training would have had.

Why: fairseq groups the training sentences into batches once per process, shuffling the
sentences of equal length with numpy seed ``--seed`` + the epoch the process starts in
(``FairseqTask.get_batch_iterator``), and an uninterrupted training keeps those epoch-1
batches for every epoch (the iterator is cached; each epoch only reorders the batches, with
seed + epoch). A training resumed in epoch E > 1 therefore regroups its sentences with seed + E:
the same batch lengths filled with other sentences from then on, a valid run of its seed but
not the uninterrupted one (on the demo corpus 160 of 168 batches differ at epoch 15). Here the
batches of a resumed training are grouped as in epoch 1, so a run preempted and resumed any
number of times sees the batches, in the order, of the run that was never stopped; where the
training itself is deterministic (CPU, fp32: tested, also with --update-freq and validation)
it ends with that run's weights bit for bit. A run that ``translation`` already resumed in a
later epoch stays another run (its regrouped batches cannot be recovered).

The same options, dataclass, data loading, validation and generation as ``translation``; an
uninterrupted training is translation's bit for bit (tested). Checkpoints name this task, so
loading them through fairseq's hub or ``load_model_ensemble_and_task`` needs the plugin
(``user_dir=``); fairseq-generate and fairseq-interactive take the task from their own
command line. Left as fairseq has them, exact already: data split into shards
(``data-bin1:data-bin2``), ``--update-epoch-batch-itr`` and ``--grouped-shuffling`` (batches
rebuilt every epoch with that epoch's seed, resumed or not). Not exact, here as in
``translation``: ``--update-ordered-indices-seed`` (the grouping seed itself moves with the
epoch the process starts in, which the task does not see); fairseq-ctx's commands refuse it.
"""
import logging

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

NAME = "translation_exact_resume"
logger = logging.getLogger(__name__)


@register_task(NAME, dataclass=TranslationConfig)
class ExactResumeTranslationTask(TranslationTask):

    def get_batch_iterator(self, dataset, *args, **kwargs):
        epoch = kwargs.get("epoch", 1)
        regroup_as_epoch_1 = (
            not args  # fairseq's trainer passes everything by name
            and epoch > 1
            and dataset not in self.dataset_to_epoch_iter  # a cached iterator keeps its batches
            and not kwargs.get("disable_iterator_cache")  # sharded data: batched afresh each epoch
            and not kwargs.get("update_epoch_batch_itr")
            and self.can_reuse_epoch_itr(dataset)
        )
        if not regroup_as_epoch_1:
            return super().get_batch_iterator(dataset, *args, **kwargs)
        logger.info(f"resumed in epoch {epoch}: the batches are grouped as the uninterrupted training's, "
                    f"in epoch 1 (--task {NAME})")
        epoch_iter = super().get_batch_iterator(dataset, **{**kwargs, "epoch": 1})
        # as if built in `epoch` (the checkpoint's iterator state then sets the position in it)
        epoch_iter.epoch = epoch
        dataset.set_epoch(epoch)
        return epoch_iter
