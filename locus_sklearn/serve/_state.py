"""The served router: loaded from one configured file, validated, swapped whole.

Requests read ``holder.current`` once and use that snapshot to the end, so a
reload (a new :class:`RouterState` assigned in one step) never mixes two
routers in one answer and never drops a request in flight.
"""

import asyncio
import contextlib
import datetime
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["RouterHolder", "RouterState"]

logger = logging.getLogger("locus_sklearn.serve")


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

    def describe(self, default_cost_weight=None):
        """The state's summary; ``cost_weight`` is the one requests get by
        default: the gateway's ``default_cost_weight`` when it has one, else
        the router's own."""
        if default_cost_weight is None:
            default_cost_weight = self.router.cost_weight
        return {
            "version": self.version,
            "loaded_at": self.loaded_at,
            "n_models": len(self.classes),
            "cost_weight": float(default_cost_weight),
            "has_costs": self.router.model_costs_ is not None,
        }


def _stamp(path):
    """What tells a changed file: os.stat follows a symlink, so a link
    repointed to another file (``ln -sfn``) changes the identity (device,
    inode) even where the new target is older and of the same size."""
    stat = os.stat(path)
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino, stat.st_dev)


def _renamed(exc, private, path):
    """``exc`` with the private copy's name replaced by the configured file's.

    The operator knows the file they gave, not the temporary copy it was
    loaded from, so a load error must name the former.
    """
    message = str(exc)
    if str(private) not in message:
        return exc
    message = message.replace(str(private), str(path))
    try:
        renamed = type(exc)(message)
    except Exception:  # an exception type that takes other arguments
        renamed = ValueError(message)
    return renamed


