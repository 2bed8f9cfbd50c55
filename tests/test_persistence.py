"""Saved files (``_persistence``): save / load round trips of LocusEmbedder and
LocusRouter, corrupt and foreign files, permissions, symlinks, temporary files
and clear write errors.

``write_file`` is the one writer behind every ``save`` and ``locus onboard``;
the file-system tests call it directly with tiny tensors.
"""

import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from locus_sklearn import LocusEmbedder, LocusRouter
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
    busy = tmp_path / ".router.locus.0123abcd.tmp"
    with open(busy, "wb") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        _write(path)
        assert busy.exists()
    _write(path)
    assert not busy.exists()


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
    with pytest.raises(
        PermissionError, match="router.locus.*Permission denied"
    ) as info:
        _write(tmp_path / "router.locus")
    assert ".tmp" not in str(info.value) and info.value.errno == 13
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "router.locus"
    _write(path)
    before = path.read_bytes()

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="router.locus.*No space left") as info:
        _write(path, value=4.0)
    assert ".tmp" not in str(info.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["router.locus"]


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
