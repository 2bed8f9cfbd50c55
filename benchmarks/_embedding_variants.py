"""Benchmark-only prototypes of LOCUS training changes against embedding collapse.

Nothing here is part of the package: :class:`VariantEmbedder` subclasses
:class:`locus_sklearn.LocusEmbedder` and swaps in :class:`VariantNetwork`
(a :class:`~locus_sklearn._nn.LocusNetwork` subclass), a collator that keeps
each episode's model id, and a skorch net whose loss adds the auxiliary terms.
Every option defaults to today's behaviour, so ``VariantEmbedder()`` trains
exactly what ``LocusEmbedder()`` trains.

Options (one thing at a time in ``benchmarks/embedding_quality.py``):

- ``strength``: the last coordinate of z is not learned but set to the logit
  of the model's smoothed mean score on its encoder set, ``s = logit((Σy + 1)
  / (n + 2))``; the predictor adds ``s * (1 + a(u))`` (a linear in the query
  projection u, zero at initialisation) to its logit and reads only the other
  d - 1 coordinates (the *profile*) in its MLP. Overall strength then has a
  dedicated, explicit coordinate, and the profile is free to carry the rest.
- ``identity`` (weight λ_id, temperature τ): each training episode's encoder
  set is split at random into two disjoint halves A and B, both are embedded,
  both predict S_dec (the BCE is averaged), and an InfoNCE loss over the batch
  makes z_A closest (cosine of the profile) to z_B of the same model against
  every other model in the batch (same-model pairs are not negatives).
- ``vicreg`` (weight λ_vc): variance (hinge at std 1 per profile dimension,
  across the batch's models) and covariance (squared off-diagonal
  correlations) penalties on the profile.
"""

import numpy as np
import torch
from skorch import NeuralNet
from torch import nn
from torch.nn import functional as F

from locus_sklearn import LocusEmbedder
from locus_sklearn._nn import (
    CorrectnessPredictor,
    LocusNetwork,
    MaskedBCEWithLogitsLoss,
)
from locus_sklearn._training import EpisodeCollator, collate_episodes

__all__ = ["VariantEmbedder", "VariantNetwork"]


def _strength(score, mask):
    """logit of the Laplace-smoothed mean score of each set, shape (B,)."""
    m = mask.to(score.dtype)
    total = (score * m).sum(-1)
    n = m.sum(-1)
    p = (total + 1) / (n + 2)
    return torch.log(p) - torch.log1p(-p)


class StrengthPredictor(CorrectnessPredictor):
    """G_ψ reading the profile z[:, :-1] in its MLP and the strength z[:, -1]
    as a logit offset ``s * (1 + a(u))``."""

    def __init__(self, n_features, embedding_dim, hidden_dim=64, dropout=0.0, n_extra=0):
        super().__init__(n_features, embedding_dim - 1, hidden_dim, dropout, n_extra)
        self.slope = nn.Linear(n_features, 1)
        nn.init.zeros_(self.slope.weight)
        nn.init.zeros_(self.slope.bias)

    def forward(self, z, features, query_index, extra=None):
        base = super().forward(z[:, :-1], features, query_index, extra)
        slope = 1 + self.slope(features).squeeze(-1)[query_index]
        return base + z[:, -1:] * slope

    def pairwise_logits(self, z, features, extra=None, query_chunk=1024):
        base = super().pairwise_logits(z[:, :-1], features, extra, query_chunk)
        slope = 1 + self.slope(features)  # (Q, 1)
        return base + slope * z[:, -1].unsqueeze(0)


class _StrengthEncoder(nn.Module):
    """Wraps a LocusEncoder: last coordinate of z := the set's strength."""

    def __init__(self, encoder):
        super().__init__()
        self.inner = encoder
        self.seed = encoder.seed  # ValidRoutingAccuracy reads seed.shape[-1]

    def forward(self, features, query_index, score, mask):
        z = self.inner(features, query_index, score, mask)
        return torch.cat([z[:, :-1], _strength(score, mask).unsqueeze(-1)], dim=-1)


