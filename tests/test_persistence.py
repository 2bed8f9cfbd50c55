"""Saved files (``_persistence``): save / load round trips of LocusEmbedder and
LocusRouter, corrupt and foreign files, permissions, symlinks, temporary files
and clear write errors.

``write_file`` is the one writer behind every ``save`` and ``locus onboard``;
the file-system tests call it directly with tiny tensors.
"""

import copy
import errno
import hashlib
import io
import json
import os
import pickle
import re
import stat
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from safetensors import SafetensorError

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn import _files as _files_module
from locus_sklearn._files import read_file, write_file
from locus_sklearn.datasets import make_model_pool

TENSORS = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}


def _write(path, value=0.0):
    write_file(path, {"kind": "Test", "value": value}, TENSORS)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask():
    """Set the process umask for one test, then restore it."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda value: os.umask(value)
    os.umask(old)


@pytest.mark.parametrize(
    "mask, expected", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)]
)
def test_new_files_follow_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    path = tmp_path / "router.locus"
    _write(path)
    assert _mode(path) == expected
    metadata, tensors, _ = read_file(path, "Test")
    assert metadata["value"] == 0.0
    torch.testing.assert_close(tensors["w"], TENSORS["w"])


def test_resaving_keeps_the_existing_mode(tmp_path, umask):
    umask(0o022)
    path = tmp_path / "router.locus"
    _write(path)
    os.chmod(path, 0o640)
    _write(path, value=1.0)
    assert _mode(path) == 0o640
    assert read_file(path, "Test")[0]["value"] == 1.0


def test_saving_through_a_symlink_writes_the_target(tmp_path):
    target = tmp_path / "releases" / "v1.locus"
    target.parent.mkdir()
    _write(target)
    os.chmod(target, 0o640)
    link = tmp_path / "current.locus"
    link.symlink_to(target)
    _write(link, value=2.0)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert read_file(target, "Test")[0]["value"] == 2.0
    assert _mode(target) == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["v1.locus"]


needs_fifo = pytest.mark.skipif(
    not hasattr(os, "mkfifo"), reason="os.mkfifo is not available here"
)


@needs_fifo
def test_saving_onto_a_named_pipe_is_refused_and_leaves_it(tmp_path):
    # The temporary file was renamed over it: a FIFO (or, for root, a device
    # node such as /dev/null) became a regular file.
    fifo = tmp_path / "out.locus"
    os.mkfifo(fifo)
    link = tmp_path / "link.locus"
    link.symlink_to(fifo)
    for path in (fifo, link):
        with pytest.raises(
            OSError, match="it is a named pipe \\(FIFO\\), not a regular file"
        ) as info:
            _write(path)
        assert info.value.errno == errno.EINVAL and info.value.filename == str(path)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.locus", "out.locus"]


def _crash_during_save(path):
    """Run a save in a child process that dies just before the final rename,
    as a killed writer would: its temporary file stays behind."""
    script = textwrap.dedent(
        f"""
        import os, torch
        from locus_sklearn import _files as _persistence
        os.replace = lambda *args: os._exit(9)
        _persistence.write_file({str(path)!r}, {{"kind": "Test", "value": 9.0}},
                                {{"w": torch.zeros(2)}})
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, check=False)
    assert done.returncode == 9


def test_a_killed_save_leaves_no_temporary_file_after_the_next_save(tmp_path):
    path = tmp_path / "router.locus"
    _write(path)
    _crash_during_save(path)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(left) == 2 and "router.locus" in left  # the crash left a temp file
    assert read_file(path, "Test")[0]["value"] == 0.0  # and the file is intact
    _write(path, value=3.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["router.locus"]
    assert read_file(path, "Test")[0]["value"] == 3.0


def test_a_save_in_progress_elsewhere_is_not_cleaned_up(tmp_path):
    # Another writer holds a lock on its temporary file while it writes: a
    # concurrent successful save must leave that file alone.
    fcntl = pytest.importorskip("fcntl")
    path = tmp_path / "router.locus"
    busy = tmp_path / ".router.locus.0123456789abcdef.tmp"
    with open(busy, "wb") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        # Written to, as a writer does under its lock (an empty young file is
        # spared whether locked or not).
        handle.write(b"partial")
        handle.flush()
        _write(path)
        assert busy.exists()
    _write(path)
    assert not busy.exists()


def test_only_the_librarys_own_temporary_files_are_cleaned_up(tmp_path):
    # Any unlocked ".<name>.*.tmp" was deleted: a user's own file too.
    path = tmp_path / "router.locus"
    ours = tmp_path / ".router.locus.0123456789abcdef.tmp"
    theirs = [
        tmp_path / ".router.locus.my notes before v2.tmp",
        tmp_path / ".router.locus.0123abcd.tmp",  # not 16 hex digits
        tmp_path / ".router.locus.0123456789ABCDEF.tmp",  # token_hex is lower-case
    ]
    for stale in [ours, *theirs]:
        stale.write_text("left behind")
    _write(path)
    assert not ours.exists()
    assert all(stale.read_text() == "left behind" for stale in theirs)


def test_saving_over_a_file_that_may_not_be_written_is_refused(tmp_path, monkeypatch):
    # The rename needs only the folder's permission: a file made read-only
    # (mode 0o444) was replaced all the same.
    path = tmp_path / "router.locus"
    _write(path)
    before = path.read_bytes()
    os.chmod(path, 0o444)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Root may write any file: answer as for the file's owner, which is
        # what a read-only file tells every other user.
        real_access = os.access

        def owner_access(target, mode, **kwargs):
            writable = os.stat(target).st_mode & stat.S_IWUSR
            return real_access(target, mode, **kwargs) and (
                not mode & os.W_OK or bool(writable)
            )

        monkeypatch.setattr(os, "access", owner_access)
    try:
        with pytest.raises(
            PermissionError, match="not writable \\(mode 0o444\\)"
        ) as info:
            _write(path, value=5.0)
        assert info.value.errno == 13 and ".tmp" not in str(info.value)
        assert info.value.filename == str(path)
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["router.locus"]
    finally:
        os.chmod(path, 0o644)


@pytest.mark.parametrize("path", [io.BytesIO(), 5, b"router.locus", None])
def test_a_path_that_names_no_file_is_refused(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a bytes path would have been written
    with pytest.raises(TypeError, match="path must be a str or path-like naming"):
        _write(path)
    assert list(tmp_path.iterdir()) == []


def test_a_file_in_place_of_a_folder_is_named(tmp_path):
    # "file.locus/x" said that the folder 'file.locus' did not exist.
    _write(tmp_path / "router.locus")
    for path in (
        tmp_path / "router.locus" / "x",
        tmp_path / "router.locus" / "a" / "b",
    ):
        with pytest.raises(NotADirectoryError, match="router.locus' is a file, not a"):
            _write(path)


def test_missing_folder_error_names_the_target(tmp_path):
    path = tmp_path / "absent" / "router.locus"
    with pytest.raises(FileNotFoundError, match="router.locus") as info:
        _write(path)
    assert ".tmp" not in str(info.value)
    assert "absent" in str(info.value) and info.value.errno == 2


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="root writes into read-only folders",
)
def test_read_only_folder_error_names_the_target(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    os.chmod(folder, 0o555)
    try:
        with pytest.raises(PermissionError, match="router.locus") as info:
            _write(folder / "router.locus")
        assert ".tmp" not in str(info.value)
    finally:
        os.chmod(folder, 0o755)


def test_refused_temporary_file_error_names_the_target(tmp_path, monkeypatch):
    # What a read-only folder gives a non-root user, simulated (tests may run
    # as root, who writes anywhere).
    real_open = os.open

    def refuse(path, flags, *args):
        if str(path).endswith(".tmp"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(PermissionError) as info:
        _write(tmp_path / "router.locus")
    assert ".tmp" not in str(info.value) and info.value.errno == 13
    assert info.value.filename == str(tmp_path / "router.locus")
    assert info.value.strerror == (
        f"cannot create a file in {str(tmp_path)!r} (Permission denied)"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "router.locus"
    _write(path)
    before = path.read_bytes()

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError) as info:
        _write(path, value=4.0)
    assert ".tmp" not in str(info.value)
    # As the OS reports a write: errno, strerror and the file, each once.
    assert (info.value.errno, info.value.strerror, info.value.filename) == (
        28,
        "No space left on device",
        str(path),
    )
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["router.locus"]


def test_a_failed_write_is_reported_once_by_the_cli(tmp_path, monkeypatch):
    """The CLI names the file and reports the error's strerror, else its
    message, which said it again: "could not write ROUTER_OUT 'c.st':
    Cannot save 'c.st': No space left on device. (nothing was written)"."""
    from locus_sklearn._cli._io import write_text

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    path = tmp_path / "out.csv"
    with pytest.raises(Exception) as info:
        write_text("a,b\n", path, "OUT")
    assert str(info.value) == (
        f"could not write OUT {str(path)!r}: No space left on device "
        "(nothing was written)"
    )
    assert list(tmp_path.iterdir()) == []


def test_saving_onto_a_folder_names_it(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a directory"):
        _write(tmp_path)


def test_router_save_follows_the_umask_and_loads(tmp_path, umask, tiny_embedder):
    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    embedder = tiny_embedder(pool.encodings, max_epochs=1)
    router = LocusRouter(embedder).fit(pool.evals)
    umask(0o027)
    router.save(tmp_path / "r.locus")
    assert _mode(tmp_path / "r.locus") == 0o640
    loaded = LocusRouter.load(tmp_path / "r.locus")
    np.testing.assert_array_equal(loaded.model_embeddings_, router.model_embeddings_)


def test_mapping_encoder_saves_and_loads(tmp_path, tiny_embedder):
    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    encodings = dict(pool.encodings)
    encodings["never used"] = np.ones(len(next(iter(encodings.values()))))
    embedder = tiny_embedder(encodings, max_epochs=1).fit(pool.evals)
    embedder.save(tmp_path / "e.locus")
    loaded = LocusEmbedder.load(tmp_path / "e.locus")
    np.testing.assert_array_equal(
        loaded.transform(pool.evals), embedder.transform(pool.evals)
    )
    assert set(loaded.encoder) == set(encodings)


def test_safe_save_load_round_trip(router, pool, tmp_path, query_texts):
    path = tmp_path / "router.safetensors"
    router.save(path)
    loaded = LocusRouter.load(path)
    queries = query_texts[:30]
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), router.predict_proba(queries)
    )
    np.testing.assert_array_equal(loaded.classes_, router.classes_)
    np.testing.assert_array_equal(loaded.model_embeddings_, router.model_embeddings_)
    np.testing.assert_array_equal(
        loaded.embedder_.transform(pool.evals), router.embedder_.transform(pool.evals)
    )
    router.embedder_.save(tmp_path / "embedder.safetensors")
    emb = LocusEmbedder.load(tmp_path / "embedder.safetensors")
    np.testing.assert_array_equal(
        emb.transform(pool.evals), router.embedder_.transform(pool.evals)
    )
    with pytest.raises(ValueError, match="holds a LocusEmbedder, not a LocusRouter"):
        LocusRouter.load(tmp_path / "embedder.safetensors")


def test_load_under_a_float64_default_dtype(router, pool, tmp_path, query_texts):
    # The expected state was built in the caller's default dtype, so a file
    # just saved was refused as "not a valid locus_sklearn file: tensor
    # 'net.encoder.seed' has dtype torch.float32"; the network is float32 as
    # saved, and the caller's default is kept.
    router.save(tmp_path / "r.safetensors")
    router.embedder_.save(tmp_path / "e.safetensors")
    queries = query_texts[:30]
    torch.set_default_dtype(torch.float64)
    try:
        loaded = LocusRouter.load(tmp_path / "r.safetensors")
        emb = LocusEmbedder.load(tmp_path / "e.safetensors")
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    for net in (loaded.embedder_.net_, emb.net_):
        assert {p.dtype for p in net.module_.state_dict().values()} == {torch.float32}
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), router.predict_proba(queries)
    )
    np.testing.assert_array_equal(
        emb.transform(pool.evals), router.embedder_.transform(pool.evals)
    )


