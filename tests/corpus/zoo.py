"""A gradviz model script over the real-model corpus: ``GRADVIZ_CORPUS=<name>`` picks the model
(see ``corpus_models.MODELS``); e.g. ``GRADVIZ_CORPUS=bert gradviz check tests/corpus/zoo.py``."""
import os

from corpus_models import MODELS

ENTRY = MODELS[os.environ.get("GRADVIZ_CORPUS", "gpt2")]

model = ENTRY.model
batch = ENTRY.batch


def loss_fn(output, targets):
    return ENTRY.loss_fn(output, targets)


if ENTRY.compute_loss is not None:
    compute_loss = ENTRY.compute_loss
