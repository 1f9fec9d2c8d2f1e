"""``python -m sweep.plot RUN_DIR [...]``: the figures of a finished sweep.

Kept as the command users know; the figures live in :mod:`sweep.figures` (one module per
figure kind, a registry, a shared style). ``from sweep.plot import draw_figures`` still works.
"""

from __future__ import annotations

import sys

from .figures import DEFAULT_FORMATS, FigureReport, PlotError, SkipFigure, draw_figures
from .figures.__main__ import main

__all__ = ["DEFAULT_FORMATS", "FigureReport", "PlotError", "SkipFigure", "draw_figures", "main"]

if __name__ == "__main__":
    sys.exit(main())
