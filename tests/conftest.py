"""Shared fixtures. Tests that read ../shared/data use `shared_data`, which skips with a reason when
the folder is absent (it is beside the repository in development and CI, never copied into it)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceforge import store

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
SAMPLE_TRACES = REPO / "sample_traces"


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real recorded traces not available: {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.duckdb"


@pytest.fixture
def con(db_path: Path):
    connection = store.connect(db_path)
    yield connection
    connection.close()


@pytest.fixture
def db(tmp_path: Path, db_path: Path) -> Path:
    """The export tests' store: their transcripts and dependency rows (`export_helpers.build_store`)."""
    from export_helpers import build_store

    con = store.connect(db_path)
    build_store(con, tmp_path)
    con.close()
    return db_path


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's headless Chromium, installed by the test set-up where it can be (root with apt-get,
    as in CI). In CI its absence fails the run; elsewhere the browser tests skip with the reason."""
    import os

    from browser import ensure_chromium

    found = ensure_chromium()
    if found:
        return found
    message = "Chromium is not installed and could not be installed (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where tests keep what a person may want to look at afterwards (screenshots); gitignored."""
    folder = REPO / "test-artifacts"
    folder.mkdir(exist_ok=True)
    return folder


class Killed(BaseException):
    """A process killed at that point: nothing after it runs (`except Exception` does not catch it)."""


@contextlib.contextmanager
def killed_at_file_step(folder: Path, k: int) -> Iterator[list[Path]]:
    """Within the block, the k-th (0-based) file removed or renamed in `folder` raises Killed
    instead, the file left as it was; yields the list of the steps taken (each one's path)."""
    taken: list[Path] = []

    def step(original):
        def guarded(self, *args, **kwargs):
            if Path(self).is_relative_to(folder):
                if len(taken) == k:
                    raise Killed(f"killed before {self}")
                taken.append(Path(self))
            return original(self, *args, **kwargs)

        return guarded

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "replace", step(Path.replace))
        patch.setattr(Path, "unlink", step(Path.unlink))
        yield taken
