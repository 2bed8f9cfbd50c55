"""Behaviour that differs between platforms and dependency versions, checked
here by imitating the other platform or version in this process: Windows'
file and socket rules, MPS's lack of float64, numpy 1.x's truth values and
huggingface_hub 0.x's exception classes."""

import errno
import os
import socket
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from locus_sklearn import _encoders, _evals, _files

# --- saving: Windows refuses to rename or delete a file held open ------------


def _open_in_this_process(path):
    """Whether a file descriptor of this process refers to ``path``."""
    real = os.path.realpath(path)
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == real:
                return True
        except OSError:
            pass  # closed meanwhile (listdir's own descriptor)
    return False


def _windows_files(monkeypatch):
    """Imitate Windows for _files: no fcntl, and os.replace/os.unlink fail as
    MoveFileExW/DeleteFileW do on a file this process holds open through a
    handle without FILE_SHARE_DELETE (what os.open gives): WinError 32, a
    PermissionError."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to see which files are open")

    def refusing(real):
        def call(src, *args, **kwargs):
            if _open_in_this_process(src):
                raise PermissionError(
                    errno.EACCES,
                    "The process cannot access the file because it is being "
                    "used by another process",
                    os.fspath(src),
                    32,
                )
            return real(src, *args, **kwargs)

        return call

    monkeypatch.setattr(_files, "fcntl", None)
    monkeypatch.setattr(os, "replace", refusing(os.replace))
    monkeypatch.setattr(os, "unlink", refusing(os.unlink))


@pytest.mark.parametrize("existing", [False, True])
def test_a_save_on_windows_closes_its_file_before_renaming_it(
    existing, tmp_path, monkeypatch
):
    """write_bytes (every save and CLI output file) renamed its temporary file
    while still holding it open, which Windows refuses: nothing could be
    saved there."""
    target = tmp_path / "router.locus"
    if existing:
        target.write_bytes(b"the old router")
    _windows_files(monkeypatch)
    _files.write_bytes(target, b"the new router")
    assert target.read_bytes() == b"the new router"
    assert os.listdir(tmp_path) == ["router.locus"]  # no temporary file left


def test_a_save_on_windows_writes_a_readable_file(tmp_path, monkeypatch):
    target = tmp_path / "embedder.locus"
    _windows_files(monkeypatch)
    _files.write_file(target, {"kind": "Test"}, {"w": torch.arange(3.0)})
    metadata, tensors, intact = _files.read_file(target, "Test")
    assert metadata["kind"] == "Test" and intact
    assert torch.equal(tensors["w"], torch.tensor([0.0, 1.0, 2.0]))
    assert os.listdir(tmp_path) == ["embedder.locus"]


@pytest.mark.skipif(_files.fcntl is None, reason="POSIX advisory locks only")
def test_a_save_on_posix_still_renames_under_its_lock(tmp_path, monkeypatch):
    """Where there are locks, the temporary file is renamed while locked, so
    that no concurrent save takes it for a killed save's leftover."""
    fcntl = _files.fcntl
    locked = []
    real_replace = os.replace

    def replace(src, dst):
        fd = os.open(src, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            locked.append(True)
        else:
            locked.append(False)
        finally:
            os.close(fd)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    _files.write_bytes(tmp_path / "out.locus", b"data")
    assert locked == [True]
    assert (tmp_path / "out.locus").read_bytes() == b"data"


# --- training on MPS: no float64 there ---------------------------------------


class _NoFloat64(torch.overrides.TorchFunctionMode):
    """MPS's rule: any operation that makes a float64 tensor fails (pytorch
    issue 122602, "Cannot convert a MPS Tensor to float64 dtype")."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if isinstance(result, torch.Tensor) and result.dtype == torch.float64:
            raise TypeError(f"{func.__name__} made a float64 tensor, which MPS lacks")
        return result


def test_divergence_check_makes_no_float64_tensor():
    """The epoch-end weight check summed each weight in float64 on its own
    device, which fails on MPS: every fit with device="mps" stopped after its
    first epoch. It still finds a non-finite weight, without float64."""
    from skorch.history import History

    from locus_sklearn._training import DivergenceCheck

    module = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    net = SimpleNamespace(module_=module, lr=0.5, history=History())
    net.history.new_epoch()
    net.history.record("valid_loss", 0.7)
    check = DivergenceCheck("Router", remedy=None)
    with _NoFloat64():
        check.on_epoch_end(net)  # finite: nothing to say
    with torch.no_grad():
        module[0].bias[1] = float("nan")
    with (
        _NoFloat64(),
        pytest.raises(
            FloatingPointError,
            match=r"^Router training diverged: weights became non-finite \(1 tensors: "
            r"0\.bias\) in epoch 1; lower lr \(now 0\.5\)\.$",
        ),
    ):
        check.on_epoch_end(net)


# --- plotting on numpy 1.24.0 --------------------------------------------------


def test_portfolio_curve_band_is_drawn_from_arrays(monkeypatch):
    """numpy 1.24.0 (which numpy>=1.24 admits) fails on a pandas Series in
    fill_between (np.ma.masked_invalid, numpy issue 22826): locus demo
    crashed. The band is mean ± std, given as arrays."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes

    from locus_sklearn.inspection import plot_portfolio_curve

    real = Axes.fill_between

    def as_numpy_1_24_0(self, *args, **kwargs):
        if any(isinstance(a, pd.Series) for a in args):
            raise TypeError("ufunc 'isfinite' not supported for the input types")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "fill_between", as_numpy_1_24_0)
    # Rows out of order: the band follows the sorted values.
    curve = pd.DataFrame(
        {
            "value": [2, 1],
            "accuracy": [0.8, 0.6],
            "random_mean": [0.7, 0.5],
            "random_std": [0.05, 0.1],
            "full_pool_accuracy": [0.85, 0.85],
        }
    )
    ax = plot_portfolio_curve(curve, label="k-medoids")
    try:
        (band,) = ax.collections
        vertices = {tuple(np.round(v, 6)) for v in band.get_paths()[0].vertices}
        # mean - std and mean + std at each value.
        assert {(1.0, 0.4), (2.0, 0.65), (1.0, 0.6), (2.0, 0.75)} <= vertices
        assert len(ax.lines) == 3
    finally:
        plt.close(ax.figure)


