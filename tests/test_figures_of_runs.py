"""Every figure of every bundled experiment and of every sweep command of the README reads well
and draws in the one style (:mod:`layout_checks`), on the bundled trace itself.

Each experiment (``conf/experiment/*.yaml``) runs as typed, at full size (its figures at full
size are what a user gets: a marker lost among 32 instances does not show among 4, and the
full grids cost no more time here than shrunk ones). Each README command runs as typed, on the
inputs the README's own lines write (:func:`input_lines`), except that a large grid is thinned
(fewer capacities, every figure kind and legend kept) and that placeholders (a trace under
``/data``, a folder of the user's) are replaced by files written here. Every figure kind is
drawn by at least one of the runs; within a run, a series has one colour, line style and
marker in every figure, and two policies never share a colour
(:func:`~layout_checks.run_problems`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from conftest import bundled_head
from layout_checks import problems, run_problems
from sweep import ExecutorConfig, run_sweep
from sweep.__main__ import CONF_DIR
from sweep.config import PlotConfig
from sweep.figures import RunData, SkipFigure, figure_kinds
from sweep.figures.data import load_results
from sweep.figures.style import style_context
from test_readme import MARK, SHELL, blocks, code_part, command_lines
from test_sweep import compose

README = Path(__file__).resolve().parents[1] / "README.md"
EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
TOOLAGENT = "toolagent_trace.jsonl"
README_INPUTS = ("my_tokens.jsonl", "chats.jsonl", "provider_trace.jsonl")
"""The files the README's blocks write for its commands to read, in order."""
README_SWEEPS: dict[str, list[str]] = {
    # the README's command (its arguments as typed) -> the arguments run here
    "": [],
    "capacity=1024,2048,4096 policy=S3FIFO,LRU": ["capacity=1024,2048,4096", "policy=S3FIFO,LRU"],
    "tiers=hbm_dram tiers.hbm.capacity=2048 tiers.dram.capacity=range(8192,131073,8192) "
    "tiers.dram.policy=S3FIFO,LRU": [
        "tiers=hbm_dram",
        "tiers.hbm.capacity=2048",
        "tiers.dram.capacity=range(8192,131073,8192)",
        "tiers.dram.policy=S3FIFO,LRU",
    ],
    "trace=my_tokens.jsonl block_size=16,64,256,512": [
        "trace=my_tokens.jsonl",
        "block_size=16,64,256,512",
    ],
    "trace=chats.jsonl block_size=16 chat_template=chatml": [
        "trace=chats.jsonl",
        "block_size=16",
        "chat_template=chatml",
    ],
    "trace=provider_trace.jsonl chain=true": ["trace=provider_trace.jsonl", "chain=true"],
    "capacity=4096": ["capacity=4096"],
    "capacity=1024,2048,4096": ["capacity=1024,2048,4096"],
    "capacity=range(1024,8193,1024)": ["capacity=range(1024,8193,1024)"],
    "capacity=choice(2048,8192) policy=S3FIFO": ["capacity=choice(2048,8192)", "policy=S3FIFO"],
    "trace=conversation,/data/toolagent_trace.jsonl": [f"trace=conversation,{TOOLAGENT}"],
    'trace=["my traces/a.jsonl","b,c.jsonl.gz"]': ['trace=["my traces/a.jsonl","b,c.jsonl"]'],
    "capacity=[1024,2048]": ["capacity=[1024,2048]"],
    "policy=S3FIFO small_ratio=range(0.1,1.0,0.05) capacity=2048,4096,8192,16384 "
    "out_dir=outputs/small_ratio": [
        "policy=S3FIFO",
        "small_ratio=range(0.1,1.0,0.05)",
        "capacity=2048,4096,8192,16384",
    ],
    "model=llama-3.1-70b cache_size=64GiB,256GiB,1TiB policy=S3FIFO,LRU": [
        "model=llama-3.1-70b",
        "cache_size=64GiB,256GiB,1TiB",
        "policy=S3FIFO,LRU",
    ],
    "model=deepseek-v3 model.kv_dtype=fp8 hardware=h200 cache_tier=rdma cache_size=1TiB": [
        "model=deepseek-v3",
        "model.kv_dtype=fp8",
        "hardware=h200",
        "cache_tier=rdma",
        "cache_size=1TiB",
    ],
    "instances=1,2,4,8,16 router=round_robin,session,kv_aware capacity=4096": [
        "instances=1,2,4,8,16",
        "router=round_robin,session,kv_aware",
        "capacity=4096",
    ],
}
NOT_RUN = {
    # README commands whose figures are those of a command above
    "executor=dask capacity=1024,2048,4096": "the grid of capacity=1024,2048,4096 on Dask",
    "executor=dask executor.address=tcp://scheduler:8786 capacity=range(256,65537,256)": (
        "a remote Dask cluster"
    ),
    "trace=conv.jsonl.gz": "the default grid on a generated trace",
    "trace=chats.jsonl block_size=16 tokenizer=/models/x/tokenizer.json": (
        "the chat command above with a tokenizer.json of the user's (a placeholder)"
    ),
}