def test_save_load_keeps_costs(pool, tmp_path, tiny_embedder, model_names):
    costs = {m: float(i) for i, m in enumerate(model_names)}
    r = LocusRouter(tiny_embedder(pool.encodings, max_epochs=1), cost_weight=0.1).fit(
        pool.evals, model_costs=costs
    )
    r.save(tmp_path / "r.safetensors")
    loaded = LocusRouter.load(tmp_path / "r.safetensors")
    np.testing.assert_array_equal(loaded.model_costs_, r.model_costs_)
    assert loaded.cost_weight == 0.1


def test_load_rejects_corrupt_and_foreign_files(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00\x01not a safetensors file")
    with pytest.raises(ValueError, match="not a readable locus_sklearn file"):
        LocusRouter.load(bad)
    with pytest.raises(FileNotFoundError):
        LocusRouter.load(tmp_path / "missing.safetensors")
    # A folder exists: it is not "no such file".
    with pytest.raises(IsADirectoryError, match="is a folder; give the path of a"):
        LocusRouter.load(tmp_path)


@needs_fifo
def test_a_named_pipe_is_not_reported_as_a_missing_file(tmp_path):
    # Said "No such file" (and the CLI, opening it first, waited forever for
    # a writer); os.stat tells without opening it.
    fifo = tmp_path / "router.locus"
    os.mkfifo(fifo)
    link = tmp_path / "link.locus"
    link.symlink_to(fifo)
    for path in (fifo, link):
        with pytest.raises(
            OSError,
            match=f"'{re.escape(str(path))}' is a named pipe \\(FIFO\\), not a "
            "regular file",
        ) as info:
            LocusRouter.load(path)
        assert not isinstance(info.value, FileNotFoundError)
        assert info.value.errno == errno.EINVAL
    # The check the CLI and the service call before opening a file.
    check = _files_module.check_regular_file
    with pytest.raises(OSError, match="is a named pipe"):
        check(fifo)
    _write(tmp_path / "saved.locus")
    (tmp_path / "saved-link.locus").symlink_to(tmp_path / "saved.locus")
    assert check(tmp_path / "saved.locus") is None
    assert check(str(tmp_path / "saved-link.locus")) is None
    with pytest.raises(FileNotFoundError, match="No such file: '.*missing.locus'"):
        check(tmp_path / "missing.locus")
    with pytest.raises(FileNotFoundError, match="No such file"):
        check(tmp_path / "saved.locus" / "x")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        check(tmp_path)
    with pytest.raises(TypeError, match="path must be a str or path-like"):
        check(b"saved.locus")


def _torch_saved():
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buffer)
    return buffer.getvalue()


def _npz_saved():
    buffer = io.BytesIO()
    np.savez(buffer, a=np.zeros(3))
    return buffer.getvalue()


@pytest.mark.parametrize(
    "data, found",
    [
        (b"", "it is empty"),
        (b"\x01\x00", "it is 2 bytes long, shorter than the 8-byte header length"),
        (_torch_saved, "it looks like a zip archive, as torch.save"),
        (_npz_saved, "it looks like a zip archive, as torch.save and numpy.savez"),
        (pickle.dumps({"a": 1}), "it looks like a Python pickle"),
        (json.dumps({"a": 1}).encode(), "it looks like JSON text"),
        (
            struct.pack("<Q", 1000) + b"{}",
            "its first 8 bytes .* give a header of 1000 bytes, but 2 bytes follow",
        ),
        (struct.pack("<Q", 4) + b"abcd", "its header starts with b'abcd', not with"),
        (struct.pack("<Q", 4) + b"{\xff}}", "its header is not UTF-8 text \\(byte 9"),
    ],
)
def test_a_file_of_another_format_is_named_as_such(tmp_path, data, found):
    # The JSON decoder explained them ("'utf-32-be' codec can't decode bytes
    # in position 20-23", "unpack requires a buffer of 8 bytes").
    path = tmp_path / "other.locus"
    path.write_bytes(data() if callable(data) else data)
    with pytest.raises(
        ValueError,
        match=f"'{re.escape(str(path))}' is not a safetensors file "
        f"\\(.*{found}.*\\), so not a readable locus_sklearn file",
    ):
        LocusRouter.load(path)


def test_load_refuses_the_meta_device(tmp_path, tiny_embedder, pool):
    """device='meta' loaded, with a warning per tensor, an estimator whose
    every prediction failed: meta tensors hold no data."""
    path = tmp_path / "r.safetensors"
    LocusRouter(tiny_embedder(pool.encodings, max_epochs=1)).fit(pool.evals).save(path)
    with pytest.raises(ValueError, match="device='meta': meta tensors hold no data"):
        LocusRouter.load(path, device="meta")
    import torch
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a locus_sklearn one"):
        LocusRouter.load(tmp_path / "other.safetensors")