# --- huggingface_hub < 1.0: LocalEntryNotFoundError is a ValueError too -------


class _HubZeroLocalEntryNotFoundError(FileNotFoundError, ValueError):
    """huggingface_hub 0.x's LocalEntryNotFoundError: an OSError and, "for
    backward compatibility", a ValueError."""


def _refusing_snapshot_download(monkeypatch, error):
    import huggingface_hub

    def snapshot_download(*args, **kwargs):
        raise error

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)


def test_incomplete_hub_cache_is_named_with_huggingface_hub_0(tmp_path, monkeypatch):
    """A refs/main naming a commit with no snapshot folder (an interrupted
    download) was reported as "not in the cache" under huggingface_hub 0.x:
    its error was caught as an invalid repo id (ValueError)."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    refs = tmp_path / "models--org--model" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text("c" * 40)
    _refusing_snapshot_download(
        monkeypatch, _HubZeroLocalEntryNotFoundError("cannot find the snapshot")
    )
    snapshot = tmp_path / "models--org--model" / "snapshots" / ("c" * 40)
    with pytest.raises(ValueError) as info:
        _encoders._cached_hub_model("org/model")
    assert str(info.value).startswith(
        "encoder='org/model' was found in the local Hugging Face cache but is "
        f"incomplete: its snapshot folder {str(snapshot)!r} does not exist."
    )


def test_absent_and_invalid_hub_names_are_still_none(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    # Not cached at all (no refs/main), with huggingface_hub 0.x's class.
    _refusing_snapshot_download(
        monkeypatch, _HubZeroLocalEntryNotFoundError("not in the cache")
    )
    assert _encoders._cached_hub_model("org/model") is None
    # An invalid repo id (HFValidationError, a plain ValueError).
    _refusing_snapshot_download(monkeypatch, ValueError("Repo id must be ..."))
    assert _encoders._cached_hub_model("./models/x") is None


# --- locus serve: SO_REUSEADDR lets Windows bind a port in use ---------------


def _reuse_address(os_name, monkeypatch):
    """SO_REUSEADDR of the socket _listen opens with ``os.name`` as given, and
    whether a second _listen on its port is refused."""
    from locus_sklearn._cli._errors import CommandError
    from locus_sklearn.serve import _cli as serve_cli

    monkeypatch.setattr(serve_cli, "os", SimpleNamespace(name=os_name))
    (sock,) = serve_cli._listen("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        option = sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
        with pytest.raises(CommandError, match=f"cannot listen on 127.0.0.1:{port}"):
            serve_cli._listen("127.0.0.1", port)
    finally:
        sock.close()
    return option


def test_serve_sets_no_reuse_address_on_windows(monkeypatch):
    """On Windows SO_REUSEADDR lets a second socket bind a port already in
    use, so locus serve would not fail on one (CPython's create_server and
    asyncio leave it unset there)."""
    assert _reuse_address("nt", monkeypatch) == 0


def test_serve_sets_reuse_address_on_posix(monkeypatch):
    assert _reuse_address("posix", monkeypatch) != 0


# --- numpy < 2.2: bool() of an empty array only warned -------------------------


class _EmptyArrayBeforeNumpy22:
    """pd.isna([]) as numpy < 2.2 has it: bool() warns and gives False (from
    numpy 2.2 on, it raises ValueError)."""

    def __bool__(self):
        warnings.warn(
            "The truth value of an empty array is ambiguous. Returning False, "
            "but in future this will result in an error.",
            DeprecationWarning,
            stacklevel=2,
        )
        return False


def test_an_empty_list_is_not_missing_without_a_warning(monkeypatch):
    """check_evals on an empty list as an id let numpy < 2.2's
    DeprecationWarning out (an error under -W error) instead of reaching its
    own message."""
    real = pd.isna

    def isna(value):
        result = real(value)
        if isinstance(result, np.ndarray) and result.size == 0:
            return _EmptyArrayBeforeNumpy22()
        return result

    monkeypatch.setattr(_evals.pd, "isna", isna)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _evals._is_missing([]) is False
        assert _evals._is_missing(np.array([])) is False
        # Array-likes are never a missing value, whatever they hold.
        assert _evals._is_missing([np.nan]) is False
        assert _evals._is_missing([[1.0], [1.0, 2.0]]) is False
        for missing in (None, np.nan, pd.NA, pd.NaT, np.array(np.nan)):
            assert _evals._is_missing(missing) is True


def test_check_evals_names_an_empty_list_id_under_warnings_as_errors():
    from locus_sklearn import check_evals

    evals = {"model": ["a", []], "query": ["q", "q"], "score": [1.0, 0.0]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(
            TypeError,
            match=r"^evals\['model'\] must hold strings; 1 of 2 rows do not "
            r"\(e\.g\. \[\[\]\]\)\.",
        ):
            check_evals(evals)