def readme_sweeps(text: str) -> list[str]:
    """The arguments of every ``python -m sweep`` command in the README's shell blocks, as one
    string (continuation lines joined, comments and quotes dropped), experiments left out."""
    out = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            if not re.match(r"\s*python -m sweep(\s|$)", line):
                continue
            args = shlex.split(line.split("python -m sweep", 1)[1], comments=True)
            if not any(a.startswith("+experiment=") for a in args):
                out.append(" ".join(args))
    return out


def input_lines(text: str) -> list[str]:
    """The README's shell lines that write a file (``... > FILE``), in order: how the README
    makes the inputs its commands read (its ``python -m`` commands left out)."""
    out = []
    for lang, code, _ in blocks(text):
        if lang not in SHELL:
            continue
        for line in command_lines(code):
            writes = re.search(r">\s*[\w.,-]+\s*$", code_part(line))
            if writes and not MARK.search(line) and not re.match(r"\s*python -m\s", line):
                out.append(line)
    return out


def write_inputs(folder: Path) -> None:
    """The files the README's commands read: those its blocks write, by running the README's
    own lines (:func:`input_lines`; ``python`` this interpreter), and files standing for the
    user's (placeholders: a trace under ``/data``, a folder with a space) from the bundled
    trace."""
    script = 'python() { "$PY" "$@"; }\nset -euo pipefail\n' + "\n".join(
        input_lines(README.read_text())
    )
    env = {**os.environ, "PY": sys.executable}
    subprocess.run(["bash", "-c", script], cwd=folder, env=env, check=True, timeout=120)
    head = bundled_head(folder, 3000).read_text()
    (folder / TOOLAGENT).write_text(head)
    (folder / "my traces").mkdir(exist_ok=True)
    (folder / "my traces" / "a.jsonl").write_text(head)
    (folder / "b,c.jsonl").write_text(bundled_head(folder, 1500).read_text())


def run(folder: Path, overrides: list[str]) -> Path:
    cfg = compose(*overrides)
    cfg = dataclasses.replace(
        cfg,
        out_dir=str(folder / "run"),
        executor=ExecutorConfig(n_jobs=1),
        plot=PlotConfig(enabled=False),
        progress=False,
    )
    assert run_sweep(cfg).exit_code == 0
    return folder / "run"


def figures_of(run_dir: Path) -> dict[str, Figure]:
    """Every figure :func:`sweep.figures.draw_figures` would draw for the run, by kind."""
    data = RunData(run_dir, load_results(run_dir))
    out = {}
    with style_context():
        for kind in figure_kinds():
            if kind.applies is not None and not kind.applies(data):
                continue
            if kind.single_cache and data.results.empty:
                continue
            try:
                out[kind.name] = kind.draw(data)
            except SkipFigure:
                continue
    return out


DRAWN: set[str] = set()


def check_run(run_dir: Path) -> None:
    figures = figures_of(run_dir)
    DRAWN.update(figures)
    found = {name: problems(fig, style_context()) for name, fig in figures.items()}
    assert {name: p for name, p in found.items() if p} == {}
    policies = set(load_results(run_dir)["policy"]) - {"TIERS"}
    assert run_problems(figures, policies) == []


def test_every_readme_command_is_covered() -> None:
    typed = readme_sweeps(README.read_text())
    assert "capacity=1024,2048,4096 policy=S3FIFO,LRU" in typed
    assert [t for t in typed if t not in README_SWEEPS and t not in NOT_RUN] == []


def test_the_readme_makes_the_inputs_of_its_commands(tmp_path: Path) -> None:
    # issue 21: the figures were checked on a my_tokens.jsonl of the test's own (one request),
    # not on the README's (three requests 1 ms apart, which drew four empty panels)
    written = [
        re.split(r">\s*", code_part(line))[-1].strip() for line in input_lines(README.read_text())
    ]
    assert written == list(README_INPUTS)
    write_inputs(tmp_path)
    tokens = (tmp_path / "my_tokens.jsonl").read_text().splitlines()
    assert [json.loads(t)["timestamp"] for t in tokens] == [0, 1, 2]


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_figures(tmp_path: Path, name: str) -> None:
    check_run(run(tmp_path, [f"+experiment={name}"]))


@pytest.mark.slow
@pytest.mark.parametrize("typed", list(README_SWEEPS))
def test_readme_command_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, typed: str
) -> None:
    monkeypatch.chdir(tmp_path)
    write_inputs(tmp_path)
    check_run(run(tmp_path, README_SWEEPS[typed]))


@pytest.mark.slow
def test_every_figure_kind_was_checked() -> None:
    """Runs after the tests above (pytest keeps the file's order): each kind was drawn."""
    if not DRAWN:
        pytest.skip("the runs above were deselected")
    assert {k.name for k in figure_kinds()} - DRAWN == set()