def test_load_gives_the_encoder_the_device_asked_for(tmp_path, tiny_embedder, pool):
    # The encoder took the resolved device: on a CUDA machine load(device=None)
    # pinned it to "cuda", and switching it to the ONNX backend (CPU only),
    # as locus serve --encoder-backend onnx does, was refused.
    from locus_sklearn import QueryEncoder

    path = tmp_path / "r.safetensors"
    router = LocusRouter(tiny_embedder(QueryEncoder(pool.encodings), max_epochs=1))
    router.fit(pool.evals).save(path)
    assert LocusRouter.load(path).encoder_.device is None
    assert LocusRouter.load(path, device="cpu").encoder_.device == "cpu"


def test_a_loaded_routers_parameter_is_not_its_fitted_embedder(
    router, tmp_path, query_texts
):
    # load passed the fitted embedder as the ``embedder`` parameter too, so
    # set_params(embedder__...) changed a loaded router's fitted state (and
    # embedder__embedding_dim broke every prediction); fit leaves them apart.
    path = tmp_path / "router.safetensors"
    router.save(path)
    loaded = LocusRouter.load(path)
    assert loaded.embedder is not loaded.embedder_
    assert not hasattr(loaded.embedder, "net_")
    fitted = loaded.embedder_.get_params(deep=False)
    assert loaded.embedder.get_params(deep=False).keys() == fitted.keys()
    for name, value in loaded.embedder.get_params(deep=False).items():
        assert value is fitted[name] or value == fitted[name], name
    expected = loaded.predict_proba(query_texts[:10])
    loaded.set_params(embedder__refine_steps=10, embedder__embedding_dim=32)
    assert loaded.embedder_.refine_steps == 0 and loaded.embedder_.embedding_dim == 16
    np.testing.assert_array_equal(loaded.predict_proba(query_texts[:10]), expected)
    # Saved again, the file holds what the first one held (safetensors orders
    # the header fields anew in each file, so the bytes differ), and the
    # settings set since on the parameter.
    loaded.save(tmp_path / "again.safetensors")
    first = read_file(path, "LocusRouter")
    again = read_file(tmp_path / "again.safetensors", "LocusRouter")
    settings = again[0].pop("embedder_params")
    assert settings == {**first[0]["params"], "refine_steps": 10, "embedding_dim": 32}
    assert first[0] == again[0] and again[2]
    assert first[1].keys() == again[1].keys()
    for name, tensor in first[1].items():
        assert torch.equal(tensor, again[1][name]), name


def test_a_header_over_the_safetensors_limit_names_the_file(
    router, tmp_path, monkeypatch
):
    # Over 100 MB of query text in the header (about 100,000 long prompts):
    # safetensors' bare "header too large", which named neither the file nor
    # the way out. Its error is raised here without building 100 MB.
    real_save = _files_module.save

    def too_large(tensors, metadata=None):
        raise SafetensorError("Error while serializing: header too large")

    monkeypatch.setattr(_files_module, "save", too_large)
    path = tmp_path / "router.safetensors"
    with pytest.raises(
        ValueError,
        match="Cannot save '.*router.safetensors': its header .* over the 100 MB "
        "that safetensors files allow; save\\(path, include_query_text=False\\)",
    ):
        router.save(path)
    # Without query texts, the advice would not help: it is not given.
    with pytest.raises(ValueError, match="allow\\.$"):
        router.save(path, include_query_text=False)
    assert not path.exists() and list(tmp_path.iterdir()) == []

    # Any other safetensors error (a full disk, for the CLI) is left as it is.
    def disk_full(tensors, metadata=None):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28 })")

    monkeypatch.setattr(_files_module, "save", disk_full)
    with pytest.raises(SafetensorError, match="code: 28"):
        router.save(path)
    monkeypatch.setattr(_files_module, "save", real_save)


def test_a_query_with_a_lone_surrogate_saves_without_its_text(tmp_path, tiny_embedder):
    # What a decode with errors="surrogateescape" gives: fit accepts it, and
    # save(include_query_text=False) failed hashing it (UnicodeEncodeError).
    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    text = "caf\udce9 query"
    old = pool.evals["query"].iloc[0]
    evals = pool.evals.replace({"query": {old: text}})
    encodings = dict(pool.encodings)
    encodings[text] = encodings.pop(old)
    # The default shrinkage="auto" too: it cross-fits on DataFrames of the
    # queries, which pandas' str dtype refused (see test_surrogate_names.py).
    router = LocusRouter(tiny_embedder(encodings, max_epochs=1))
    router.fit(evals)
    path = tmp_path / "private.safetensors"
    router.save(path, include_query_text=False)
    loaded = LocusRouter.load(path, encoder=encodings)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    stored = loaded.pool_evals_[1].queries.tolist()
    assert digest in stored and text not in stored
    # Any other text hashes as its UTF-8 bytes, as files already hold.
    assert hashlib.sha256(old.encode()).hexdigest() not in stored
    assert hashlib.sha256(evals["query"].iloc[-1].encode()).hexdigest() in stored
    np.testing.assert_array_equal(
        loaded.predict_proba([text]), router.predict_proba([text])
    )
    # The hashed router goes on onboarding, and saves again.
    newcomer = evals[(evals["model"] == "fam0-m00") & (evals["query"] != text)]
    loaded.add_models(newcomer.assign(model="newcomer"))
    loaded.save(path, include_query_text=False)
    router.save(tmp_path / "plain.safetensors")
    plain = LocusRouter.load(tmp_path / "plain.safetensors")
    assert text in plain.pool_evals_[1].queries.tolist()


def _edited(router, tmp_path, edit, *, embedder=False):
    """A saved router (or its embedder), its fields edited by ``edit(metadata,
    tensors)`` and written back with a valid checksum."""
    path = tmp_path / "edited.safetensors"
    kind = "LocusEmbedder" if embedder else "LocusRouter"
    (router.embedder_ if embedder else router).save(path)
    metadata, tensors, _ = read_file(path, kind)
    edit(metadata, tensors)
    write_file(path, metadata, tensors)
    return path


def _older_format(metadata, tensors):
    """A file of a version before the shrinkage safeguard: none of its fields."""
    for name in ("shrinkage", "shrinkage_fitted", "shrinkage_repeats"):
        metadata.pop(name)
    tensors.pop("pool.mean_scores")


def _without_rows_of_model(index):
    def edit(metadata, tensors):
        keep = tensors["memory.model_index"] != index
        for name in ("memory.model_index", "memory.query_index", "memory.score"):
            tensors[name] = tensors[name][keep]

    return edit


def _repeated_row(metadata, tensors):
    for name in ("memory.model_index", "memory.query_index", "memory.score"):
        tensors[name] = torch.cat([tensors[name][:1], tensors[name]])


def _set(**fields):
    return lambda metadata, tensors: metadata.update(fields)


def _first_name(field, name):
    def edit(metadata, tensors):
        metadata[field] = [name, *metadata[field][1:]]

    return edit


def _pool_swapped(metadata, tensors):
    """The pool's first two models swapped, every tensor permuted to match:
    consistent, but out of the sorted order the pool is kept in."""
    order = [1, 0, *range(2, len(metadata["pool"]))]
    metadata["pool"] = [metadata["pool"][i] for i in order]
    for name in ("pool.embeddings", "pool.mean_scores", "pool.costs"):
        if name in tensors:
            tensors[name] = tensors[name][order]
    model = tensors["memory.model_index"]
    model = torch.where(model == 0, 1, torch.where(model == 1, 0, model))
    rows = torch.argsort(model, stable=True)
    tensors["memory.model_index"] = model[rows]
    for name in ("memory.query_index", "memory.score"):
        tensors[name] = tensors[name][rows]


def _repeated_key(metadata, tensors):
    keys = metadata["encoder"]["keys"]
    keys[1] = keys[0]


