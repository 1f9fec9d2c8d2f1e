"""The registry of figure kinds: a module adds a figure kind by registering it.

The built-in kinds register themselves when their module is imported (:func:`load_builtin`
imports them); another module registers its own the same way and is drawn by
:func:`sweep.figures.draw_figures` in ``order``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .data import RunData

BUILTIN_MODULES = ("capacity", "small_ratio", "params", "requests", "cost", "tiers", "cluster")
"""Modules of this package that register the built-in kinds."""


@dataclass(frozen=True)
class FigureKind:
    """A figure kind: ``draw`` builds the figure from a run's data (reading only the tables it
    needs) or raises :class:`~sweep.figures.data.SkipFigure` with the reason it is not drawn.
    ``name`` is the file name (``figures/NAME.png``); kinds are drawn by ``order``, then name."""

    name: str
    draw: Callable[[RunData], Figure]
    order: int = 100
    single_cache: bool = True
    """The kind draws single-cache points (``RunData.results``): skipped, saying so, in a run
    that has none (only hierarchies or clusters). False: it reads ``RunData.all_results``."""
    applies: Callable[[RunData], bool] | None = None
    """Whether the run has the kind of points the figure is about (a model, hierarchies,
    clusters); a kind that does not apply is passed over silently, not listed as skipped."""
    notes: Callable[[RunData], list[str]] | None = None
    """Facts of the run the figure's reading depends on (:mod:`.findings`), said where the
    log lists the figure and kept in ``FigureReport.notes``."""


_KINDS: dict[str, FigureKind] = {}


def register(kind: FigureKind) -> FigureKind:
    """Add ``kind`` (or replace the kind of the same name); returns it."""
    _KINDS[kind.name] = kind
    return kind


def load_builtin() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(f"{__package__}.{module}")


def figure_kinds() -> list[FigureKind]:
    """Every registered kind, built-in ones included, in drawing order."""
    load_builtin()
    return sorted(_KINDS.values(), key=lambda k: (k.order, k.name))
