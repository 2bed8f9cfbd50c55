"""The embeddings' spread along one training run, epoch by epoch.

Early stopping restores the epoch of lowest validation loss, and on the
benchmark's small real pools that epoch comes early (``stopping_rules.py``:
epochs 1-26 at 256 rows, most by the seventh). Is the embedding's collapse
onto overall strength a property of those early weights? Per pool and seed
this fits the package defaults without early stopping for ``--epochs``
epochs on the routing benchmark's 256 training rows per model, keeps every
epoch's weights (``stopping_rules.keeping_weights``), and at each epoch of
``EPOCHS`` embeds every model from its rows and records the validation loss
and ``embedding_quality.geometry``: participation ratio, share of the first
principal component, its |correlation| with the model's mean score. The epoch
early stopping would restore (at the default patience) is recorded beside them. A
measurement: nothing is chosen from it.

Usage: python benchmarks/epoch_geometry.py --pools bfcl shaberi
       [--epochs 24] [--seeds 0 1 2] [--threads 1] [--tag T]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import embedding_quality as eq  # noqa: E402
import routing  # noqa: E402
from refine_solver import command_line  # noqa: E402
from stopping_rules import keeping_weights, stopping_point  # noqa: E402

from locus_sklearn import LocusEmbedder  # noqa: E402

#: The epochs whose weights are measured (those past ``--epochs`` are skipped).
EPOCHS = (1, 2, 4, 8, 16, 24, 32)


def _pool(name, seed):
    """(encodings, training rows): the routing benchmark's 256 per model."""
    data = eq.load_pool(name, seed)
    return data.encodings, routing.Split(data, seed).training_rows(256)


def run(pool, seed, args, log):
    encodings, train = _pool(pool, seed)
    embedder = LocusEmbedder(
        encodings, early_stopping=None, max_epochs=args.epochs, random_state=seed
    )
    with keeping_weights() as kept:
        embedder.fit(train)
    losses = [float(v) for v in embedder.net_.history[:, "valid_loss"]]
    strength = train.groupby("model")["score"].mean().sort_index().to_numpy()
    patience = LocusEmbedder().patience  # the default's
    out = {
        "valid_loss": losses,
        f"restored_at_patience_{patience}": stopping_point(losses, patience)[1],
    }
    out["epochs"] = {}
    for epoch in (e for e in EPOCHS if e <= len(losses)):
        embedder.net_.module_.load_state_dict(kept[0].states_[epoch - 1])
        spread = eq.geometry(embedder.transform(train), strength)
        out["epochs"][str(epoch)] = {"valid_loss": losses[epoch - 1], **spread}
        log(
            f"{pool} seed {seed} epoch {epoch:2d}: valid_loss {losses[epoch - 1]:.4f}"
            f"  PR {spread['participation_ratio']:.2f}  first "
            f"{spread['first_share']:.2f}  |r| {spread['abs_corr_strength']:.2f}"
        )
    return out


def _add_epochs(parser):
    parser.add_argument("--epochs", type=int, default=24, help="epochs of the run")


def main(argv=None):
    header = lambda args: {"epochs": args.epochs}  # noqa: E731
    command_line(__doc__, "epoch_geometry", run, argv, _add_epochs, header)


if __name__ == "__main__":
    main()
