"""The code stays ruff clean (lint and format), checked where CI checks everything else."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_ruff_check_and_format_are_clean():
    for args in (["check", "--quiet", "."], ["format", "--check", "--quiet", "."]):
        run = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True)
        assert run.returncode == 0, f"ruff {' '.join(args)}:\n{run.stdout}{run.stderr}"
