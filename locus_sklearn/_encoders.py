"""Query encoders (temporary minimal version: mappings and objects with encode).

The full version (default MiniLM, SentenceTransformer paths, memory caching) is
being written; it keeps this contract:

- ``QueryEncoder(encoder=None, *, memory=None, batch_size=64, device=None,
  show_progress_bar=False)``: ``fit(X=None)`` then ``transform(queries)`` ->
  float32 ndarray (n_queries, dim), L2-normalised rows.
- ``as_query_encoder(encoder, memory=None, device=None)`` -> a fitted QueryEncoder.
"""

from collections.abc import Mapping

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, clone


class QueryEncoder(TransformerMixin, BaseEstimator):
    def __init__(self, encoder=None, *, memory=None, batch_size=64, device=None,
                 show_progress_bar=False):
        self.encoder = encoder
        self.memory = memory
        self.batch_size = batch_size
        self.device = device
        self.show_progress_bar = show_progress_bar

    def fit(self, X=None, y=None):
        return self

    def transform(self, X):
        queries = list(X)
        uniq, inverse = np.unique(np.asarray(queries, dtype=object).astype(str),
                                  return_inverse=True)
        if isinstance(self.encoder, Mapping):
            missing = [q for q in uniq if q not in self.encoder]
            if missing:
                raise ValueError(f"{len(missing)} unknown query ids: {missing[:5]}")
            vecs = np.stack([np.asarray(self.encoder[q], dtype=np.float32) for q in uniq])
        else:
            vecs = np.asarray(self.encoder.encode(list(uniq)), dtype=np.float32)
        vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        return vecs[inverse].astype(np.float32)


def as_query_encoder(encoder, memory=None, device=None):
    if isinstance(encoder, QueryEncoder):
        return clone(encoder).fit()
    return QueryEncoder(encoder, memory=memory, device=device).fit()