@contextlib.contextmanager
def _snapshot(path):
    """A private path to the bytes of ``path``, read once; yields it.

    On Linux an anonymous in-memory file (``memfd_create``, reached by its
    ``/proc/self/fd`` name), so that no temporary folder is needed; where
    there is none, a copy in the temporary folder (``TMPDIR``), and an error
    writing it names that folder and ``path``.

    Raises
    ------
    OSError
        Naming ``path`` and the temporary folder, if the copy cannot be made
        there (too little room, no permission).
    """
    data = path.read_bytes()
    fd = None
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        try:
            fd = os.memfd_create("locus-serve-router")
        except OSError:  # refused (a seccomp policy): the folder copy below
            fd = None
    if fd is not None:
        try:
            with open(fd, "wb", closefd=False) as memory:
                memory.write(data)
        except OSError:  # no memory for it: the folder copy below
            os.close(fd)
            fd = None
    if fd is not None:
        del data  # the snapshot holds the bytes; not twice during the load
        try:
            yield Path(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    folder = tempfile.gettempdir()
    context = None
    try:
        context = tempfile.TemporaryDirectory(prefix="locus-serve-")
        private = Path(context.name) / "router.safetensors"
        private.write_bytes(data)
    except OSError as exc:
        if context is not None:
            context.cleanup()
        error = type(exc)(
            f"Cannot load {str(path)!r}: the service loads it from a private "
            f"copy in the temporary folder {folder!r} (TMPDIR), and writing "
            f"the copy ({len(data)} bytes) failed: {exc.strerror or exc}; set "
            "TMPDIR to a folder with room for the file."
        )
        error.errno = exc.errno  # kept for callers that map errors to exit codes
        raise error from None
    del data
    with context:
        yield private


def _check_gateway(router, gateway, path):
    """The gateway configuration must fit the router, or nothing is served.

    A backend of a model the pool lacks would never be called (a typo in the
    file), a default cost weight the router has no costs for would fail
    every request with an error blaming the client, and a key variable that
    is not set would send every request without its key (the backend's 401
    reaching the client as if its own key were wrong). A key that cannot be
    sent as an HTTP header value (a CR left by an env file with CRLF line
    endings, a space, a character outside ASCII) would fail every attempt,
    so it is refused naming its variable, never its value. A backend of a model
    named as the routing alias (``"locus"``) could never be requested by
    name: that name routes the request.
    """
    from .._base import _normal_form_hint
    from .._evals import _preview
    from ._gateway import ROUTER_MODEL

    if ROUTER_MODEL in gateway.backends:
        raise ValueError(
            f"The gateway configuration has a backend for the model "
            f"{ROUTER_MODEL!r}, the name a request gives to be routed "
            f"(model={ROUTER_MODEL!r}), so that model could never be requested "
            "by name; remove its backend, or fit the router with the model "
            "under another name."
        )
    pool = set(router.classes_)
    missing = [m for m in gateway.backends if m not in pool]
    # A backend named "café" as typed, for a pool model written with a
    # combining accent: the two print alike, and the hint tells them apart.
    hint = _normal_form_hint(missing, router.classes_)
    if len(missing) == len(gateway.backends):
        raise ValueError(
            f"None of the router's {len(router.classes_)} models has a backend in "
            f"the gateway configuration ({sorted(gateway.backends)})." + hint
        )
    if missing:
        raise ValueError(
            f"The gateway configuration has backends for {len(missing)} model(s) "
            f"that are not in the pool of {str(path)!r}: {_preview(missing)}; "
            f"its models are {_preview(list(router.classes_))}." + hint
        )
    unset = {}  # variable -> the backends that read their key from it
    unsendable = {}  # variable -> (what is wrong, the backends)
    for name, backend in gateway.backends.items():
        if not backend.api_key_env:
            continue
        key = os.environ.get(backend.api_key_env)
        if not key:
            unset.setdefault(backend.api_key_env, []).append(name)
        elif (problem := _unsendable(key)) is not None:
            unsendable.setdefault(backend.api_key_env, (problem, []))[1].append(name)
    if unsendable:
        listed = "; ".join(
            f"{variable} (api_key_env of backend(s) {_preview(names)}): {problem}"
            for variable, (problem, names) in unsendable.items()
        )
        raise ValueError(
            "The gateway configuration names key variable(s) whose value cannot "
            f"be sent in an HTTP header (values not shown): {listed}. A key must "
            "be visible ASCII, without spaces or control characters; set the "
            "variable again without them (a CR at the end comes from an env "
            "file with Windows CRLF line endings)."
        )
    if unset:
        listed = "; ".join(
            f"{variable} (api_key_env of backend(s) {_preview(names)})"
            for variable, names in unset.items()
        )
        raise ValueError(
            "The gateway configuration names key variable(s) that are not set "
            f"(or are empty): {listed}; set them, or remove api_key_env from a "
            "backend that takes no key."
        )
    weight = gateway.cost_weight
    if weight is not None and weight > 0:
        costs = router.model_costs_
        if costs is None:
            raise ValueError(
                f"The gateway configuration's cost_weight={weight:g} needs model "
                f"costs, but {str(path)!r} has none; set cost_weight to 0 (or "
                "leave it out) or serve a router fitted with model_costs=."
            )
        if _overflows(weight, costs):
            raise ValueError(
                f"The gateway configuration's cost_weight={weight:g} is too "
                f"large for the costs of {str(path)!r}: cost_weight * cost "
                "overflows."
            )


def _unsendable(key, *, as_bytes=False):
    """What keeps ``key`` from being sent as ``Authorization: Bearer
    <key>``, without showing it (its first such character, by kind and
    position), or None. Visible ASCII only: h11 refuses a CR, LF or NUL (and
    its error message holds the whole value), HTTP strips a space at either
    end, and httpx cannot encode a character outside ASCII.

    ``as_bytes``: the value is sent by a client that takes bytes (the admin
    token, with curl), so what RFC 9110 allows in a field value is kept too:
    a character outside ASCII (its UTF-8 bytes, obs-text) and a space or tab
    between two others. Control characters and a space or tab at either end
    are still refused."""
    for i, char in enumerate(key):
        if "!" <= char <= "~":
            continue
        if as_bytes and (char > "\x7f" or (char in " \t" and 0 < i < len(key) - 1)):
            continue
        if char == "\r":
            kind = "a carriage return (CR)"
        elif char == "\n":
            kind = "a line feed (LF)"
        elif char in " \t":
            kind = "a space or tab"
        elif char < " " or char == "\x7f":
            kind = "a control character"
        else:
            kind = "a character outside ASCII"
        where = "at its end" if i == len(key) - 1 else f"at position {i + 1}"
        return f"{kind} {where} (of {len(key)} characters)"
    return None


def _overflows(weight, costs):
    """Whether ``weight * cost`` is beyond the float range for some cost."""
    with np.errstate(over="ignore"):
        return not np.isfinite(weight * np.asarray(costs, dtype=np.float64)).all()


def _check_own_cost_weight(router, path):
    """The router's own cost weight, the default of requests, must not
    overflow with its costs: every request without a cost_weight of its own
    would be refused, the message blaming the client."""
    weight = router.cost_weight
    costs = router.model_costs_
    if weight > 0 and costs is not None and _overflows(weight, costs):
        raise ValueError(
            f"{str(path)!r} has cost_weight={weight:g}, too large for its "
            "costs: cost_weight * cost overflows, so every request "
            "without a cost_weight of its own would be refused; save "
            "the router with a smaller cost_weight, or set cost_weight "
            "in the gateway configuration."
        )


class RouterHolder:
    """Loads the configured router file and keeps the current state.

    Parameters
    ----------
    path : str or path-like
        The router file (:meth:`LocusRouter.save`); the only file ever loaded.
        A leading ``~`` is expanded. Made absolute once (a later change of
        the working directory does not move it); a symlink is followed at
        every load, so a reload loads the file it points to then.
    encoder, device
        Passed to :meth:`LocusRouter.load`; a mapping of precomputed
        encodings is added to those saved in the file (its vectors win).
    gateway : GatewayConfig or None
        Every backend must name a model of the router's pool other than
        ``"locus"`` (the name that routes a request), each
        ``api_key_env`` a variable that is set to a key that can be sent in
        an HTTP header (visible ASCII), and a default
        ``cost_weight`` > 0 needs a router with costs. Without a default
        ``cost_weight`` there, the router's own is the default, and one that
        overflows with its costs (``cost_weight * cost`` beyond the float
        range) is refused.
    encoder_backend : {"torch", "onnx"}, default="torch"
        The ``backend`` of each loaded router's query encoder
        (:class:`~locus_sklearn.QueryEncoder`); set on every load.
    """

    def __init__(
        self, path, *, encoder=None, device=None, gateway=None, encoder_backend="torch"
    ):
        # Absolute, not resolved: a symlink (a Kubernetes ConfigMap or
        # Secret, ``ln -sfn v2 current``) is followed at every check and
        # load, so a reload loads what it names now, not its first target.
        # ``~`` expanded, as every path argument of the package.
        self.path = Path(os.path.expanduser(os.fspath(path))).absolute()
        self._encoder = encoder
        self._device = device
        self._encoder_backend = encoder_backend
        self._gateway = gateway
        # Made on the loop that reloads (see _reload_lock): an app run again
        # (a second lifespan, on a new loop) must not find a lock bound to
        # the first one.
        self._lock = self._lock_loop = None
        self.last_error = None
        self.current = self._load(version=1)
        self._seen = self.current.file_stamp

    def _load(self, version):
        from .._cli._io import load_estimator
        from .._files import check_regular_file
        from ..inspection import fallback_order

        # Before it is read: reading a named pipe with no writer blocks.
        check_regular_file(self.path)
        stamp = _stamp(self.path)
        # Load from a snapshot of the file, read once: load_estimator reads
        # the file more than once (its kind, then the router; with a mapping
        # of encodings, the saved ones before the router), and a file
        # replaced between two reads would mix two versions in one router.
        with _snapshot(self.path) as private:
            try:
                # A mapping of precomputed encodings is added to those the
                # file holds (its vectors win), at every load, as in
                # ``locus route --encodings``: a re-saved file's new queries
                # stay resolvable after a reload.
                router = load_estimator(
                    private, encoder=self._encoder, device=self._device
                )
            except Exception as exc:
                raise _renamed(exc, private, self.path) from None
        if len(router.classes_) == 0:
            raise ValueError(f"{str(self.path)!r} holds an empty pool.")
        if self._encoder_backend != router.encoder_.backend:
            # A deployment choice, not saved in the file (like the device).
            # ONNX Runtime encodes on the CPU whatever device the network
            # (--device) runs on.
            backend = {"backend": self._encoder_backend}
            if self._encoder_backend == "onnx":
                backend["device"] = "cpu"
            router.encoder_.set_params(**backend).fit()
        if self._gateway is not None:
            _check_gateway(router, self._gateway, self.path)
        if self._gateway is None or self._gateway.cost_weight is None:
            _check_own_cost_weight(router, self.path)
        self._check_predicts(router)
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

    def _check_predicts(self, router):
        """Fail here, not on the first request: the encoder (an ONNX export
        included) and the predictor must run."""
        probes = []
        memory = getattr(router, "pool_evals_", None)
        if memory is not None and len(memory[1].queries):
            # The predictor on a stored encoding: the stored query itself may
            # be a SHA-256 id (a file saved with include_query_text=False),
            # which no encoder resolves.
            probes.append(router._predict_proba_encoded(memory[0][:1]))
        saved = getattr(router.encoder_, "encoder", None)
        if isinstance(saved, Mapping):
            # Precomputed encodings: any of their ids goes through the encoder.
            query = next(iter(saved), None)
        elif memory is not None and len(memory[1].queries):
            query = memory[1].queries[0]
        else:
            query = None
        if query is not None:
            probes.append(router.predict_proba([query]))
        for proba in probes:
            proba = np.asarray(proba)
            if proba.shape != (1, len(router.classes_)) or not np.isfinite(proba).all():
                raise ValueError(f"{str(self.path)!r} gives invalid probabilities.")

    def changed(self):
        """Whether the file changed since the last load or failed attempt.

        For the watcher: a bad file is tried once, not at every check.
        """
        try:
            return _stamp(self.path) != self._seen
        except OSError:
            return False

    def _reload_lock(self):
        """The lock that serializes reloads, one per event loop: an asyncio
        lock may be used on one loop only."""
        loop = asyncio.get_running_loop()
        if self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def reload(self):
        """Load the file again and swap it in; on failure keep the old router.

        Logged here, for every caller (``POST /admin/reload`` and the
        watcher): a success at INFO with the new version, a failure at ERROR
        with its reason (which names the configured file, never the private
        copy, and never holds a key's value).

        Returns
        -------
        old, new : RouterState

        Raises
        ------
        Exception
            Whatever loading raised; the old router keeps serving.
        """
        async with self._reload_lock():
            old = self.current
            loop = asyncio.get_running_loop()
            try:
                self._seen = _stamp(self.path)
                new = await loop.run_in_executor(None, self._load, old.version + 1)
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                logger.error("Reload of %s failed: %s", self.path, self.last_error)
                raise
            self.current = new
            self.last_error = None
            logger.info("Reloaded %s: version %d", self.path, new.version)
            return old, new