@pytest.mark.parametrize(
    "edit, match",
    [
        (_set(temperature=0.5), "header field 'temperature' is not part of a saved"),
        (
            lambda m, t: (_older_format(m, t), m.update(shrinkage="bogus")),
            "header field 'shrinkage' must be null",
        ),
        (
            lambda m, t: (_older_format(m, t), m.update(shrinkage_repeats=0)),
            "header field 'shrinkage_repeats' is under 1",
        ),
        (
            lambda m, t: (_older_format(m, t), m.update(shrinkage_repeats="x")),
            "header field 'shrinkage_repeats' must be of type int",
        ),
        (_first_name("pool", ""), "header field 'pool' holds an empty string"),
        # Loaded, and remove_models then paired models with other models'
        # stored evaluations (re-sorted by check_evals) by position.
        (
            _pool_swapped,
            "header field 'pool' is not sorted by name: 'fam0-m01' \\(position 0\\) "
            "comes before 'fam0-m00'",
        ),
        (
            _first_name("memory_queries", ""),
            "header field 'memory_queries' holds an empty string",
        ),
        (_first_name("classes", ""), "header field 'classes' holds an empty string"),
        (_set(classes=[]), "header field 'classes' is empty"),
        (_repeated_row, "'memory.query_index' repeat a \\(model, query\\) pair"),
        (
            _without_rows_of_model(0),
            "'memory.model_index' has no stored evaluation of pool model 'fam0-m00'",
        ),
        (_repeated_key, "header field 'encoder' repeats a key"),
        (
            lambda m, t: m["encoder"].update(path="/elsewhere"),
            "header field 'encoder' has unknown fields \\['path'\\]",
        ),
        (
            _set(cost_weight=0.5),
            "'cost_weight' is invalid \\(cost_weight=0.5 needs model costs",
        ),
        # Loaded as shrinkage=None where 'auto' was saved.
        (
            lambda m, t: m.pop("shrinkage"),
            "header field 'shrinkage' is missing",
        ),
        # Loaded with the stored evaluations set, which no such router keeps.
        (
            lambda m, t: m["params"].update(kernel_readout=False),
            "'memory.\\*' / header field 'memory_queries' are present, but "
            "kernel_readout=False",
        ),
        # Said "holds a None, not a LocusRouter; load it with None.load".
        (lambda m, t: m.pop("kind"), "header field 'kind' is missing"),
        (_set(kind="Forest"), "header field 'kind' has an unknown value 'Forest'"),
        (
            _set(frozen_embedder=False),
            "header field 'frozen_embedder' must be true where present",
        ),
        (
            lambda m, t: m.update(embedder_params={**m["params"], "colour": 1}),
            "header field 'embedder_params' has unknown names \\['colour'\\]",
        ),
        (
            _set(frozen_embedder=True, embedder_output_config={}),
            "'embedder_output_config' is present, but the embedder parameter is frozen",
        ),
        (
            _set(output_config={"transform": "xml"}),
            "header field 'output_config' has transform='xml', not one of "
            "\\['default', 'pandas', 'polars'\\]",
        ),
        (
            _set(output_config={"transform": "pandas", "predict": "pandas"}),
            "header field 'output_config' has unknown names \\['predict'\\]",
        ),
        (
            _set(embedder_output_config="pandas"),
            "header field 'embedder_output_config' must be of type dict",
        ),
        # Built 1,000 blocks (on the meta device) before comparing one tensor;
        # 10,000 took 30 s and 1.5 GB.
        (
            lambda m, t: m["params"].update(n_blocks=1000),
            "has n_blocks=1000, but the file holds \\d+ network tensors, too few",
        ),
    ],
)
def test_load_checks_every_field_of_the_file(router, tmp_path, edit, match):
    # Each loaded (with a valid checksum) and failed later, or routed from a
    # pool its stored evaluations did not match.
    with pytest.raises(ValueError, match=match):
        LocusRouter.load(_edited(router, tmp_path, edit))


def _with_raw_field(path, name, text):
    """Rewrite the saved file ``path`` with header field ``name`` holding the
    JSON ``text`` as it is, and a checksum that matches."""
    from safetensors import safe_open
    from safetensors.torch import load, save

    with safe_open(str(path), "pt") as handle:
        header = handle.metadata()
    tensors = load(path.read_bytes())
    header[name] = text
    header["checksum"] = _files_module._digest(header, tensors)
    path.write_bytes(save(tensors, metadata=header))


@pytest.mark.parametrize(
    "text, problem",
    [
        # RecursionError, which no caller expects of a load.
        ("[" * 100_000 + "]" * 100_000, "nested too deeply to read"),
        # Python's own message named no file, and advised raising its limit.
        ("1" + "0" * 5000, "an int of more digits than Python reads"),
        ("[1,", "Expecting value: line 1 column 4 (char 3)"),
    ],
    ids=["deep", "long int", "cut short"],
)
def test_a_header_field_json_cannot_read_is_named(tmp_path, text, problem):
    path = tmp_path / "r.locus"
    _write(path)
    _with_raw_field(path, "value", text)
    with pytest.raises(ValueError) as info:
        read_file(path, "Test")
    assert str(info.value) == (
        f"{str(path)!r} has a corrupt header (field 'value': {problem})."
    )


@pytest.mark.parametrize(
    "field, name, value, shown",
    [
        ("n_query_features", None, 2**62, "4611686018427387904"),
        ("n_query_features", None, 10**300, "1.000e+300 (an int of about 301 digits)"),
        ("params", "embedding_dim", 2**40, "1099511627776"),
        ("params", "hidden_dim", 2**62, "4611686018427387904"),
    ],
    ids=["features 2**62", "features 10**300", "embedding_dim", "hidden_dim"],
)
def test_network_sizes_no_stored_tensor_has_are_refused(
    router, tmp_path, field, name, value, shown
):
    """Building the layout to compare with (on the meta device) raised
    torch's RuntimeError "Storage size calculation overflowed" or a TypeError
    with a C++ trace."""

    def edit(metadata, tensors):
        if name is None:
            metadata[field] = value
        else:
            metadata[field][name] = value

    # The longest axis of the tiny network (embedding_dim=16): the
    # predictor's hidden layer takes 3 * 16 inputs, the query projection
    # the query features.
    longest = max(3 * 16, router.n_query_features_)
    said = (
        f"n_query_features' is {shown}"
        if name is None
        else f"params' has {name}={shown}"
    )
    with pytest.raises(ValueError) as info:
        LocusRouter.load(_edited(router, tmp_path, edit))
    assert str(info.value).endswith(
        f"is not a valid locus_sklearn file: header field '{said}, longer than "
        f"every axis of the network tensors the file holds (the longest: "
        f"{longest})."
    )


def test_a_network_too_large_to_build_is_refused(router, tmp_path):
    # Without network tensors no size is bounded by them; 2**62 * 48 weights
    # overflow int64.
    def edit(metadata, tensors):
        metadata["params"]["hidden_dim"] = 2**62
        for key in [key for key in tensors if key.startswith("net.")]:
            del tensors[key]

    with pytest.raises(
        ValueError,
        match="header fields 'params' / 'n_query_features' describe a network too "
        "large to build \\(n_query_features=\\d+, embedding_dim=16, n_latents=4, "
        "hidden_dim=4611686018427387904, n_profile_regions=0\\)",
    ):
        LocusRouter.load(_edited(router, tmp_path, edit))


def test_load_refuses_router_fields_in_an_embedder_file(router, tmp_path):
    path = _edited(router, tmp_path, _set(cost_weight=0.0), embedder=True)
    with pytest.raises(
        ValueError, match="header field 'cost_weight' is not part of a saved Locus"
    ):
        LocusEmbedder.load(path)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m, t: None,
        _older_format,
        lambda m, t: m.pop("shrinkage_repeats"),
        lambda m, t: (_older_format(m, t), m.update(shrinkage_repeats=2)),
    ],
)
def test_files_of_earlier_versions_still_load(router, tmp_path, query_texts, edit):
    loaded = LocusRouter.load(_edited(router, tmp_path, edit))
    np.testing.assert_array_equal(loaded.model_embeddings_, router.model_embeddings_)
    assert np.isfinite(loaded.predict_proba(query_texts[:5])).all()


def test_the_reference_file_of_the_first_version_loads():
    # No checksum, network layout, shrinkage or stored evaluations.
    here = os.path.dirname(__file__)
    path = os.path.join(here, "data", "reference", "router_fd95f1c.safetensors")
    assert "checksum" not in read_file(path, "LocusRouter")[0]
    assert LocusRouter.load(path).classes_.size


