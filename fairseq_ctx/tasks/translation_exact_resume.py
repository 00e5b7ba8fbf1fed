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
number of times ends with the weights of the run that was never stopped (on one machine;
tested), and the two members of a controlled pair keep seeing the same batches.

Nothing else differs: an uninterrupted training, validation, generation and every model are
those of ``translation`` (the same options, dataclass and data loading). Left to fairseq as
it is: data split into shards (``data-bin1:data-bin2``: fairseq loads and batches each epoch's
shard afresh, with that epoch's seed, in a resumed training too), ``--rebuild-batches`` and
``--update-epoch-batch-itr`` (batches rebuilt every epoch), datasets that do not reuse their
batches across epochs.
"""
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

NAME = "translation_exact_resume"


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
            and not getattr(self.cfg, "rebuild_batches", False)
            and self.can_reuse_epoch_itr(dataset)
        )
        if not regroup_as_epoch_1:
            return super().get_batch_iterator(dataset, *args, **kwargs)
        epoch_iter = super().get_batch_iterator(dataset, **{**kwargs, "epoch": 1})
        # as if built in `epoch` (the checkpoint's iterator state then sets the position in it)
        epoch_iter.epoch = epoch
        dataset.set_epoch(epoch)
        return epoch_iter
