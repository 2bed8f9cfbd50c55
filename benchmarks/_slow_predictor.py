"""A training prototype for embedding_quality.py: a slower predictor.

Session 31 measured (``epoch_geometry.py``) that on the 256-row pools the
model embeddings lie on one axis through epoch 8 (participation ratio
1.03-1.17) and spread by epochs 16-24, while early stopping restores epochs
1-12: the validation loss stops falling after a few epochs. The held-out rows
are held-out *queries*, and what reads a query is the predictor (an MLP of
the query's encoding and z, and the kernel readout); the encoder reads a
model's rows. Here one thing changes in training: the predictor's parameters
learn at ``FACTOR`` times the learning rate, the encoder's at the learning
rate, so that the predictor's fit to the training queries, and with it early
stopping, comes later, and the encoder trains longer before the weights are
restored.

Setting fixed before any run (not tuned): ``FACTOR = 0.25``.
"""

import contextlib

from locus_sklearn import _training

FACTOR = 0.25


def predictor_groups(lr, factor=FACTOR):
    """skorch's ``optimizer__param_groups`` for a predictor at ``factor * lr``."""
    return [("predictor.*", {"lr": lr * factor})]


@contextlib.contextmanager
def slow_predictor_training(factor=FACTOR):
    """Within the block, nets train their predictor at ``factor`` times the lr."""
    build_net = _training.build_net

    def built(params, *args, **kwargs):
        net = build_net(params, *args, **kwargs)
        return net.set_params(
            optimizer__param_groups=predictor_groups(params["lr"], factor)
        )

    _training.build_net = built
    try:
        yield
    finally:
        _training.build_net = build_net
