"""The patches that the training prototypes of embedding_quality.py share:
the training-loss patch of the loss prototypes (``_vicreg``, ``_identity``,
``_model_ranking``) and several methods patched at once (``_query_identity``,
``_relative_scores``)."""

import contextlib
from unittest import mock

from locus_sklearn import _training


def training_terms(terms):
    """A context manager within which LocusNet's loss, in training steps
    only, is the loss in place when this is called plus each tensor of
    ``terms(net, y_pred, y_true, X)``, added one by one in order (an empty
    sequence adds nothing). Validation loss and early stopping read the
    loss as it was; the exit restores it.
    """
    get_loss = _training.LocusNet.get_loss

    def loss_with_terms(self, y_pred, y_true, X=None, training=False):
        loss = get_loss(self, y_pred, y_true, X=X, training=training)
        if not training:
            return loss
        for term in terms(self, y_pred, y_true, X):
            loss = loss + term
        return loss

    return mock.patch.object(_training.LocusNet, "get_loss", loss_with_terms)


@contextlib.contextmanager
def patched(*replacements):
    """Within the block, each ``(owner, name, value)`` of ``replacements`` is
    in place (``mock.patch.object``); the exit restores every one."""
    with contextlib.ExitStack() as stack:
        for owner, name, value in replacements:
            stack.enter_context(mock.patch.object(owner, name, value))
        yield
