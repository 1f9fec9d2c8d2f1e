"""Model profiles: what a model's KV cache weighs and what its prefill costs.

A :class:`ModelProfile` holds the published architecture numbers of a model (its
``config.json``) and the parameter counts. Profiles ship as YAML files in
``prefixsim/profiles/model/NAME.yaml`` (each with the source of its numbers in a comment), and
the same files are the sweep's Hydra config group ``model``. :func:`load_model` takes a profile
name or the path of a YAML file with the same keys.

Bytes per block are derived, never typed (exact Python ints):

* grouped-query attention (``attention: gqa``; multi-head attention is GQA with
  ``kv_heads == attention_heads``): a block keeps a key and a value vector per layer, KV head
  and token, ``2 * layers * kv_heads * head_dim * dtype_bytes * block_size``;
* multi-head latent attention (``attention: mla``, DeepSeek-V2/V3): a block keeps the
  compressed latent and the decoupled RoPE key per layer and token,
  ``layers * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes * block_size``.

Public names (stable): :class:`ModelProfile`, :data:`DTYPE_BYTES`, :func:`dtype_bytes`,
:func:`load_model`, :func:`model_names`, :func:`profile_dir`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ParameterError

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per element of a KV-cache dtype."""

ATTENTION_KINDS: tuple[str, ...] = ("gqa", "mla")


def dtype_bytes(kv_dtype: str, key: str = "kv_dtype") -> int:
    """Bytes per element of ``kv_dtype``; an unknown dtype is a :class:`ParameterError`."""
    try:
        return DTYPE_BYTES[kv_dtype]
    except (KeyError, TypeError):
        raise ParameterError(key, kv_dtype, f"expected one of {', '.join(DTYPE_BYTES)}") from None


def profile_dir(kind: str) -> Path:
    """The folder of the bundled profiles of ``kind`` (``model`` or ``hardware``)."""
    return Path(__file__).resolve().parent / "profiles" / kind


@dataclass(frozen=True)
class ModelProfile:
    """A model's architecture, as far as the KV cache and the prefill cost need it.

    Field names follow the vocabulary of the docs; each maps to one ``config.json`` field
    (given in the comments of the bundled YAML files).
    """

    name: str
    layers: int
    """``num_hidden_layers``: transformer layers that keep a KV cache."""
    attention_heads: int
    """``num_attention_heads``: query heads (attention FLOPs scale with them)."""
    kv_heads: int
    """``num_key_value_heads``: KV heads kept in the cache (GQA)."""
    head_dim: int
    """Query/key dimension per head (``head_dim``, or ``hidden_size / num_attention_heads``;
    MLA: ``qk_nope_head_dim + qk_rope_head_dim``)."""
    hidden_size: int
    total_params: int
    """Parameters, all of them (published count)."""
    active_params: int
    """Parameters used per token (mixture-of-experts: the active ones; dense: the total)."""
    attention: str = "gqa"
    """``gqa`` (grouped-query or multi-head attention) or ``mla`` (multi-head latent)."""
    v_head_dim: int | None = None
    """Value dimension per head; None means ``head_dim`` (MLA: ``v_head_dim``)."""
    kv_lora_rank: int | None = None
    """MLA: dimension of the compressed KV latent kept in the cache."""
    qk_rope_head_dim: int | None = None
    """MLA: dimension of the decoupled RoPE key kept in the cache."""
    kv_dtype: str = "bf16"
    """dtype of the KV cache (``bf16``, ``fp16``, ``fp8``, ``fp32``)."""
    reuse_up_projection: bool = False
    """MLA only: the prefill up-projects every reused token's cached latent back to per-head
    keys and values before attending to it (vLLM's MLA prefill path, ``kv_b_proj`` in
    ``MLACommonImpl._compute_prefill_context``), costing :meth:`reuse_flops_per_token`."""
    source: str = ""
    """Where the numbers come from (a URL of the published config)."""

    def __post_init__(self) -> None:
        def need(key: str, value: Any, low: int = 1) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ParameterError(f"model.{key}", value, f"expected an integer >= {low}")

        for key in ("layers", "attention_heads", "kv_heads", "head_dim", "hidden_size"):
            need(key, getattr(self, key))
        need("total_params", self.total_params)
        need("active_params", self.active_params)
        if self.active_params > self.total_params:
            raise ParameterError(
                "model.active_params", self.active_params, "expected at most total_params"
            )
        if self.attention not in ATTENTION_KINDS:
            raise ParameterError(
                "model.attention", self.attention, f"expected one of {', '.join(ATTENTION_KINDS)}"
            )
        if self.v_head_dim is not None:
            need("v_head_dim", self.v_head_dim)
        if self.attention == "mla":
            need("kv_lora_rank", self.kv_lora_rank)
            need("qk_rope_head_dim", self.qk_rope_head_dim)
        dtype_bytes(self.kv_dtype, "model.kv_dtype")
        if not isinstance(self.reuse_up_projection, bool):
            raise ParameterError(
                "model.reuse_up_projection", self.reuse_up_projection, "expected true or false"
            )
        if self.reuse_up_projection and (
            self.attention != "mla" or self.head_dim <= (self.qk_rope_head_dim or 0)
        ):
            raise ParameterError(
                "model.reuse_up_projection",
                True,
                "applies to attention: mla, whose head_dim exceeds qk_rope_head_dim",
            )

    @property
    def value_dim(self) -> int:
        """Value dimension per head (``v_head_dim``, else ``head_dim``)."""
        return self.head_dim if self.v_head_dim is None else self.v_head_dim

    def reuse_flops_per_token(self) -> int:
        """FLOPs a reused token costs in a prefill (0 unless ``reuse_up_projection``): its
        latent (``kv_lora_rank``) times ``kv_b_proj``, to ``attention_heads`` keys of
        ``head_dim - qk_rope_head_dim`` and values of ``value_dim``, in every layer:
        ``2 * layers * kv_lora_rank * attention_heads * (qk_nope_head_dim + value_dim)``."""
        if not self.reuse_up_projection:
            return 0
        assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
        nope = self.head_dim - self.qk_rope_head_dim
        return 2 * self.layers * self.kv_lora_rank * self.attention_heads * (nope + self.value_dim)

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> int:
        """Bytes of KV cache one token keeps, over all layers (exact)."""
        size = dtype_bytes(kv_dtype or self.kv_dtype)
        if self.attention == "mla":
            assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * size
        return 2 * self.layers * self.kv_heads * self.head_dim * size

    def kv_bytes_per_block(self, block_size: int, kv_dtype: str | None = None) -> int:
        """Bytes of one cached block of ``block_size`` tokens (exact int); ``kv_dtype``
        overrides the profile's."""
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ParameterError("block_size", block_size, "expected an integer >= 1")
        return self.kv_bytes_per_token(kv_dtype) * block_size

    def with_kv_dtype(self, kv_dtype: str) -> ModelProfile:
        return dataclasses.replace(self, kv_dtype=kv_dtype)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = "model") -> ModelProfile:
        """A profile from a mapping (a YAML file's content); unknown or missing keys are a
        :class:`ParameterError` naming ``where``."""
        return _from_dict(cls, doc, where)


