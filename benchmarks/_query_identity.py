"""A training prototype for embedding_quality.py: a learned identity vector per
training query, beside its encoding.

Sessions 18-23 located what finds Shaberi's siblings and what separates
models on RouterBench and BFCL better than LOCUS's z: agreement on *which*
queries a model gets right, beyond what the MiniLM encodings of those queries
show (raw score vectors 0.36 recall@1 against z's 0.10; a 12-cluster table
identifies models better than z). LOCUS reads a query only through its
encoding, so two queries with near encodings are one query to it, and the
correctness loss can only reward what generalises across encodings. Matrix
factorisation reads query identity instead. Here, one thing changes against
the package's training: every training query ``q`` gets a learned vector
``e_q`` in the encoding space (F), zero at the start and trained with the
other parameters (the same AdamW, learning rate and weight decay), and the
network reads ``φ(q) + e_q`` wherever it reads a training query's encoding:
the encoder's tokens, the predictor's decoder queries and the kernel
readout's similarities. The decoder side is what rewards z for carrying
query-level patterns (the predictor can only use them through z); the encoder
side is what lets z read them.

New queries have no vector (``e = 0``): a router must still predict them, and
a model may be embedded from rows of unseen queries. So in training each of a
batch's unique queries keeps its vector with probability 1/2 (one draw per
query per batch, shared by every episode and both sides), and the network
learns to work with and without. Validation (held-out queries: no vector,
their encoder rows with theirs), ``transform`` (each model's rows: the
training queries' vectors) and prediction of the test queries (unseen: no
vector; the kernel readout's stored rows there read their plain encodings, a
combination training also sees) read what inference reads.

Settings fixed before any run (not tuned): zero initialisation, keep
probability 1/2, the vectors in the 384-d encoding space (so that the
tokenizer's, predictor's and readout's existing projections read them).
"""

import contextlib

import numpy as np
import torch
from _loss_terms import patched
from torch import nn

from locus_sklearn import _embedder, _nn, _training

KEEP = 0.5


def _identity_vectors(module, queries, X_query):
    """``X_query`` (encodings of ``queries``) plus the fitted vectors of those
    of ``queries`` that were training queries of ``module``."""
    known = getattr(module, "query_identity_queries_", None)
    if known is None:
        return X_query
    position = np.searchsorted(known, queries)
    position = np.minimum(position, len(known) - 1)
    hit = known[position] == queries
    vectors = module.query_identity.detach().cpu().numpy()
    out = np.array(X_query, dtype=np.float32, copy=True)
    out[hit] += vectors[position[hit]]
    return out


@contextlib.contextmanager
def query_identity_training(keep=KEEP):
    """Within the block, a LocusEmbedder's fit learns query-identity vectors,
    and its ``transform`` (also after the block) reads them."""
    init = _nn.LocusNetwork.__init__
    forward = _nn.LocusNetwork.forward
    inputs = _training.LocusNet._inputs
    fit_encoded = _embedder.LocusEmbedder._fit_encoded
    n_queries = {}

    def init_with_vectors(self, n_features, *args, **kwargs):
        init(self, n_features, *args, **kwargs)
        self.query_identity = nn.Parameter(torch.zeros(n_queries["n"], n_features))

    def inputs_with_ids(self, x):
        out = inputs(self, x)
        x = {k: torch.as_tensor(v, device=self.device) for k, v in x.items()}
        # gather_queries' own unique queries, in its order: their bank rows.
        out["query_ids"] = torch.unique(
            torch.cat([x["enc_index"].reshape(-1), x["dec_index"].reshape(-1)])
        )
        return out

    def forward_with_ids(self, features, *args, query_ids=None, **kwargs):
        if query_ids is not None:
            vectors = self.query_identity[query_ids]
            if self.training:
                kept = torch.rand(len(vectors), 1, device=vectors.device) < keep
                vectors = vectors * kept.to(vectors.dtype)
            features = features + vectors
        return forward(self, features, *args, **kwargs)

    def fit_encoded_with_vectors(self, table, X_query, encoder, **kwargs):
        n_queries["n"] = table.n_queries
        out = fit_encoded(self, table, X_query, encoder, **kwargs)
        self.net_.module_.query_identity_queries_ = np.asarray(table.queries)
        return out

    with patched(
        (_nn.LocusNetwork, "__init__", init_with_vectors),
        (_nn.LocusNetwork, "forward", forward_with_ids),
        (_training.LocusNet, "_inputs", inputs_with_ids),
        (_embedder.LocusEmbedder, "_fit_encoded", fit_encoded_with_vectors),
    ):
        yield


_transform_encoded = _embedder.LocusEmbedder._transform_encoded


def _transform_with_vectors(self, table, X_query):
    X_query = _identity_vectors(self.net_.module_, np.asarray(table.queries), X_query)
    return _transform_encoded(self, table, X_query)


# Installed on import and left installed: a router fitted in the block embeds
# its models (at fit, and on every later ``embed``) with the vectors; a module
# without them is unaffected.
_embedder.LocusEmbedder._transform_encoded = _transform_with_vectors