def test_load_refuses_a_mapping_encoder_of_another_dimension(router, tmp_path):
    # Loaded, and failed only at the first prediction.
    path = tmp_path / "router.safetensors"
    router.save(path)
    wrong = {"q0": np.ones(5, dtype=np.float32)}
    match = (
        "encoder gives 5-dimensional query encodings, but the LocusRouter in "
        ".*router.safetensors' was fitted on 32-dimensional ones"
    )
    with pytest.raises(ValueError, match=match):
        LocusRouter.load(path, encoder=wrong)
    router.embedder_.save(tmp_path / "embedder.safetensors")
    with pytest.raises(ValueError, match="the LocusEmbedder in .*fitted on 32"):
        LocusEmbedder.load(tmp_path / "embedder.safetensors", encoder=wrong)


def test_numpy_scalar_hyper_parameters_save_and_load_as_equal_values(
    tmp_path, tiny_embedder
):
    """A hyper-parameter held as a NumPy scalar (GridSearchCV over np.arange,
    a list of NumPy values) was taken by fit, but save failed with json's
    bare "Object of type int64 is not JSON serializable"."""
    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    numpy_params = {
        "embedding_dim": np.int64(16),
        "n_latents": np.int32(4),
        "dropout": np.float32(0.1),
        "disjoint": np.bool_(True),
        "enc_size": (np.int64(16), np.int64(128)),
    }
    embedder = tiny_embedder(pool.encodings, max_epochs=1, **numpy_params)
    router = LocusRouter(embedder, shrinkage=np.float32(0.5)).fit(pool.evals)
    router.save(tmp_path / "router.locus")
    router.embedder_.save(tmp_path / "embedder.locus")
    loaded_router = LocusRouter.load(tmp_path / "router.locus")
    loaded_embedder = LocusEmbedder.load(tmp_path / "embedder.locus")
    saved = router.embedder_._saved_params()
    for loaded in (loaded_router.embedder_, loaded_embedder):
        params = loaded._saved_params()
        assert params == saved
        # As the equal Python values, which JSON holds.
        assert type(params["embedding_dim"]) is int
        assert type(params["dropout"]) is float and type(params["disjoint"]) is bool
        assert [type(v) for v in params["enc_size"]] == [int, int]
    assert loaded_router.shrinkage == 0.5 and type(loaded_router.shrinkage) is float
    assert loaded_router.shrinkage_ == 0.5
    queries = pool.evals["query"].unique()[:10]
    np.testing.assert_array_equal(
        loaded_router.predict_proba(queries), router.predict_proba(queries)
    )


def test_loaded_parameters_are_those_fitted_and_the_device_asked_for(
    tmp_path, tiny_embedder, pool, assert_reproduced
):
    # random_state was not saved (0 came back None, so two refits of a
    # clone of the loaded router differed), and device took the resolved
    # value ('cpu' for None) instead of the one asked for.
    from sklearn.base import clone

    router = LocusRouter(
        tiny_embedder(pool.encodings, max_epochs=1, random_state=7), shrinkage=None
    ).fit(pool.evals)
    path = tmp_path / "r.locus"
    router.save(path)
    loaded = LocusRouter.load(path)
    assert loaded.get_params()["embedder__random_state"] == 7
    assert loaded.embedder_.random_state == 7
    assert loaded.get_params()["embedder__device"] is None
    assert loaded.embedder_.device is None
    assert LocusRouter.load(path, device="cpu").embedder_.device == "cpu"
    params = {k: v for k, v in router.get_params().items() if k != "embedder"}
    loaded_params = {k: v for k, v in loaded.get_params().items() if k != "embedder"}
    assert loaded_params.keys() == params.keys()
    for name, value in params.items():
        if not name.endswith("encoder"):  # saved apart: a copy of the mapping
            assert loaded_params[name] == value, name
    # A clone of the loaded router refits as the original was fitted.
    refit = clone(loaded).fit(pool.evals)
    assert_reproduced(refit.model_embeddings_, router.model_embeddings_)
    router.embedder_.save(tmp_path / "e.locus")
    assert LocusEmbedder.load(tmp_path / "e.locus").random_state == 7


def test_a_random_state_instance_is_saved_as_none_with_a_warning(
    tmp_path, tiny_embedder, pool
):
    embedder = tiny_embedder(
        pool.encodings, max_epochs=1, random_state=np.random.RandomState(0)
    ).fit(pool.evals)
    with pytest.warns(UserWarning, match="random_state is a RandomState instance"):
        embedder.save(tmp_path / "e.locus")
    assert LocusEmbedder.load(tmp_path / "e.locus").random_state is None


@pytest.mark.parametrize(
    "value, valid",
    [(None, True), (0, True), (2**32 - 1, True), ("missing", True),
     (-1, False), (2**32, False), (1.5, False), (True, False), ("0", False)],
)  # fmt: skip
def test_the_saved_random_state_is_checked_as_fit_checks_it(
    tmp_path, router, value, valid
):
    path = tmp_path / "r.locus"
    router.save(path)
    metadata, tensors, _ = read_file(path, "LocusRouter")
    if value == "missing":  # a file of a version that did not save it
        del metadata["params"]["random_state"]
    else:
        metadata["params"]["random_state"] = value
    write_file(tmp_path / "edited.locus", metadata, tensors)
    if valid:
        expected = None if value == "missing" else value
        loaded = LocusRouter.load(tmp_path / "edited.locus")
        assert loaded.embedder_.random_state == expected
        assert loaded.get_params()["embedder__random_state"] == expected
    else:
        with pytest.raises(
            ValueError, match=r"header field 'params' is invalid \(.*random_state"
        ):
            LocusRouter.load(tmp_path / "edited.locus")


def test_save_stores_the_fitted_encoder_not_one_set_after_fit(tmp_path, tiny_embedder):
    """An encoder set after fit (no refit) is not the one transform encodes
    with; save stored it, so the loaded embedder encoded otherwise (or the
    file was refused at load, for a mapping of another dimension)."""
    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    encodings = dict(pool.encodings)
    keys = list(encodings)
    shifted = {k: encodings[keys[(i + 1) % len(keys)]] for i, k in enumerate(keys)}
    embedder = tiny_embedder(encodings, max_epochs=1).fit(pool.evals)
    router = LocusRouter(tiny_embedder(encodings, max_epochs=1), shrinkage=None)
    router.fit(pool.evals)
    queries = keys[:10]
    for other in (shifted, {k: np.ones(3) for k in keys}):
        embedder.set_params(encoder=other)
        embedder.save(tmp_path / "e.locus")
        loaded = LocusEmbedder.load(tmp_path / "e.locus")
        np.testing.assert_array_equal(
            loaded.transform(pool.evals), embedder.transform(pool.evals)
        )
        np.testing.assert_array_equal(loaded.encoder[keys[0]], encodings[keys[0]])
        # The router's save goes through the same path.
        router.embedder_.set_params(encoder=other)
        router.save(tmp_path / "r.locus")
        np.testing.assert_array_equal(
            LocusRouter.load(tmp_path / "r.locus").predict_proba(queries),
            router.predict_proba(queries),
        )


def test_a_fitted_query_encoder_is_saved_as_the_encoder_its_fit_resolved(
    tmp_path, tiny_embedder
):
    """encoder_spec read a fitted QueryEncoder's ``encoder`` parameter, not
    the encoder its fit resolved, which transform uses: one set on the
    embedder's ``encoder_`` after fit (no refit) was saved, and the loaded
    embedder encoded with it."""
    from locus_sklearn import QueryEncoder
    from locus_sklearn._persistence import encoder_spec

    fitted = {"q1": [1.0, 0.0], "q2": [0.0, 2.0]}
    other = {"x": [3.0, 4.0]}
    encoder = QueryEncoder(fitted).fit().set_params(encoder=other)
    spec, tensors = encoder_spec(encoder)
    assert spec == {"kind": "mapping", "keys": ["q1", "q2"]}
    # float32 holds these exactly: stored as given.
    np.testing.assert_array_equal(
        tensors["encoder.vectors"].numpy(), [[1.0, 0.0], [0.0, 2.0]]
    )
    # A directory set after fit was described as a "path" encoder.
    encoder.set_params(encoder=str(tmp_path))
    assert encoder_spec(encoder)[0] == {"kind": "mapping", "keys": ["q1", "q2"]}
    # An unfitted encoder is described by its parameter, as before.
    assert encoder_spec(QueryEncoder(other))[0] == {"kind": "mapping", "keys": ["x"]}

    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    encodings = dict(pool.encodings)
    keys = list(encodings)
    shifted = {k: encodings[keys[(i + 1) % len(keys)]] for i, k in enumerate(keys)}
    embedder = tiny_embedder(encodings, max_epochs=1).fit(pool.evals)
    expected = embedder.transform(pool.evals)
    embedder.encoder_.set_params(encoder=shifted)
    np.testing.assert_array_equal(embedder.transform(pool.evals), expected)
    embedder.save(tmp_path / "e.locus")
    loaded = LocusEmbedder.load(tmp_path / "e.locus")
    np.testing.assert_array_equal(loaded.transform(pool.evals), expected)
    np.testing.assert_array_equal(loaded.encoder[keys[0]], encodings[keys[0]])


