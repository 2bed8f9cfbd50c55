"""The served router: loaded from one configured file, validated, swapped whole.

Requests read ``holder.current`` once and use that snapshot to the end, so a
reload (a new :class:`RouterState` assigned in one step) never mixes two
routers in one answer and never drops a request in flight.
"""

import asyncio
import datetime
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["RouterHolder", "RouterState"]


@dataclass(frozen=True)
class RouterState:
    """One loaded router and what the service derives from it."""

    router: object
    version: int
    loaded_at: str
    file_stamp: tuple
    fallback: dict  # pool model -> other pool models, nearest first

    @property
    def classes(self):
        return self.router.classes_

    def describe(self):
        return {
            "version": self.version,
            "loaded_at": self.loaded_at,
            "n_models": len(self.classes),
            "cost_weight": float(self.router.cost_weight),
            "has_costs": self.router.model_costs_ is not None,
        }


def _stamp(path):
    stat = os.stat(path)
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


class RouterHolder:
    """Loads the configured router file and keeps the current state.

    Parameters
    ----------
    path : str or path-like
        The router file (:meth:`LocusRouter.save`); the only file ever loaded.
    encoder, device
        Passed to :meth:`LocusRouter.load`.
    gateway : GatewayConfig or None
        A new router must keep at least one model with a backend.
    encoder_backend : {"torch", "onnx"}, default="torch"
        The ``backend`` of each loaded router's query encoder
        (:class:`~locus_sklearn.QueryEncoder`); set on every load.
    """

    def __init__(
        self, path, *, encoder=None, device=None, gateway=None, encoder_backend="torch"
    ):
        self.path = Path(path).resolve()
        self._encoder = encoder
        self._device = device
        self._encoder_backend = encoder_backend
        self._gateway = gateway
        self._lock = asyncio.Lock()
        self.last_error = None
        self.current = self._load(version=1)
        self._seen = self.current.file_stamp

    def _load(self, version):
        from .._router import LocusRouter
        from ..inspection import fallback_order

        stamp = _stamp(self.path)
        # Load from a private copy: safetensors maps the file into memory, so
        # a file later overwritten in place (cp, not an atomic save) would
        # pull the weights from under the served router and crash the
        # process. The copy is unlinked at once; its mapping stays valid.
        data = self.path.read_bytes()
        with tempfile.TemporaryDirectory(prefix="locus-serve-") as folder:
            private = Path(folder) / "router.safetensors"
            private.write_bytes(data)
            router = LocusRouter.load(
                private, encoder=self._encoder, device=self._device
            )
        if len(router.classes_) == 0:
            raise ValueError(f"{str(self.path)!r} holds an empty pool.")
        if self._encoder_backend != router.encoder_.backend:
            # A deployment choice, not saved in the file (like the device).
            router.encoder_.set_params(backend=self._encoder_backend).fit()
        if self._gateway is not None:
            served = [m for m in self._gateway.backends if m in set(router.classes_)]
            if not served:
                raise ValueError(
                    f"None of the router's {len(router.classes_)} models has a "
                    "backend in the gateway configuration "
                    f"({sorted(self._gateway.backends)})."
                )
        # Fail here, not on the first request: the encoder (an ONNX export
        # included) and the predictor must run.
        memory = getattr(router, "pool_evals_", None)
        if memory is not None and len(memory[1].queries):
            proba = router.predict_proba(memory[1].queries[:1])
            if proba.shape != (1, len(router.classes_)) or not np.isfinite(proba).all():
                raise ValueError(f"{str(self.path)!r} gives invalid probabilities.")
        metric = "cosine" if self._gateway is None else self._gateway.fallback.metric
        if len(router.classes_) > 1:
            order = fallback_order(router, metric=metric)
            fallback = {m: list(order.loc[m]) for m in order.index}
        else:
            fallback = {router.classes_[0]: []}
        return RouterState(
            router=router,
            version=version,
            loaded_at=datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
            file_stamp=stamp,
            fallback=fallback,
        )

    def changed(self):
        """Whether the file changed since the last load or failed attempt.

        For the watcher: a bad file is tried once, not at every check.
        """
        try:
            return _stamp(self.path) != self._seen
        except OSError:
            return False

    async def reload(self):
        """Load the file again and swap it in; on failure keep the old router.

        Returns
        -------
        old, new : RouterState

        Raises
        ------
        Exception
            Whatever loading raised; the old router keeps serving.
        """
        async with self._lock:
            old = self.current
            loop = asyncio.get_running_loop()
            try:
                self._seen = _stamp(self.path)
                new = await loop.run_in_executor(None, self._load, old.version + 1)
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                raise
            self.current = new
            self.last_error = None
            return old, new
