"""A run folder's life (:mod:`sweep.lifecycle`): what an interrupted run removes, and never,
``outputs/latest``, and the command that resumes a run."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from sweep.lifecycle import Claim, resume_command, update_latest


def test_an_empty_interrupted_run_removes_its_folders_and_no_other(tmp_path: Path) -> None:
    run = tmp_path / "outputs" / "2026-11-30" / "14-03-22"
    claim = Claim.before(run)
    assert claim.first_new == tmp_path / "outputs"
    (run / ".sweep").mkdir(parents=True)
    other = tmp_path / "outputs" / "2026-11-30" / "14-03-23"  # another sweep's, meanwhile
    other.mkdir()
    assert claim.discard_if_nothing_kept(kept=False)
    assert not run.exists() and other.is_dir()  # the shared parents stay while not empty
    assert not claim.discard_if_nothing_kept(kept=False)  # gone already: nothing to say


def test_folders_that_existed_or_kept_results_stay(tmp_path: Path) -> None:
    existing = tmp_path / "mine"
    existing.mkdir()
    assert not Claim.before(existing).discard_if_nothing_kept(kept=False)
    assert existing.is_dir()
    fresh = tmp_path / "new" / "run"
    claim = Claim.before(fresh)
    fresh.mkdir(parents=True)
    assert not claim.discard_if_nothing_kept(kept=True)
    assert fresh.is_dir()
    claim.discard_if_nothing_kept(kept=False)
    assert not (tmp_path / "new").exists()  # emptied: removed up to what existed


def test_latest_points_at_the_last_run_under_outputs(tmp_path: Path) -> None:
    first = tmp_path / "outputs" / "a" / "1"
    second = tmp_path / "outputs" / "b"
    for run in (first, second):
        run.mkdir(parents=True)
    assert update_latest(first, cwd=tmp_path) == tmp_path / "outputs" / "latest"
    assert (tmp_path / "outputs" / "latest").resolve() == first.resolve()
    update_latest(second, cwd=tmp_path)
    assert (tmp_path / "outputs" / "latest").resolve() == second.resolve()
    # resuming through the link keeps it on the same folder
    update_latest(tmp_path / "outputs" / "latest", cwd=tmp_path)
    assert (tmp_path / "outputs" / "latest").resolve() == second.resolve()
    # elsewhere than outputs/: not the link's business
    assert update_latest(tmp_path / "elsewhere", cwd=tmp_path) is None
    assert (tmp_path / "outputs" / "latest").resolve() == second.resolve()


def test_a_folder_named_latest_is_never_replaced(tmp_path: Path) -> None:
    mine = tmp_path / "outputs" / "latest"
    mine.mkdir(parents=True)
    (tmp_path / "outputs" / "run").mkdir()
    assert update_latest(tmp_path / "outputs" / "run", cwd=tmp_path) is None
    assert mine.is_dir() and not mine.is_symlink()


@pytest.mark.parametrize(
    ("folder", "expected"),
    [
        ("outputs/2026-11-30/14-03-22", "out_dir=outputs/2026-11-30/14-03-22"),
        ("my runs/a,b", "out_dir='my runs/a,b'"),
        ("résultats", "out_dir='résultats'"),
    ],
)
def test_the_resume_command_replaces_out_dir_and_parses_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str, expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    command = ["python", "-m", "sweep", "capacity=1,2", "out_dir=outputs/${now:%H}"]
    again = shlex.split(resume_command(command, tmp_path / folder))
    assert again == ["python", "-m", "sweep", "capacity=1,2", expected]
    from sweep.argv import rewrite_override

    assert rewrite_override(again[-1])  # Hydra's grammar takes it as written