@pytest.mark.parametrize(
    "key, value, error, match",
    [
        (7, [1.0] * 32, TypeError, "must have str keys.*e.g. \\[7\\]"),
        ("new", [np.nan] * 32, ValueError, "NaN or infinite values.*\\['new'\\]"),
        # Finite as a float64, past the range of the float32 the file stores.
        ("new", [1e39] * 32, ValueError, "beyond float32's range.*\\['new'\\]"),
        # Failed with numpy's bare "all input arrays must have the same shape".
        ("new", [1.0] * 5, ValueError, "inconsistent dimension.*'new': \\(5,\\)"),
        (
            None,
            [1.0] * 5,
            ValueError,
            "dimension 5, but the estimator was fitted on 32",
        ),
    ],
)
def test_save_checks_a_mapping_encoder_changed_after_fit(
    tmp_path, tiny_embedder, key, value, error, match
):
    # Each saved a file that load refused (or failed with numpy's error).
    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    encodings = dict(pool.encodings)
    embedder = tiny_embedder(encodings, max_epochs=1).fit(pool.evals)
    if key is None:  # every vector replaced, in the same dict
        encodings.update((k, np.asarray(value)) for k in list(encodings))
    else:
        encodings[key] = np.asarray(value)
    path = tmp_path / "e.locus"
    with pytest.raises(
        error, match=f"changed after fit and cannot be saved: .*{match}"
    ):
        embedder.save(path)
    assert not path.exists()


def test_a_router_on_a_frozen_embedder_loads_with_it_frozen(tmp_path, tiny_embedder):
    """Loaded with a plain, unfitted embedder as its parameter: a clone of
    the loaded router trained a new embedder where the original's clone
    reuses the frozen one."""
    from sklearn.base import clone
    from sklearn.frozen import FrozenEstimator

    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    models = pool.models["model"].tolist()
    trained = tiny_embedder(pool.encodings, max_epochs=1)
    trained.fit(pool.evals[pool.evals["model"].isin(models[:3])])
    router = LocusRouter(FrozenEstimator(trained), shrinkage=None).fit(pool.evals)
    path = tmp_path / "r.locus"
    router.save(path)
    loaded = LocusRouter.load(path)
    # As fit leaves them: one frozen embedder, parameter and fitted.
    assert isinstance(loaded.embedder, FrozenEstimator)
    assert loaded.embedder_ is loaded.embedder
    loaded.save(tmp_path / "again.locus")
    again = LocusRouter.load(tmp_path / "again.locus")
    assert isinstance(again.embedder, FrozenEstimator)
    queries = pool.evals["query"].unique()[:10]
    np.testing.assert_array_equal(
        clone(loaded).fit(pool.evals).predict_proba(queries),
        clone(router).fit(pool.evals).predict_proba(queries),
    )
    # Other routers' files are as before (readable by earlier versions).
    LocusRouter(tiny_embedder(pool.encodings, max_epochs=1), shrinkage=None).fit(
        pool.evals
    ).save(path)
    assert "frozen_embedder" not in read_file(path, "LocusRouter")[0]
    assert not isinstance(LocusRouter.load(path).embedder, FrozenEstimator)


def test_embedder_parameters_set_after_fit_survive_save_and_load(
    tmp_path, tiny_embedder
):
    """The parameter was rebuilt from the fitted embedder: embedder__<name>
    set after fit came back as the fitted value, and a clone of the loaded
    router trained another model than the original's clone."""
    from sklearn.base import clone

    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    router = LocusRouter(tiny_embedder(pool.encodings, max_epochs=1), shrinkage=None)
    router.fit(pool.evals)
    path = tmp_path / "r.locus"
    # Files of routers without such settings are as before.
    router.save(path)
    assert "embedder_params" not in read_file(path, "LocusRouter")[0]
    router.set_params(embedder__max_epochs=2, embedder__refine_steps=2)
    router.save(path)
    loaded = LocusRouter.load(path)
    assert loaded.get_params()["embedder__max_epochs"] == 2
    assert loaded.get_params()["embedder__refine_steps"] == 2
    # The fitted embedder is the one fitted.
    assert loaded.embedder_.max_epochs == 1
    assert loaded.embedder_.refine_steps == 0
    loaded.save(tmp_path / "again.locus")
    assert LocusRouter.load(tmp_path / "again.locus").embedder.max_epochs == 2
    np.testing.assert_array_equal(
        clone(loaded).fit(pool.evals).model_embeddings_,
        clone(router).fit(pool.evals).model_embeddings_,
    )
    # Checked as the fitted parameters are, at save and at load.
    router.set_params(embedder__max_epochs=0)
    with pytest.raises(ValueError, match="max_epochs"):
        router.save(tmp_path / "bad.locus")
    metadata, tensors, _ = read_file(path, "LocusRouter")
    metadata["embedder_params"]["max_epochs"] = 0
    write_file(path, metadata, tensors)
    with pytest.raises(ValueError, match="header field 'embedder_params' is invalid"):
        LocusRouter.load(path)


def _settings(embedder):
    """An embedder's parameters but its encoder, which a file's embedders
    share (the fitted one's)."""
    return {k: v for k, v in embedder.get_params().items() if k != "encoder"}


def test_an_embedder_parameter_replaced_after_fit_survives_save_and_load(
    tmp_path, tiny_embedder
):
    """save read the parameter as a LocusEmbedder's settings where it had
    ``_saved_params``, which a FrozenEstimator forwards to the embedder it
    wraps, and stored nothing for None: both loaded as a plain unfitted
    embedder (with the fitted settings for None), and a clone of the loaded
    router trained a network where the original's reuses the frozen one."""
    from sklearn.base import clone
    from sklearn.frozen import FrozenEstimator

    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    queries = pool.evals["query"].unique()[:10]
    router = LocusRouter(tiny_embedder(pool.encodings, max_epochs=1), shrinkage=None)
    router.fit(pool.evals)
    expected = router.predict_proba(queries)
    path = tmp_path / "r.locus"
    # Files of routers whose parameter is an embedder are as before.
    router.save(path)
    metadata = read_file(path, "LocusRouter")[0]
    assert not {"embedder_params", "frozen_embedder", "output_config"} & set(metadata)

    # None: LocusEmbedder() at the next fit, not the fitted settings; stored
    # as those settings (no new header field: earlier versions read it).
    router.set_params(embedder=None)
    router.save(path)
    metadata = read_file(path, "LocusRouter")[0]
    assert metadata["embedder_params"]["max_epochs"] == LocusEmbedder().max_epochs
    loaded = LocusRouter.load(path)
    assert type(loaded.embedder) is LocusEmbedder
    assert _settings(loaded.embedder) == _settings(LocusEmbedder())
    assert type(loaded.embedder_) is LocusEmbedder
    assert loaded.embedder_.max_epochs == 1
    np.testing.assert_array_equal(loaded.predict_proba(queries), expected)

    # The fitted embedder, frozen: loaded frozen, as a router fitted on it,
    # and a clone reuses its network on the same evaluations, giving the
    # fitted pool's embeddings back (the original's clone too).
    router.set_params(embedder=FrozenEstimator(router.embedder_))
    router.save(path)
    loaded = LocusRouter.load(path)
    assert isinstance(loaded.embedder, FrozenEstimator)
    assert loaded.embedder_ is loaded.embedder
    np.testing.assert_array_equal(loaded.predict_proba(queries), expected)
    for original in (router, loaded):
        refit = clone(original).fit(pool.evals)
        np.testing.assert_array_equal(refit.model_embeddings_, router.model_embeddings_)

    # A router fitted on a frozen embedder, its parameter replaced after fit:
    # embedder_ stays frozen, the parameter is what it was set to.
    frozen = LocusRouter(FrozenEstimator(router.embedder_), shrinkage=None)
    frozen.fit(pool.evals)
    frozen.set_params(embedder=tiny_embedder(pool.encodings, max_epochs=2))
    frozen.save(path)
    loaded = LocusRouter.load(path)
    assert type(loaded.embedder) is LocusEmbedder
    assert loaded.embedder.max_epochs == 2 and not hasattr(loaded.embedder, "net_")
    assert isinstance(loaded.embedder_, FrozenEstimator)
    assert loaded.embedder_.estimator.max_epochs == 1
    np.testing.assert_array_equal(loaded.predict_proba(queries), expected)
    frozen.set_params(embedder=None)
    frozen.save(path)
    loaded = LocusRouter.load(path)
    assert _settings(loaded.embedder) == _settings(LocusEmbedder())
    assert isinstance(loaded.embedder_, FrozenEstimator)


