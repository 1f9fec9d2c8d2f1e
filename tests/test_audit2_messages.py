"""The second audit of issues 21 and 22: output paths (a trailing /, a symbolic link) and user
text bounded in every error line (a 100,000-character key, path or value; a 5,000-digit key or
integer), for the engine's commands and the sweep alike: one line, exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixsim import cli, convert, synth
from prefixsim._output import OutputError, atomic_output, check_output_path
from test_sweep_config_errors import cli as sweep_cli  # noqa: F401

LINE_LIMIT = 1100  # the edge's bound (prefixsim.errors.ERROR_LINE_CHARS) and its prefix

TRACE = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'


def _main_refuses(main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err[:2000]
    assert "Traceback" not in err and len(lines[0]) < LINE_LIMIT, len(lines[0])
    return lines[0]


# --- Partly 7: -o newdir/ wrote a file named newdir; -o link.json replaced the link -----------


@pytest.mark.parametrize("suffix", ["/", "//", "/./"[:-1] + "/"])
def test_an_output_path_ending_in_a_slash_is_refused(tmp_path: Path, suffix: str) -> None:
    with pytest.raises(OutputError, match="ends in '/'"):
        check_output_path(str(tmp_path / "newdir") + suffix)
    with pytest.raises(OutputError, match="ends in '/'"):
        check_output_path(str(tmp_path) + suffix)  # an existing directory, too
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("main", "argv"),
    [
        (cli.main, ["TRACE", "--capacity", "4", "--block-size", "16", "-o", "newdir/"]),
        (synth.main, ["newdir/", "--requests", "5"]),
        (convert.main, ["TRACE", "newdir/"]),
    ],
    ids=["prefixsim", "synth", "convert"],
)
def test_every_command_refuses_a_directory_path(
    main,  # type: ignore[no-untyped-def]
    argv: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("t.jsonl").write_text(TRACE)
    argv = [a.replace("TRACE", "t.jsonl") for a in argv]
    assert "ends in '/'" in _main_refuses(main, argv, capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


@pytest.mark.parametrize("chain", [1, 2])
@pytest.mark.parametrize("exists", [True, False])
def test_a_symbolic_link_is_followed_not_replaced(tmp_path: Path, chain: int, exists: bool) -> None:
    target = tmp_path / "real.json"
    if exists:
        target.write_text("old")
    link = target
    for i in range(chain):
        new = tmp_path / f"link{i}.json"
        new.symlink_to(link.name)
        link = new
    with atomic_output(link) as f:
        f.write(b"new")
    assert link.is_symlink()
    assert target.read_text() == "new"


def test_the_report_goes_through_the_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("t.jsonl").write_text(TRACE)
    Path("link.json").symlink_to("real.json")
    assert (
        cli.main(
            [
                "t.jsonl",
                "--policy",
                "LRU",
                "--capacity",
                "4",
                "--block-size",
                "16",
                "-o",
                "link.json",
            ]
        )
        == 0
    )
    assert Path("link.json").is_symlink()
    assert json.loads(Path("real.json").read_text())["total_prompt_tokens"] == 10


# --- Partly 8: user text bounded in every error line ------------------------------------------

LONG = "a" * 100_000
DIGITS = "9" * 5000


@pytest.mark.parametrize(
    "argv",
    [
        [f"{LONG}.jsonl", "--capacity", "4"],
        ["t.jsonl", "--capacity", "4", "--block-size", "16", "-o", f"{LONG}/x"],
        ["t.jsonl", "--capacity", "4", "--block-size", "16", "-o", LONG],
        ["t.jsonl", "--capacity", DIGITS],
        ["t.jsonl", "--block-size", DIGITS],
        ["t.jsonl", "--small-ratio", LONG],
        ["t.jsonl", "--policy", LONG],
        ["t.jsonl", f"--{LONG}"],
    ],
    ids=["trace", "out-dir", "out", "capacity", "block-size", "small-ratio", "policy", "flag"],
)
def test_the_replay_command_bounds_what_it_quotes(
    argv: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("t.jsonl").write_text(TRACE)
    _main_refuses(cli.main, argv, capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


@pytest.mark.parametrize(
    "typed",
    [
        f"{LONG}=1",
        f"+{LONG}=1",
        f"{DIGITS}=1",
        f"model.{LONG}=1",
        f"tiers.hbm.{LONG}=1",
        LONG,
        f"capacity={LONG}",
        f"capacity={DIGITS}",
        f"trace={LONG}",
        f"out_dir={LONG}/x",
    ],
    ids=["key", "+key", "digit-key", "model-key", "tier-key", "word", "value", "digits",
         "trace", "out_dir"],
)  # fmt: skip
def test_the_sweep_bounds_what_it_quotes(sweep_cli, tmp_path: Path, typed: str) -> None:  # noqa: F811  # type: ignore[no-untyped-def]
    code, lines = sweep_cli(typed)
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("sweep: error: "), lines
    assert len(lines[0]) < LINE_LIMIT, len(lines[0])
    assert not any(tmp_path.iterdir())
