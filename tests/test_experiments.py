"""Every experiment config composes, passes the structured-config schema and plans a valid
grid (the engine's parameter rules included) without running anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import prefixsim
from sweep.__main__ import CONF_DIR
from sweep.config import register_configs, to_sweep_config
from sweep.grid import plan_grid

EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def test_run_all_lists_every_experiment() -> None:
    script = (Path(__file__).parents[1] / "experiments" / "run_all.sh").read_text()
    for name in EXPERIMENTS:
        assert f" {name}" in script
    assert len(EXPERIMENTS) >= 5


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_plans(name: str) -> None:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = to_sweep_config(compose("config", overrides=[f"+experiment={name}"]))
    assert cfg.out_dir == f"outputs/experiments/{name}"
    points = plan_grid(cfg)
    assert len(points) >= 10
    assert {p.policy for p in points} <= set(prefixsim.policy_names())