def test_a_frozen_parameter_other_than_the_fitted_embedder_is_refused_at_save(
    tmp_path, tiny_embedder
):
    """A file holds one network, the fitted embedder's: the other frozen
    embedder was saved as its settings and loaded as an unfitted one."""
    from sklearn.frozen import FrozenEstimator
    from sklearn.preprocessing import StandardScaler

    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    other = tiny_embedder(pool.encodings, max_epochs=1, random_state=1)
    other.fit(pool.evals)
    path = tmp_path / "r.locus"
    for embedder in (
        tiny_embedder(pool.encodings, max_epochs=1),
        FrozenEstimator(other),
    ):
        router = LocusRouter(embedder, shrinkage=None).fit(pool.evals)
        router.set_params(embedder=FrozenEstimator(copy.deepcopy(other)))
        with pytest.raises(
            ValueError,
            match="embedder parameter, set after fit, is FrozenEstimator\\("
            "LocusEmbedder\\(...\\)\\) wrapping an embedder other than the "
            "fitted one \\(embedder_\\).* or pickle the router",
        ):
            router.save(path)
        assert not path.exists()
    router.set_params(embedder=StandardScaler())
    with pytest.raises(
        ValueError,
        match="embedder must be None, a LocusEmbedder or a FrozenEstimator "
        "wrapping the fitted embedder_; got StandardScaler",
    ):
        router.save(path)
    assert not path.exists()


def test_the_output_configuration_survives_save_and_load(tmp_path, tiny_embedder):
    """save dropped set_output(transform="pandas"), which clone, pickle and
    deepcopy keep: the loaded embedder's transform gave an ndarray, without
    the models' names."""
    import pandas as pd
    from sklearn import config_context

    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    embedder = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
    path = tmp_path / "e.locus"
    # Files of embedders without it are as before (readable by earlier
    # versions), and load without it.
    embedder.save(path)
    assert "output_config" not in read_file(path, "LocusEmbedder")[0]
    assert isinstance(LocusEmbedder.load(path).transform(pool.evals), np.ndarray)
    embedder.set_output(transform="pandas").save(path)
    loaded = LocusEmbedder.load(path)
    got = loaded.transform(pool.evals)
    assert isinstance(got, pd.DataFrame)
    assert got.index.tolist() == sorted(pool.models["model"])
    pd.testing.assert_frame_equal(got, embedder.transform(pool.evals))
    # "default" is kept too: it overrides a global pandas configuration.
    embedder.set_output(transform="default").save(path)
    with config_context(transform_output="pandas"):
        assert isinstance(LocusEmbedder.load(path).transform(pool.evals), np.ndarray)
    # Refused at save as load refuses it (set_output stores any value).
    embedder.set_output(transform="xml")
    with pytest.raises(
        ValueError,
        match="set_output\\(transform='xml'\\) cannot be saved: transform must be "
        "one of \\['default', 'pandas', 'polars'\\]",
    ):
        embedder.save(tmp_path / "bad.locus")

    # A router: its fitted embedder keeps the configuration, and so does the
    # parameter (clone gave embedder_ the parameter's at fit) ...
    param = tiny_embedder(pool.encodings, max_epochs=1).set_output(transform="pandas")
    router = LocusRouter(param, shrinkage=None).fit(pool.evals)
    router.save(path)
    loaded = LocusRouter.load(path)
    assert isinstance(loaded.embedder_.transform(pool.evals), pd.DataFrame)
    assert loaded.embedder._sklearn_output_config == {"transform": "pandas"}
    # ... or its own, where set after fit.
    router.embedder.set_output(transform="default")
    router.save(path)
    assert read_file(path, "LocusRouter")[0]["embedder_output_config"] == {
        "transform": "default"
    }
    loaded = LocusRouter.load(path)
    assert loaded.embedder._sklearn_output_config == {"transform": "default"}
    assert loaded.embedder_._sklearn_output_config == {"transform": "pandas"}


def test_an_embedder_saves_without_its_mapping_encoder(
    tmp_path, tiny_embedder, monkeypatch
):
    """LocusEmbedder.save had no include_query_text: a mapping with long
    query texts as keys (a header over 100 MB) could not be saved at all."""
    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    embedder = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
    path = tmp_path / "e.locus"
    embedder.save(path, include_query_text=False)
    metadata, tensors, _ = read_file(path, "LocusEmbedder")
    assert metadata["encoder"] == {"kind": "hashed_mapping"}
    assert "encoder.vectors" not in tensors
    with pytest.raises(ValueError, match="saved without query text"):
        LocusEmbedder.load(path)
    loaded = LocusEmbedder.load(path, encoder=dict(pool.encodings))
    np.testing.assert_array_equal(
        loaded.transform(pool.evals), embedder.transform(pool.evals)
    )
    with pytest.raises(TypeError, match="include_query_text must be True or False"):
        embedder.save(path, include_query_text="no")

    def too_large(tensors, metadata=None):
        raise SafetensorError("Error while serializing: header too large")

    monkeypatch.setattr(_files_module, "save", too_large)
    with pytest.raises(ValueError, match="save\\(path, include_query_text=False\\)"):
        embedder.save(path)


def test_a_concurrent_save_leaves_a_new_temporary_file_alone(tmp_path, monkeypatch):
    """The temporary file was locked only after os.fdopen: a save of the same
    target that finished in between took it for a killed save's leftover and
    deleted it, and the first save failed with FileNotFoundError."""
    pytest.importorskip("fcntl")
    path = tmp_path / "router.locus"
    real_fdopen = os.fdopen
    interrupted = []

    def fdopen(fd, *args, **kwargs):
        if not interrupted:
            interrupted.append(fd)
            _write(path, value=1.0)  # the other save, start to finish
        return real_fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)
    _write(path, value=2.0)
    assert read_file(path, "Test")[0]["value"] == 2.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["router.locus"]


def test_a_young_empty_temporary_file_is_left_for_a_minute(tmp_path):
    # A save between creating its file and locking it: empty and unlocked.
    path = tmp_path / "router.locus"
    young = tmp_path / ".router.locus.0123456789abcdef.tmp"
    young.touch()
    _write(path)
    assert young.exists()
    os.utime(young, (0, 0))
    _write(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["router.locus"]


def test_a_path_ending_in_a_separator_is_refused(tmp_path):
    # write_bytes("dir/out/") wrote a file named "out".
    with pytest.raises(IsADirectoryError, match="ends with a path separator") as info:
        _files_module.write_bytes(str(tmp_path / "out") + os.sep, b"x")
    assert info.value.errno == 21
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name, kind, reason",
    [
        # Resolved first: a file "newname" was written, "notes.txt" replaced,
        # "r.locus" written beside the folder that does not exist; open()
        # refuses all of them.
        (
            "newname/.",
            IsADirectoryError,
            "its last part is '.', so it names a folder; give a file name",
        ),
        (
            "notes.txt/.",
            IsADirectoryError,
            "its last part is '.', so it names a folder; give a file name",
        ),
        (
            "missing/sub/..",
            IsADirectoryError,
            "its last part is '..', so it names a folder; give a file name",
        ),
        (
            "missing/../r.locus",
            FileNotFoundError,
            "its folder 'missing/..' does not exist",
        ),
        (
            "notes.txt/../r.locus",
            NotADirectoryError,
            "'notes.txt' is a file, not a folder",
        ),
    ],
)
def test_a_path_open_refuses_is_refused(tmp_path, monkeypatch, name, kind, reason):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("my notes")
    with pytest.raises(kind) as info:
        _write(name)
    assert (info.value.strerror, info.value.filename) == (reason, name)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "my notes"


