"""Peer routers with the router API of :class:`~locus_sklearn.LocusRouter`.

- :class:`SingleBestRouter`: always the model with the best mean score.
- :class:`KNNRouter`: each model's mean score on its nearest training queries.
- :class:`KMeansRouter`: each model's mean score on the query's cluster.
- :class:`MatrixFactorizationRouter`: EmbedLLM's matrix factorisation.
- :class:`IRTRouter`: item response theory with a neural item model.
"""

from ._clustering import KMeansRouter
from ._irt import IRTRouter
from ._matrix_factorization import MatrixFactorizationRouter
from ._neighbors import KNNRouter
from ._single_best import SingleBestRouter

__all__ = [
    "IRTRouter",
    "KMeansRouter",
    "KNNRouter",
    "MatrixFactorizationRouter",
    "SingleBestRouter",
]
