"""Where a benchmark figure comes from: the commit and the machine."""

import json
import os
import platform
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_commit():
    """Short hash of the checkout's HEAD, or the ``LOCUS_COMMIT`` variable
    where it is set (a copy of the tree run on another machine, whose .git may
    not be the one that made it); "unknown" outside a git checkout."""
    if os.environ.get("LOCUS_COMMIT"):
        return os.environ["LOCUS_COMMIT"]
    try:
        return subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def git_dirty():
    """The package's files with uncommitted changes (the commit alone does not
    pin the code that ran), or None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--", "locus_sklearn"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return [line[3:] for line in out.stdout.splitlines()]


def cpu_model():
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what
    :mod:`platform` knows (on Linux only the architecture, ``x86_64``, which
    does not tell two machines apart)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def torch_device(device=None):
    """The device a LOCUS fit with ``device=device`` trains on (None: CUDA
    where torch sees a GPU, as the estimators choose), with the GPU's name."""
    import torch

    from locus_sklearn._device import resolve_device

    resolved = resolve_device(device)
    if torch.device(resolved).type == "cuda":
        return f"{resolved} ({torch.cuda.get_device_name(resolved)})"
    return resolved


def machine_info(**extra):
    """CPU model and core count, plus ``extra`` fields (torch threads, load,
    device)."""
    return {
        "processor": cpu_model(),
        "cores": os.cpu_count(),
        **extra,
    }


def stamp(**machine):
    """The date, commit and machine (``machine_info(**machine)``) that open a
    benchmark's result."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "commit": git_commit(),
        "machine": machine_info(**machine),
    }


def write_result(stem, result, report):
    """``result`` to ``stem``.json and ``report(result)`` (markdown) to
    ``stem``.md, making the folder; prints the report."""
    os.makedirs(os.path.dirname(stem) or ".", exist_ok=True)
    with open(stem + ".json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    text = report(result)
    with open(stem + ".md", "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)
