"""A base revision checked out beside this one, for side-by-side A/B runs."""

import contextlib
import datetime
import json
import os
import subprocess
import sys
import tempfile

from _provenance import ROOT, git_commit, machine_info


def short_revision(rev):
    """``rev``'s short hash (raises CalledProcessError for an unknown one)."""
    return subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", rev],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@contextlib.contextmanager
def base_worktree(rev):
    """A temporary detached git worktree of ``rev``, removed on exit."""
    with tempfile.TemporaryDirectory() as scratch:
        tree = os.path.join(scratch, "base")
        subprocess.run(
            ["git", "-C", ROOT, "worktree", "add", "--detach", "-q", tree, rev],
            check=True,
        )
        try:
            yield tree
        finally:
            subprocess.run(
                ["git", "-C", ROOT, "worktree", "remove", "--force", tree],
                check=False,
            )


def run_child(tree, code, *args):
    """Run ``code`` in a fresh Python with ``tree``'s checkout first on the
    path (``sys.argv[1:]`` = ``tree, *args``); the last line it prints, as JSON."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run(
        [sys.executable, "-c", code, tree, *map(str, args)],
        capture_output=True, text=True, check=True, env=env, cwd=tree,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def this_revision():
    """This checkout's commit, marked when the working tree differs from it
    (the A/B's "this" arm is the working tree)."""
    dirty = subprocess.run(
        ["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return git_commit() + ("+uncommitted changes" if dirty else "")


def write_ab_result(out, name, base, **fields):
    """Write ``out/name``: the run's date, this revision, ``base`` and the
    machine (with its load), then ``fields``."""
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M UTC"
        ),
        "commit": this_revision(),
        "base": base,
        "machine": machine_info(load=os.getloadavg()),
        **fields,
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name), "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    return result
