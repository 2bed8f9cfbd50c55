"""Pools that outgrow one DataFrame: chunked reading, parallel embedding and scoring.

- :func:`iter_model_chunks`: read evaluations (a DataFrame, a Parquet file or
  folder, a ``pyarrow.dataset.Dataset`` or a stream of DataFrames) in chunks
  that each hold whole models.
- :func:`transform_chunked`: ``LocusEmbedder.transform`` chunk by chunk, with
  bounded memory, in joblib workers.
- :func:`predict_proba_chunked`, :func:`predict_chunked`: score or route many
  queries chunk by chunk in joblib workers.

Workers run on joblib's default backend (loky: local processes); ``with
joblib.parallel_config(backend="dask"):`` or ``backend="ray"`` runs them on a
cluster once the backend is registered (see the user guide, "Large pools").
"""

from ._chunked import predict_chunked, predict_proba_chunked, transform_chunked
from ._sources import iter_model_chunks

__all__ = [
    "iter_model_chunks",
    "predict_chunked",
    "predict_proba_chunked",
    "transform_chunked",
]