def test_saving_to_a_loop_of_links_is_refused_and_keeps_them(tmp_path):
    # realpath leaves a loop as it is: the link was replaced by a file.
    loop = tmp_path / "loop1"
    os.symlink("loop2", loop)
    os.symlink("loop1", tmp_path / "loop2")
    with pytest.raises(OSError) as info:
        _write(loop)
    assert (info.value.errno, info.value.filename) == (errno.ELOOP, str(loop))
    assert loop.is_symlink() and os.readlink(loop) == "loop2"


def test_a_leading_tilde_is_the_home_folder(tmp_path, monkeypatch):
    # Taken as a folder named "~" in the working folder, as load_evals and
    # the encoder paths never took it: with one there, a save went into it.
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "~").mkdir()
    _write("~/router.locus", value=3.0)
    assert [p.name for p in home.iterdir()] == ["router.locus"]
    assert list((tmp_path / "~").iterdir()) == []
    assert read_file("~/router.locus", "Test")[0]["value"] == 3.0
    _files_module.check_regular_file("~/router.locus")
    with pytest.raises(FileNotFoundError) as info:
        _write("~/missing/router.locus")
    assert info.value.filename == "~/missing/router.locus"  # as given
    assert info.value.strerror == f"its folder {str(home / 'missing')!r} does not exist"
    os.chmod(home / "router.locus", 0o444)
    if not os.access(home / "router.locus", os.W_OK):  # root writes any file
        assert _files_module.target_problem("~/router.locus")[0] is PermissionError


def test_a_long_file_name_saves_and_its_leftovers_are_removed(tmp_path):
    # A name open() accepts failed: the temporary name added 22 characters
    # ("File name too long").
    path = tmp_path / ("y" * 240 + ".locus")
    _write(path, value=1.0)
    assert read_file(path, "Test")[0]["value"] == 1.0
    _crash_during_save(path)
    (left,) = [p.name for p in tmp_path.iterdir() if p != path]
    assert len(left) <= 255 and left.startswith(".yyy")
    _write(path, value=2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_tiny_mapping_vector_keeps_its_direction_through_save(
    tmp_path, tiny_embedder
):
    """A vector of entries near 1e-50 encodes by its direction (normalised in
    float64), but was stored cast to float32: zeros, so the loaded router
    encoded that query as a zero vector, another query than the saved one's."""
    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    encodings = dict(pool.encodings)
    tiny = next(iter(encodings))
    encodings[tiny] = np.asarray(encodings[tiny], dtype=np.float64) * 1e-50
    router = LocusRouter(tiny_embedder(encodings, max_epochs=1), shrinkage=None)
    router.fit(pool.evals)
    path = tmp_path / "r.locus"
    router.save(path)
    loaded = LocusRouter.load(path)
    # Stored as its float32 encoding (a unit vector), not a zero vector: the
    # same encoding after load.
    np.testing.assert_array_equal(
        loaded.encoder_.transform([tiny]), router.encoder_.transform([tiny])
    )
    np.testing.assert_array_equal(
        loaded.predict_proba([tiny]), router.predict_proba([tiny])
    )


def test_a_float64_mapping_encoder_loads_bit_for_bit(tmp_path, tiny_embedder):
    """Vectors float32 does not hold (numpy's float64) were stored rounded,
    then normalised at load, where fit normalised then rounded: most
    encodings, and so predict_proba, moved by a float32 step after load."""
    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    rng = np.random.RandomState(0)
    encodings = {key: rng.randn(32) for key in pool.encodings}
    # Held exactly by float32: stored as it is.
    encodings["never used"] = np.arange(32.0)
    router = LocusRouter(tiny_embedder(encodings, max_epochs=1), shrinkage=None)
    router.fit(pool.evals)
    path = tmp_path / "r.locus"
    router.save(path)
    loaded = LocusRouter.load(path)
    queries = list(pool.encodings)
    np.testing.assert_array_equal(
        loaded.encoder_.transform(queries), router.encoder_.transform(queries)
    )
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), router.predict_proba(queries)
    )
    np.testing.assert_array_equal(
        loaded.embedder_.encoder["never used"], np.arange(32.0)
    )
    router.embedder_.save(tmp_path / "e.locus")
    embedder = LocusEmbedder.load(tmp_path / "e.locus")
    np.testing.assert_array_equal(
        embedder.transform(pool.evals), router.embedder_.transform(pool.evals)
    )


def _text_evals():
    """Three models scored on 16 short texts (for a model-directory encoder)."""
    import pandas as pd

    texts = [f"question number {i} about topic {i % 5}" for i in range(16)]
    rng = np.random.RandomState(0)
    rows = [
        (model, text, float(rng.rand() < 0.3 + 0.2 * i))
        for i, model in enumerate("abc")
        for text in texts
    ]
    return pd.DataFrame(rows, columns=["model", "query", "score"]), texts


@pytest.mark.parametrize("given", ["mini", "~/mini"])
def test_a_model_directory_encoder_is_saved_as_the_directory_fit_used(
    tmp_path, tiny_embedder, monkeypatch, given
):
    """The file stored the parameter resolved again at save: "~" read
    literally (a file that could not be loaded), and a relative path against
    the working directory of save, whose directory of that name the loaded
    router then encoded with, another model than the fitted one."""
    from locus_sklearn._encoders import _default_model_path

    model = _default_model_path()
    for folder in ("home", "fit", "save"):
        (tmp_path / folder).mkdir()
    (tmp_path / "home" / "mini").symlink_to(model)
    (tmp_path / "fit" / "mini").symlink_to(model)
    # Another "model" of that name where save runs (a config.json is all a
    # directory needs to pass as one until something is encoded).
    (tmp_path / "save" / "mini").mkdir()
    (tmp_path / "save" / "mini" / "config.json").write_text("{}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "fit")
    evals, texts = _text_evals()
    embedder = tiny_embedder(given, max_epochs=1, device="cpu").fit(evals)
    monkeypatch.chdir(tmp_path / "save")
    embedder.save(tmp_path / "e.locus")
    loaded = LocusEmbedder.load(tmp_path / "e.locus")
    assert loaded.encoder_.model_path_ == embedder.encoder_.model_path_ == str(model)
    np.testing.assert_array_equal(loaded.transform(evals), embedder.transform(evals))


def test_a_missing_encoder_directory_is_named_with_the_way_out(router, tmp_path):
    """The error was the encoder's own at fit: hub names, and "encoder=None
    uses the bundled model", where load's encoder=None uses the stored one;
    it named neither the file nor load(path, encoder=...)."""
    gone = tmp_path / "gone-encoder"

    def edit(metadata, tensors):
        metadata["encoder"] = {"kind": "path", "path": str(gone)}
        tensors.pop("encoder.vectors")

    path = _edited(router, tmp_path, edit, embedder=True)
    match = (
        "The LocusEmbedder in '.*edited.safetensors' was fitted with the query "
        "encoder model directory '.*gone-encoder', which does not exist here. "
        "Pass that model .* with load\\(path, encoder=\\.\\.\\.\\)\\.$"
    )
    with pytest.raises(ValueError, match=match):
        LocusEmbedder.load(path)
    gone.mkdir()  # there, but no model
    with pytest.raises(ValueError, match="which cannot be used here \\(encoder="):
        LocusEmbedder.load(path)


def _without_checksum(path):
    """Rewrite the saved file ``path`` with its checksum field removed."""
    from safetensors import safe_open
    from safetensors.torch import load, save

    with safe_open(str(path), "pt") as handle:
        header = handle.metadata()
    tensors = load(path.read_bytes())
    del header["checksum"]
    path.write_bytes(save(tensors, metadata=header))


def test_a_removed_checksum_is_refused_where_one_was_written(router, tmp_path):
    """A missing checksum was taken for a file from before checksums, so an
    edited file (a tensor swapped in, the checksum deleted) loaded unchecked,
    although it held fields only versions writing checksums write."""
    path = tmp_path / "r.locus"
    router.save(path)
    _without_checksum(path)
    with pytest.raises(
        ValueError,
        match="header field 'checksum' is missing, but the file holds the "
        "header field 'shrinkage', which only versions that write a checksum",
    ):
        LocusRouter.load(path)
    # An embedder's file: its hyper-parameters are of checksum-era versions.
    router.embedder_.save(path)
    _without_checksum(path)
    with pytest.raises(ValueError, match="checksum' is missing, .*hyper-parameter"):
        LocusEmbedder.load(path)
