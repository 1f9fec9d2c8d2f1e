"""Hardware profiles: how fast a GPU computes a prefill and how fast a cached block reaches it.

A :class:`HardwareProfile` holds a GPU's peak dense (no sparsity) FLOP/s per compute dtype,
an assumed model-FLOPs utilisation (``mfu``) for prefill, and the bandwidth, in bytes/s, at which
a cached KV block reaches the GPU from each place it can be kept (:data:`TIERS`):

* ``hbm``: the GPU's own memory (the block is read once at HBM bandwidth: an upper bound of
  the cost, an in-place prefix cache costs about nothing);
* ``dram_pcie``: host DRAM over the host link (PCIe);
* ``rdma``: a remote DRAM pool over the NIC (RDMA);
* ``nvme``: a local NVMe SSD.

These are **model inputs, not measurements**: every number derived from them is labelled
``est_`` (see :mod:`prefixsim.cost`). Profiles ship as YAML files in
``prefixsim/profiles/hardware/NAME.yaml`` with their sources, and are the sweep's config group
``hardware``. :func:`load_hardware` takes a name or a YAML path.

Public names (stable): :class:`HardwareProfile`, :data:`TIERS`, :func:`load_hardware`,
:func:`hardware_names`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .errors import ParameterError
from .models import DTYPE_BYTES, _from_dict, _names, load_profile_doc

TIERS: tuple[str, ...] = ("hbm", "dram_pcie", "rdma", "nvme")
"""Places a cached block is kept, nearest first."""

MIN_RATE, MAX_RATE = 1.0, 1e30
"""Peak FLOP/s and bandwidths (bytes/s) accepted: far beyond any hardware at both ends, and
narrow enough that every time the cost model divides by them is finite (``docs/cost-model.md``,
"Bounds"): a rate of ``1e-320`` passes ``> 0`` but makes a prefill take ``Infinity`` seconds."""
MIN_MFU = 1e-6
"""Smallest ``mfu`` accepted (the effective FLOP/s divide every FLOP count)."""
MAX_GPUS = 2**20
"""Most ``n_gpus`` accepted (the rates are multiplied by it)."""


@dataclass(frozen=True)
class HardwareProfile:
    """A GPU for the prefill-time estimate (one GPU; a model split over ``n_gpus`` GPUs by
    tensor parallelism gets ``n_gpus`` times the FLOP/s and bandwidths)."""

    name: str
    peak_flops: dict[str, float] = field(hash=False)
    """Peak dense FLOP/s per compute dtype (``bf16``, ``fp16``, ``fp8``)."""
    bandwidth: dict[str, float] = field(hash=False)
    """Bytes/s at which a cached block reaches the GPU, per tier (:data:`TIERS`)."""
    mfu: float = 0.5
    """Assumed model-FLOPs utilisation of prefill (fraction of the peak achieved)."""
    compute_dtype: str = "bf16"
    """dtype whose peak FLOP/s the estimate uses."""
    n_gpus: int = 1
    """GPUs serving one replica (tensor parallel): FLOP/s and bandwidths scale with it."""
    source: str = ""

    def __post_init__(self) -> None:
        for key in ("name", "source"):
            if not isinstance(getattr(self, key), str):
                raise ParameterError(f"hardware.{key}", getattr(self, key), "expected a string")
        for attr, allowed in (("peak_flops", DTYPE_BYTES), ("bandwidth", TIERS)):
            table = getattr(self, attr)
            if not isinstance(table, dict) or not table:
                raise ParameterError(f"hardware.{attr}", table, "expected a non-empty mapping")
            for k, v in table.items():
                if k not in allowed:
                    raise ParameterError(
                        f"hardware.{attr}.{k}", v, f"unknown key (keys: {', '.join(allowed)})"
                    )
            rates = {
                k: _in_range(f"hardware.{attr}.{k}", v, MIN_RATE, MAX_RATE)
                for k, v in table.items()
            }
            object.__setattr__(self, attr, rates)
        object.__setattr__(self, "mfu", _in_range("hardware.mfu", self.mfu, MIN_MFU, 1.0))
        if not isinstance(self.compute_dtype, str) or self.compute_dtype not in self.peak_flops:
            raise ParameterError(
                "hardware.compute_dtype",
                self.compute_dtype,
                f"no peak_flops for it (has: {', '.join(self.peak_flops)})",
            )
        object.__setattr__(self, "n_gpus", _gpus(self.n_gpus))

    @property
    def effective_flops(self) -> float:
        """FLOP/s assumed achieved in prefill: ``peak_flops[compute_dtype] * mfu * n_gpus``."""
        return float(self.peak_flops[self.compute_dtype]) * self.mfu * self.n_gpus

    def tier_bandwidth(self, tier: str) -> float:
        """Bytes/s from ``tier`` to the GPU(s) (times ``n_gpus``: each GPU loads its shard)."""
        if tier not in TIERS:
            raise ParameterError("cache_tier", tier, f"expected one of {', '.join(TIERS)}")
        if tier not in self.bandwidth:
            have = ", ".join(self.bandwidth)
            raise ParameterError(
                "cache_tier", tier, f"{self.name} has no bandwidth for it ({have})"
            )
        return float(self.bandwidth[tier]) * self.n_gpus

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = "hardware") -> HardwareProfile:
        if not isinstance(doc, dict):
            return _from_dict(cls, doc, where)
        doc = dict(doc)
        for k in ("peak_flops", "bandwidth"):
            if isinstance(doc.get(k), dict):
                doc[k] = {str(a): _number(f"hardware.{k}.{a}", b) for a, b in doc[k].items()}
        if "mfu" in doc:
            doc["mfu"] = _number("hardware.mfu", doc["mfu"])
        return _from_dict(cls, doc, where)


def _in_range(key: str, value: Any, low: float, high: float) -> float:
    """``value`` (an int or a float, not a boolean) as a float in ``[low, high]``: NaN, the
    infinities, subnormal and huge values are refused (Python compares an int of any size with
    a float exactly, so ``10**400`` is refused, not converted)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParameterError(key, value, f"expected a number in [{low:g}, {high:g}]")
    if not low <= value <= high:
        raise ParameterError(key, value, f"expected a number in [{low:g}, {high:g}]")
    return float(value)


def _gpus(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_GPUS:
        raise ParameterError("hardware.n_gpus", value, f"expected an integer in [1, {MAX_GPUS}]")
    return value


def _number(key: str, value: Any) -> Any:
    """YAML reads ``3.35e12`` as a float but ``3.35e+12``-less forms like ``1e12`` as a string
    (YAML 1.1): accept both."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ParameterError(key, value, "expected a number") from None
    return value


def hardware_names() -> list[str]:
    """Names of the bundled hardware profiles."""
    return _names("hardware")


def load_hardware(name_or_path: str | HardwareProfile, key: str = "hardware") -> HardwareProfile:
    """A bundled hardware profile by name (``h100``) or a YAML file's; errors name ``key``."""
    if isinstance(name_or_path, HardwareProfile):
        return name_or_path
    doc, where = load_profile_doc("hardware", name_or_path, key)
    return HardwareProfile.from_dict(doc, where)