class VariantNetwork(LocusNetwork):
    """LocusNetwork with the options of this module (see its docstring)."""

    def __init__(
        self,
        n_features,
        embedding_dim=128,
        n_latents=64,
        n_blocks=2,
        n_heads=4,
        hidden_dim=64,
        dropout=0.0,
        query_noise=0.0,
        kernel_readout=False,
        strength=False,
        identity_weight=0.0,
        identity_temperature=0.1,
        vicreg_weight=0.0,
    ):
        super().__init__(
            n_features, embedding_dim, n_latents, n_blocks, n_heads, hidden_dim,
            dropout, query_noise, kernel_readout,
        )  # fmt: skip
        self.strength = strength
        if strength:
            self.encoder = _StrengthEncoder(self.encoder)
            n_extra = self.predictor.extra.in_features if self.predictor.extra else 0
            self.predictor = StrengthPredictor(
                n_features, embedding_dim, hidden_dim, dropout, n_extra
            )
        self.identity_weight = identity_weight
        self.identity_temperature = identity_temperature
        self.vicreg_weight = vicreg_weight
        self.aux_loss_ = None
        self.second_logits_ = None

    def _profile(self, z):
        return z[:, :-1] if self.strength else z

    def _predict(self, z, features, enc_index, enc_score, enc_mask, dec_index):
        extra = None
        if self.readout is not None:
            extra = self.readout(
                features[dec_index], features[enc_index], enc_score, enc_mask
            )
        return self.predictor(z, features, dec_index, extra)

    def forward(
        self, enc_index, enc_score, enc_mask, dec_index, features=None, model_id=None
    ):
        features, enc_index, dec_index = self._gather(enc_index, dec_index, features)
        if self.training and self.query_noise > 0:
            features = features + self.query_noise * torch.randn_like(features)
        self.aux_loss_ = None
        self.second_logits_ = None
        split = self.training and self.identity_weight > 0
        if not split:
            z = self.encoder(features, enc_index, enc_score, enc_mask)
            logits = self._predict(z, features, enc_index, enc_score, enc_mask, dec_index)
            aux = self._vicreg(z) if self.training else None
            self.aux_loss_ = aux
            return logits
        # Two disjoint halves of every encoder set: even and odd positions
        # (each episode's rows arrive in a random order).
        even = torch.arange(enc_mask.shape[1], device=enc_mask.device) % 2 == 0
        half = enc_mask & even
        other = enc_mask & ~even
        z_a = self.encoder(features, enc_index, enc_score, half)
        z_b = self.encoder(features, enc_index, enc_score, other)
        logits = self._predict(z_a, features, enc_index, enc_score, half, dec_index)
        self.second_logits_ = self._predict(
            z_b, features, enc_index, enc_score, other, dec_index
        )
        pa = F.normalize(self._profile(z_a), dim=-1)
        pb = F.normalize(self._profile(z_b), dim=-1)
        sim = pa @ pb.T / self.identity_temperature
        if model_id is not None:
            same = model_id.unsqueeze(0) == model_id.unsqueeze(1)
            eye = torch.eye(len(sim), dtype=torch.bool, device=sim.device)
            sim = sim.masked_fill(same & ~eye, float("-inf"))
        target = torch.arange(len(sim), device=sim.device)
        nce = 0.5 * (F.cross_entropy(sim, target) + F.cross_entropy(sim.T, target))
        aux = self.identity_weight * nce
        vc = self._vicreg(torch.cat([z_a, z_b]))
        self.aux_loss_ = aux if vc is None else aux + vc
        return logits

    def _vicreg(self, z):
        if self.vicreg_weight <= 0 or len(z) < 3:
            return None
        p = self._profile(z)
        p = p - p.mean(0)
        std = torch.sqrt(p.var(0) + 1e-4)
        var_loss = F.relu(1 - std).mean()
        corr = (p / std).T @ (p / std) / (len(p) - 1)
        off = corr - torch.diag(torch.diag(corr))
        cov_loss = (off**2).sum() / p.shape[1]
        return self.vicreg_weight * (var_loss + cov_loss)


class _AuxNet(NeuralNet):
    """skorch net whose training loss adds the module's auxiliary terms."""

    def get_loss(self, y_pred, y_true, X=None, training=False):
        loss = super().get_loss(y_pred, y_true, X=X, training=training)
        module = self.module_
        if training and module.second_logits_ is not None:
            second = super().get_loss(
                module.second_logits_, y_true, X=X, training=training
            )
            loss = 0.5 * (loss + second)
        if training and module.aux_loss_ is not None:
            loss = loss + module.aux_loss_
        return loss


class _IdCollator(EpisodeCollator):
    """EpisodeCollator that also passes each episode's model id."""

    def __call__(self, batch):
        X, y = super().__call__(batch)
        X["model_id"] = torch.as_tensor([int(m) for _, m in batch])
        return X, y


class VariantEmbedder(LocusEmbedder):
    """LocusEmbedder training a :class:`VariantNetwork` (prototype).

    ``variant`` is a dict of VariantNetwork options (``strength``,
    ``identity_weight``, ``identity_temperature``, ``vicreg_weight``).
    """

    def __init__(self, encoder=None, *, variant=None, **params):
        super().__init__(encoder, **params)
        self.variant = variant

    # sklearn's get_params reads __init__'s signature: list the inherited ones.
    @classmethod
    def _get_param_names(cls):
        return sorted(set(LocusEmbedder._get_param_names()) | {"variant"})

    _parameter_constraints = {
        **LocusEmbedder._parameter_constraints,
        "variant": [dict, None],
    }

    def _build_net(self, n_features, valid_dataset=None, callbacks=()):
        from skorch.helper import predefined_split

        from locus_sklearn._embedder import _resolve_device

        options = {f"module__{k}": v for k, v in (self.variant or {}).items()}
        return _AuxNet(
            module=VariantNetwork,
            module__n_features=n_features,
            module__embedding_dim=self.embedding_dim,
            module__n_latents=self.n_latents,
            module__n_blocks=self.n_blocks,
            module__n_heads=self.n_heads,
            module__hidden_dim=self.hidden_dim,
            module__dropout=self.dropout,
            module__query_noise=self.query_noise,
            module__kernel_readout=self.kernel_readout,
            **options,
            criterion=MaskedBCEWithLogitsLoss,
            optimizer=torch.optim.AdamW,
            optimizer__weight_decay=self.weight_decay,
            lr=self.lr,
            max_epochs=self.max_epochs,
            batch_size=self.batch_size,
            iterator_train__shuffle=True,
            iterator_train__collate_fn=_IdCollator(
                self.enc_size, self.dec_size, self.disjoint
            ),
            iterator_valid__collate_fn=collate_episodes,
            train_split=predefined_split(valid_dataset) if valid_dataset else None,
            callbacks=list(callbacks),
            device=_resolve_device(self.device),
            verbose=self.verbose,
        )


def shrink_to_strength(proba, strength_proba, alpha):
    """Blend per-query P(correct) with each model's overall P: (Q, M)."""
    return (1 - alpha) * proba + alpha * np.asarray(strength_proba)[None, :]
