"""skorch plumbing shared by the neural peer routers (MF and IRT).

The seam between the torch modules of :mod:`._nn` and the routers: a dataset
of (model, query, score) rows that fetches whole batches at once, a
validation split by query, and :class:`_NetRouter`, which trains a module
with BCE on scores in [0, 1] and predicts every (query, model) pair at once.
"""

import inspect
import os
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Interval
from skorch import NeuralNet
from skorch.helper import predefined_split
from torch import nn

from .._base import BaseRouter
from .._device import resolve_device
from .._training import (
    DivergenceCheck,
    MarkedEarlyStopping,
    finished_epochs,
    full_precision,
    held_out_rows,
    progress_params,
    python_scalar,
    raised_settings,
    seeded_rng,
    trainable_torch,
)
from .._warnings import warn_external

# Query batch size of predict_proba; bounds memory at (chunk, n_models) floats.
_PREDICT_CHUNK = 8192

_FLOAT32_MAX = float(np.finfo(np.float32).max)
# The first moment decay of the Adam the nets train with (torch's default).
_ADAM_BETA1 = inspect.signature(torch.optim.Adam).parameters["betas"].default[0]


class _RowDataset(torch.utils.data.Dataset):
    """Rows (model index, query encoding, score), fetched a batch at a time.

    Holds each query encoding once (shape (n_queries, n_features)) and
    gathers rows per batch, so memory does not grow with the number of
    models evaluated on a query. ``__getitems__`` makes ``DataLoader`` fetch a
    whole batch with one gather instead of one Python call per row.
    """

    def __init__(self, X_query, model_index, query_index, score):
        self.X_query = torch.as_tensor(X_query, dtype=torch.float32)
        self.model_index = torch.as_tensor(model_index, dtype=torch.int64)
        self.query_index = torch.as_tensor(query_index, dtype=torch.int64)
        self.score = torch.as_tensor(score, dtype=torch.float32)

    def __len__(self):
        return len(self.score)

    def __getitems__(self, rows):
        rows = torch.as_tensor(rows, dtype=torch.int64)
        X = {
            "model_index": self.model_index[rows],
            "query": self.X_query[self.query_index[rows]],
        }
        return X, self.score[rows]

    def __getitem__(self, row):
        X, y = self.__getitems__([row])
        return {key: value[0] for key, value in X.items()}, y[0]

    def subset(self, rows):
        return _RowDataset(
            self.X_query,
            self.model_index[rows],
            self.query_index[rows],
            self.score[rows],
        )


def _batch_as_is(batch):
    """collate_fn for batches that ``_RowDataset.__getitems__`` already built."""
    return batch


def _split_by_query(table, fraction, seed):
    """Hold out a fraction of the queries (all their rows) for early stopping.

    Splitting by query makes early stopping measure what routing needs:
    predictions on queries the net has not seen. A model keeps at least one
    training row: held-out rows that would leave it none stay in training
    (its embedding would otherwise never be trained).

    Returns
    -------
    is_valid : ndarray of bool, shape (n_rows,)
    """
    n_valid = max(1, round(fraction * table.n_queries))
    if n_valid >= table.n_queries:
        raise ValueError(
            f"validation_fraction={fraction} holds out {n_valid} of the "
            f"{table.n_queries} queries, leaving none to train on; give a "
            f"fraction under {(table.n_queries - 0.5) / table.n_queries:.3g} "
            "or set validation_fraction=None."
        )
    held_out = np.zeros(table.n_queries, dtype=bool)
    rng = np.random.default_rng(seed)
    held_out[rng.choice(table.n_queries, n_valid, replace=False)] = True
    return held_out_rows(table, held_out, min_train_rows=1)