def _from_dict(cls: Any, doc: Any, where: str) -> Any:
    """Build the dataclass ``cls`` from ``doc``, refusing unknown and missing keys."""
    if not isinstance(doc, dict):
        raise ParameterError(where, doc, "expected a mapping of profile keys")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in doc if k not in fields]
    if unknown:
        raise ParameterError(
            f"{where}: {unknown[0]}",
            doc[unknown[0]],
            f"not a profile key (keys: {', '.join(fields)})",
        )
    required = [
        n
        for n, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [k for k in required if k not in doc]
    if missing:
        raise ParameterError(f"{where}: {missing[0]}", None, "missing (required key)")
    return cls(**doc)


def _names(kind: str) -> list[str]:
    return sorted(p.stem for p in profile_dir(kind).glob("*.yaml"))


def model_names() -> list[str]:
    """Names of the bundled model profiles."""
    return _names("model")


def load_profile_doc(kind: str, name_or_path: str, key: str) -> tuple[dict[str, Any], str]:
    """The YAML mapping of a bundled profile ``name`` or of a file path, and where it came from.
    An unknown name lists the known ones."""
    import yaml

    text_path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or text_path.parent != Path("."):
        path = text_path
        if not path.is_file():
            raise ParameterError(key, name_or_path, "no such profile file")
    else:
        path = profile_dir(kind) / f"{name_or_path}.yaml"
        if not path.is_file():
            known = ", ".join(_names(kind))
            raise ParameterError(key, name_or_path, f"unknown {kind} (known: {known})")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ParameterError(key, name_or_path, f"unreadable profile {path}: {first}") from None
    if isinstance(doc, dict):
        doc.pop("defaults", None)  # a Hydra defaults list in a user's profile
    return doc, str(path)


def load_model(
    name_or_path: str | ModelProfile, kv_dtype: str | None = None, key: str = "model"
) -> ModelProfile:
    """A bundled model profile by name (``llama-3.1-70b``) or a YAML file's, optionally with
    another ``kv_dtype``; errors name ``key``."""
    if isinstance(name_or_path, ModelProfile):
        model = name_or_path
    else:
        doc, where = load_profile_doc("model", name_or_path, key)
        model = ModelProfile.from_dict(doc, where)
    return model if kv_dtype is None else model.with_kv_dtype(kv_dtype)
