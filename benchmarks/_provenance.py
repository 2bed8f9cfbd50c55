"""Where a benchmark figure comes from: the commit and the machine."""

import os
import platform
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_commit():
    """Short hash of the checkout's HEAD, or "unknown" outside a git checkout."""
    try:
        return subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine_info(**extra):
    """Processor and core count, plus ``extra`` fields (torch threads, load)."""
    return {
        "processor": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        **extra,
    }