class _NetRouter(BaseRouter):
    """A router that trains a torch module of :mod:`._nn` with skorch.

    Subclasses set ``_module`` (the module class) and implement
    ``_module_params(table, X_query)`` returning the module's keyword
    arguments other than ``n_models`` and ``n_features``. The fitted skorch
    ``NeuralNet`` is ``net_``; its module is trained with Adam on
    ``BCEWithLogitsLoss`` (fractional scores are soft targets), with early
    stopping on the loss over a held-out fraction of the queries.
    """

    _parameter_constraints = {
        **BaseRouter._parameter_constraints,
        "encoder": "no_validation",
        "memory": [None, str, os.PathLike, HasMethods(["cache"])],
        "max_epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "validation_fraction": [None, Interval(Real, 0, 1, closed="neither")],
        "patience": [Interval(Integral, 1, None, closed="left")],
        "device": [None, str, torch.device],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    # Settings that scale a training step: raised past their defaults, they can
    # make it diverge (DivergenceCheck names them).
    _loss_scales = ("weight_decay",)

    def _validate_params(self):
        super()._validate_params()
        # Adam applies its step size lr / (1 - beta1 ** t), largest at the
        # first step, and weight_decay to the float32 weights as float32
        # scalars: past float32's range torch fails inside the optimizer, in
        # a message that names neither.
        first_step = float(self.lr) / (1 - _ADAM_BETA1)
        if first_step > _FLOAT32_MAX:
            raise ValueError(
                f"lr={float(self.lr):g} is too large: Adam's first step "
                f"scales the update by lr / (1 - beta1) = {first_step:g} (beta1="
                f"{_ADAM_BETA1}), past float32's largest value (about "
                f"{_FLOAT32_MAX:.2g}); give lr at most "
                f"{_FLOAT32_MAX * (1 - _ADAM_BETA1):.2g}."
            )
        if float(self.weight_decay) > _FLOAT32_MAX:
            raise ValueError(
                f"weight_decay={float(self.weight_decay):g} is too large: "
                "Adam adds weight_decay times the float32 weights to their "
                "gradients, and it is past float32's largest value (about "
                f"{_FLOAT32_MAX:.2g}); give weight_decay at most {_FLOAT32_MAX:.2g}."
            )

    def _fit_encoded(self, table, X_query, encoder, model_costs=None):
        if self.validation_fraction is not None and table.n_queries < 2:
            raise ValueError(
                f"validation_fraction={self.validation_fraction} needs at least 2 "
                f"distinct queries to hold some out; evals has n_queries="
                f"{table.n_queries}. Set validation_fraction=None."
            )
        device = resolve_device(self.device)
        seed = int(
            check_random_state(self.random_state).randint(np.iinfo(np.int32).max)
        )
        dataset = _RowDataset(
            X_query, table.model_index, table.query_index, table.score
        )
        name = type(self).__name__
        raised = raised_settings(
            type(self), self.get_params(deep=False), self._loss_scales
        )
        remedy = " or ".join(raised) or None
        callbacks = [("divergence", DivergenceCheck(name, remedy=remedy))]
        train_split = None
        if self.validation_fraction is not None:
            is_valid = _split_by_query(table, self.validation_fraction, seed)
            if is_valid.any():
                valid = dataset.subset(np.flatnonzero(is_valid))
                train_split = predefined_split(valid)
                dataset = dataset.subset(np.flatnonzero(~is_valid))
                # Its messages go with the epoch table, to standard error
                # (skorch's EarlyStopping printed them to standard output).
                stopper = MarkedEarlyStopping(
                    patience=python_scalar(self.patience), load_best=True
                )
                callbacks.append(("early_stopping", stopper))
            else:
                warn_external(
                    f"validation_fraction={self.validation_fraction} holds out no "
                    "evaluations: the held-out queries' rows were their models' "
                    "only ones, and each model keeps one training row. Training "
                    f"runs without early stopping, for max_epochs={self.max_epochs} "
                    "epochs. Set validation_fraction=None to do so knowingly.",
                    UserWarning,
                )
        module_params = {
            f"module__{key}": python_scalar(value)
            for key, value in self._module_params(table, X_query).items()
        }
        net = NeuralNet(
            module=self._module,
            module__n_models=table.n_models,
            module__n_features=X_query.shape[1],
            **module_params,
            criterion=nn.BCEWithLogitsLoss,
            optimizer=torch.optim.Adam,
            # As floats: an int that passed the Real constraints (10**30)
            # overflows torch's int64 conversion.
            lr=float(self.lr),
            optimizer__weight_decay=float(self.weight_decay),
            max_epochs=python_scalar(self.max_epochs),
            batch_size=python_scalar(self.batch_size),
            iterator_train__shuffle=True,
            iterator_train__collate_fn=_batch_as_is,
            iterator_valid__collate_fn=_batch_as_is,
            train_split=train_split,
            callbacks=callbacks,
            device=device,
            verbose=self.verbose,
            **progress_params(self.verbose),
        )
        # Seed module initialisation, shuffling and noise without touching the
        # caller's global torch RNG; train with gradients and in float32
        # whatever the caller's context (see trainable_torch).
        with seeded_rng(seed, device), trainable_torch(device):
            net.fit(dataset, None)
        net.module_.eval()
        self.net_ = net
        self.n_epochs_ = finished_epochs(net)

    def _predict_proba_encoded(self, X):
        module = self.net_.module_
        module.eval()
        # The fitted pool's columns, not classes_ (see BaseRouter.remove_models).
        n_models = self.net_.module__n_models
        proba = np.empty((len(X), n_models), dtype=np.float64)
        device = torch.device(self.net_.device)
        # float32 whatever a caller's autocast says: under it the logits were
        # bfloat16; IRT's could not go to NumPy, MF's probabilities moved by
        # about 5e-4.
        with torch.no_grad(), full_precision(device.type):
            for start in range(0, len(X), _PREDICT_CHUNK):
                chunk = torch.as_tensor(
                    X[start : start + _PREDICT_CHUNK],
                    dtype=torch.float32,
                    device=device,
                )
                logits = module.pairwise_logits(chunk)
                proba[start : start + len(chunk)] = torch.sigmoid(logits).cpu().numpy()
        return proba
