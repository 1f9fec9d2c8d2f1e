"""The sweep's side of the cost model (:mod:`prefixsim.cost`): the bytes, FLOPs and est_ columns
of a point. The formulas live in the engine; this module only declares which columns the sweep
writes. The model and hardware become engine profiles, and the grid's cache sizes are
expanded, once, while planning (:func:`sweep.expand.cost_setup`, :func:`sweep.expand.size_family`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prefixsim import ParameterError
from prefixsim.cost_table import prefill_cost, prefill_cost_tiers
from prefixsim.errors import shown_text
from prefixsim.hardware import HardwareProfile, load_hardware
from prefixsim.models import (
    ModelProfile,
    load_model,
    not_a_profile_file,
    profile_dir,
    profile_stems,
)

RESULT_COST_COLUMNS: tuple[tuple[str, str], ...] = (
    ("model", "string"),
    ("kv_dtype", "string"),
    ("hardware", "string"),
    ("cache_tier", "string"),
    ("cache_bytes", "int64"),
    ("kv_bytes_per_block", "int64"),
    ("prefill_flops", "float64"),
    ("prefill_flops_saved", "float64"),
    ("reused_bytes", "int64"),
    ("est_prefill_seconds_no_cache", "float64"),
    ("est_prefill_seconds", "float64"),
    ("est_ttft_saved_seconds", "float64"),
    ("est_break_even_bandwidth", "float64"),
)
"""Columns of results.parquet from the cost model (null without a model; est_ ones, hardware
and cache_tier also null without hardware), in order, with their Arrow type names. A hierarchy
row's est_ columns charge each tier's hits at its medium (``tier{t}_medium``), its
``cache_tier`` is null and its ``cache_bytes`` the sum over its tiers."""

PER_REQUEST_COST_COLUMNS: tuple[str, ...] = ("prefill_flops_saved", "est_ttft_saved_seconds")
"""float64 columns of per_request.parquet from the cost model (null without a model)."""


@dataclass(frozen=True)
class CostSetup:
    """The model, hardware and cache tier of a sweep, validated by the engine."""

    model: ModelProfile
    hardware: HardwareProfile | None
    tier: str

    def identity(self) -> dict[str, Any]:
        """What the cost columns depend on, for the points' keys (a new model, GPU or tier is a
        new point)."""
        # where the numbers come from is not a number: ``source`` is left out
        model = {k: v for k, v in self.model.to_dict().items() if k != "source"}
        hardware = None
        if self.hardware is not None:
            hardware = {k: v for k, v in self.hardware.to_dict().items() if k != "source"}
        doc = {
            "model": model,
            "hardware": hardware,
            "cache_tier": self.tier if self.hardware is not None else None,
        }
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return {"cost": hashlib.sha256(text.encode()).hexdigest()[:20]}

    def point_columns(
        self,
        prompt_tokens: np.ndarray,
        hit_tokens: np.ndarray,
        block_size: int,
        *,
        tier_hit_tokens: np.ndarray | None = None,
        media: Sequence[str | None] = (),
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """A point's result columns (totals) and per-request columns. A hierarchy point gives
        its ``tier_hit_tokens`` ``[tier, request]`` and each tier's medium: each tier's hits are
        charged at that medium's bandwidth (``cache_tier`` is then null: the media are the
        ``tier{t}_medium`` columns)."""
        if tier_hit_tokens is None:
            cost = prefill_cost(
                self.model, prompt_tokens, hit_tokens, block_size, self.hardware, self.tier
            )
            tier: str | None = self.tier
        else:
            cost = prefill_cost_tiers(
                self.model, prompt_tokens, tier_hit_tokens, block_size, self.hardware, media
            )
            tier = None
        totals: dict[str, Any] = {
            "model": self.model.name,
            "kv_dtype": self.model.kv_dtype,
            "hardware": None if self.hardware is None else self.hardware.name,
            "cache_tier": None if self.hardware is None else tier,
            "kv_bytes_per_block": cost.kv_bytes_per_block,
        }
        totals.update(cost.totals())
        per_request = {"prefill_flops_saved": cost.prefill_flops_saved}
        if cost.est_ttft_saved_seconds is not None:
            per_request["est_ttft_saved_seconds"] = cost.est_ttft_saved_seconds
        return totals, per_request


def check_profile_overrides(argv: Sequence[str], conf_dir: Path) -> None:
    """``model=NAME`` or ``hardware=NAME`` on the command line: the profile Hydra would use,
    read by the engine's loader (:func:`prefixsim.load_model`, :func:`prefixsim.load_hardware`)
    before Hydra composes anything, so a profile of a ``--config-dir`` with bad YAML, a missing
    key, a value of the wrong type (``layers: "32"``, which Hydra's schema would convert), an
    alias or a number out of range is the engine's one-line error naming the file and the key
    (exit status 2), as with ``python -m prefixsim --model FILE``; and a NAME that names no
    profile lists the known ones. Profiles are searched where Hydra searches them, in its
    order: the ``--config-dir``, ``conf_dir/KIND/``, then the bundled ones. With
    ``--config-path`` or a ``hydra.searchpath`` override the check is left to Hydra."""
    from .overrides import config_dirs

    found_dirs = config_dirs(argv, conf_dir)
    if found_dirs is None:
        return
    # Hydra's order: the last --config-dir given first, then conf_dir (then the bundled ones)
    dirs = [*reversed(found_dirs[1:]), found_dirs[0]]
    for token in argv:
        key, sep, value = token.partition("=")
        if not sep or key not in ("model", "hardware") or value in ("", "null"):
            continue
        found = [d / key / f"{value}.yaml" for d in dirs] + [profile_dir(key) / f"{value}.yaml"]
        path = next((p for p in found if p.exists()), None)
        why = None if path is None else not_a_profile_file(path)
        if why is not None:  # a named pipe of that name: said, not "unknown" (nor read)
            raise ParameterError(key, value, f"{shown_text(str(path))} {why}")
        if path is None:
            known = set(profile_stems(profile_dir(key)))
            for d in dirs:
                known.update(profile_stems(d / key))
            raise ParameterError(key, value, f"unknown {key} (known: {', '.join(sorted(known))})")
        if key == "model":
            load_model(str(path), key="model")
        else:
            load_hardware(str(path), key="hardware")
