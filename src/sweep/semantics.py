"""The replay's semantics as grid keys: ``semantics=spec,vllm,sglang``, ``unhashed_free`` and
``cache_output_blocks`` (``docs/semantics.md``).

Like a policy parameter, an option multiplies only the semantics that have it:
``unhashed_free`` the ``vllm`` points, ``cache_output_blocks`` the ``vllm`` and ``sglang``
ones; ``spec`` points are one per grid point whatever they give. A value no semantics of the
grid has (``unhashed_free=back`` without ``vllm``) is refused at planning, as
:class:`prefixsim.semantics.Semantics` refuses it, instead of running the default silently.
The keys are expanded (and checked) by :func:`sweep.expand.semantics_family`; this module
declares the result columns, the key document and the figures' labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from prefixsim.semantics import Semantics

SEMANTICS_KEYS: tuple[str, ...] = ("semantics", "unhashed_free", "cache_output_blocks")
"""The grid keys (and the result columns) of the semantics."""

SPEC = Semantics()

RESULT_FIELDS: tuple[pa.Field, ...] = (
    pa.field("semantics", pa.string()),
    pa.field("unhashed_free", pa.string()),
    pa.field("cache_output_blocks", pa.bool_()),
)
"""Columns of ``results.parquet``: the point's :meth:`Semantics.to_dict` (null only in results
written before the semantics existed, which were all ``spec``)."""


def result_columns(semantics: Sequence[Semantics]) -> dict[str, list[Any]]:
    """The :data:`RESULT_FIELDS` columns of result rows, one semantics per row."""
    rows = [s.to_dict() for s in semantics]
    return {k: [r[k] for r in rows] for k in SEMANTICS_KEYS}


def key_document(semantics: Semantics) -> dict[str, Any]:
    """What a point's semantics adds to its key's document: nothing under ``spec`` (the keys
    of every run before the semantics existed stay valid), else the semantics."""
    return {} if semantics == SPEC else {"semantics": semantics.to_dict()}


def describe(semantics: Semantics) -> dict[str, Any]:
    """A point's semantics for messages (nothing under ``spec``)."""
    if semantics == SPEC:
        return {}
    items: dict[str, Any] = {"semantics": semantics.name}
    if semantics.unhashed_free != "front":
        items["unhashed_free"] = semantics.unhashed_free
    if semantics.cache_output_blocks:
        items["cache_output_blocks"] = True
    return items


def series_label(policy: str, row: dict[str, Any]) -> str:
    """A policy's name in the figures under a row's semantics: ``POLICY`` under ``spec`` (or
    without the columns), ``POLICY@vllm`` (``POLICY@vllm[back,outputs]`` with its options)
    otherwise, so that each semantics of a policy is a series of its own."""
    name = row.get("semantics")
    if name is None or name != name or name == "spec":  # null (NaN) or spec
        return policy
    extra = []
    if row.get("unhashed_free") == "back":
        extra.append("back")
    outputs = row.get("cache_output_blocks")
    if outputs is not None and outputs == outputs and bool(outputs):
        extra.append("outputs")
    return f"{policy}@{name}" + (f"[{','.join(extra)}]" if extra else "")


def figure_policies(df: Any) -> Any:
    """``df`` (a results table) with its ``policy`` column as the figures draw it
    (:func:`series_label`); unchanged when every row is ``spec``."""
    if "semantics" not in df.columns:
        return df
    spec = df["semantics"].isna() | (df["semantics"] == "spec")
    if bool(spec.all()):
        return df
    cols = [c for c in SEMANTICS_KEYS if c in df.columns]
    labels = [
        series_label(p, dict(zip(cols, values, strict=True)))
        for p, *values in df[["policy", *cols]].itertuples(index=False)
    ]
    return df.assign(policy=labels)
