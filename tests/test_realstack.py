"""The choice of real servers: the newest folder beside the clone, an older one only with a line that says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import realstack


def _folder(root: Path, name: str, *, executable: bool = True) -> Path:
    folder = root / "shared" / name
    folder.mkdir(parents=True)
    for script in ("start.sh", "stop.sh"):
        (folder / script).write_text("#!/bin/sh\n")
        (folder / script).chmod(0o755 if executable else 0o644)
    return folder


@pytest.fixture
def beside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clone at ``tmp_path/clone`` with nothing beside it yet, and no REALSTACK_DIR."""
    monkeypatch.setattr(realstack, "ROOT", tmp_path / "clone")
    monkeypatch.delenv("REALSTACK_DIR", raising=False)
    return tmp_path


def test_the_newest_servers_are_chosen_when_both_folders_are_there(beside: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """With both folders beside the clone, Kafka 4.4 / Cassandra 5.0 run the tests, and nothing is said."""
    _folder(beside, "realstack")
    newest = _folder(beside, "realstack-next")
    assert realstack.find() == newest.resolve()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("executable", [True, False], ids=["missing", "not-executable"])
def test_a_missing_or_unusable_newest_folder_falls_back_with_a_line(beside: Path, executable: bool,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """No usable realstack-next: the older folder is taken, and stderr names both."""
    older = _folder(beside, "realstack")
    if not executable:
        _folder(beside, "realstack-next", executable=False)
    assert realstack.find() == older.resolve()
    assert "realstack-next is missing or unusable; falling back to" in capsys.readouterr().err


def test_servers_that_do_not_start_fall_back_to_the_next_folder_only_when_none_was_named(
        beside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A realstack-next whose start fails is followed by realstack; a folder named by REALSTACK_DIR has none."""
    older, newest = _folder(beside, "realstack"), _folder(beside, "realstack-next")
    assert realstack.fallback(newest.resolve()) == older.resolve()
    assert realstack.fallback(older.resolve()) is None
    monkeypatch.setenv("REALSTACK_DIR", str(newest))
    assert realstack.fallback(newest.resolve()) is None


def test_no_folder_at_all_is_none(beside: Path) -> None:
    """Nothing beside the clone and nothing named: no folder (CI then runs without real servers, and says so)."""
    assert realstack.find() is None
