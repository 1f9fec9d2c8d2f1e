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
import functools
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from ._exact import INT64_MAX
from .errors import ParameterError, shown, shown_text

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
            if value > INT64_MAX:
                raise ParameterError(
                    f"model.{key}", value, f"past int64: expected an integer in [{low}, 2**63 - 1]"
                )

        for key in ("name", "source"):
            if not isinstance(getattr(self, key), str):
                raise ParameterError(f"model.{key}", getattr(self, key), "expected a string")
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
        self._check_derived()

    def _check_derived(self) -> None:
        """The products the cost model computes from the fields stay in int64: one token's KV
        bytes and the attention FLOPs per unit of ``n*(n+1) - h*(h+1)``. With every field, and
        these, at most ``2**63 - 1``, and prompts of at most ``2**63 - 1`` tokens, every FLOP
        count is below ``2**191`` (float64 goes to ``2**1024``: ``docs/cost-model.md``,
        "Bounds"). A product past int64 names the largest of its factors."""
        size = DTYPE_BYTES[self.kv_dtype]
        if self.attention == "mla":
            assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
            per_token = self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * size
            factors = {
                "layers": self.layers,
                "kv_lora_rank": self.kv_lora_rank,
                "qk_rope_head_dim": self.qk_rope_head_dim,
            }
            formula = f"layers * (kv_lora_rank + qk_rope_head_dim) * {size}"
        else:
            per_token = 2 * self.layers * self.kv_heads * self.head_dim * size
            factors = {"layers": self.layers, "kv_heads": self.kv_heads, "head_dim": self.head_dim}
            formula = f"2 * layers * kv_heads * head_dim * {size}"
        _check_product(f"one token's KV bytes ({formula}, {self.kv_dtype})", per_token, factors)
        coeff = self.layers * self.attention_heads * (self.head_dim + self.value_dim)
        factors = {
            "layers": self.layers,
            "attention_heads": self.attention_heads,
            "head_dim": self.head_dim,
            "v_head_dim": self.value_dim,
        }
        _check_product(
            "the attention FLOPs per token pair (layers * attention_heads * "
            "(head_dim + v_head_dim))",
            coeff,
            factors,
        )
        if self.reuse_up_projection:
            assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
            _check_product(
                "the up-projection FLOPs per reused token (2 * layers * kv_lora_rank * "
                "attention_heads * (qk_nope_head_dim + v_head_dim))",
                self.reuse_flops_per_token(),
                {
                    "layers": self.layers,
                    "kv_lora_rank": self.kv_lora_rank,
                    "attention_heads": self.attention_heads,
                    "head_dim": self.head_dim,
                    "v_head_dim": self.value_dim,
                },
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
        overrides the profile's. Past int64 (the bytes columns' type) it is a
        :class:`ParameterError` naming ``block_size``."""
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ParameterError("block_size", block_size, "expected an integer >= 1")
        per_token = self.kv_bytes_per_token(kv_dtype)
        per_block = per_token * block_size
        if per_block > INT64_MAX:
            # Name the largest factor, as _check_product does: a profile's kv_heads of 2**40
            # at block_size 512 is the profile's fault, not block_size's.
            factors = self._kv_factors()
            key = max(factors, key=lambda k: factors[k])
            if block_size >= factors[key]:
                raise ParameterError(
                    "block_size",
                    block_size,
                    f"one block of {self.name} would pass int64 bytes (at most "
                    f"{INT64_MAX // per_token} tokens per block at {per_token} bytes per token)",
                )
            given = ", ".join(f"{k}={v}" for k, v in factors.items())
            raise ParameterError(
                f"model.{key}",
                factors[key],
                f"one block of {block_size} tokens of {self.name} would pass int64 bytes "
                f"({per_token} bytes per token: {given})",
            )
        return per_block

    def _kv_factors(self) -> dict[str, int]:
        """The profile keys one token's KV bytes multiply (:meth:`kv_bytes_per_token`)."""
        if self.attention == "mla":
            assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
            return {
                "layers": self.layers,
                "kv_lora_rank": self.kv_lora_rank,
                "qk_rope_head_dim": self.qk_rope_head_dim,
            }
        return {"layers": self.layers, "kv_heads": self.kv_heads, "head_dim": self.head_dim}

    def with_kv_dtype(self, kv_dtype: str) -> ModelProfile:
        return dataclasses.replace(self, kv_dtype=kv_dtype)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str = "model") -> ModelProfile:
        """A profile from a mapping (a YAML file's content); unknown or missing keys are a
        :class:`ParameterError` naming ``where``."""
        return _from_dict(cls, doc, where)


def _check_product(what: str, value: int, factors: dict[str, int]) -> None:
    """Refuse a derived product past int64, naming the key of its largest factor."""
    if value <= INT64_MAX:
        return
    key = max(factors, key=lambda k: factors[k])
    given = ", ".join(f"{k}={v}" for k, v in factors.items())
    raise ParameterError(f"model.{key}", factors[key], f"{what} passes int64 ({given})")


def _from_dict(cls: Any, doc: Any, where: str) -> Any:
    """Build the dataclass ``cls`` from ``doc``, refusing unknown and missing keys."""
    if not isinstance(doc, dict):
        raise ParameterError(where, doc, "expected a mapping of profile keys")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in doc if k not in fields]
    if unknown:
        raise ParameterError(
            f"{where}: {unknown[0] if isinstance(unknown[0], str) else shown(unknown[0])}",
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
    try:
        return cls(**doc)
    except ParameterError as err:
        if where == cls.__name__.removesuffix("Profile").lower():  # no file to name
            raise
        raise ParameterError(f"{where}: {err.name}", err.value, err.allowed) from None


def _names(kind: str) -> list[str]:
    return profile_stems(profile_dir(kind))


def profile_stems(folder: Path) -> list[str]:
    """The names of the profiles in ``folder``: its regular ``*.yaml`` files (a named pipe or
    a directory of that name is no profile, and was listed as one)."""
    return sorted(p.stem for p in folder.glob("*.yaml") if p.is_file())


def not_a_profile_file(path: Path) -> str | None:
    """Why ``path``, which exists, cannot be a profile (a named pipe, a directory, a
    device...), or None for a regular file (following a symbolic link)."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError as err:
        return err.strerror or type(err).__name__
    if stat.S_ISREG(mode):
        return None
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe")]
    kinds += [(stat.S_ISCHR, "a character device"), (stat.S_ISSOCK, "a socket")]
    kind = next((what for test, what in kinds if test(mode)), "not a regular file")
    return f"is {kind}; expected a regular YAML file"


def model_names() -> list[str]:
    """Names of the bundled model profiles."""
    return _names("model")


MAX_PROFILE_BYTES = 1 << 20
"""A profile is a few hundred bytes; a file larger than this (1 MiB) is refused unread."""


def _read_profile(path: Path, key: str, name_or_path: str) -> Any:
    """The YAML document of a profile file: UTF-8, at most :data:`MAX_PROFILE_BYTES`, no
    aliases. An alias (``*name``) repeats a node by reference, so a few hundred bytes of
    nested aliases expand to gigabytes (a "billion laughs"); a profile is a flat mapping of
    numbers and needs none, so they are refused before anything is expanded."""
    import yaml

    def bad(why: str) -> ParameterError:
        return ParameterError(
            key, name_or_path, f"unreadable profile {shown_text(str(path))}: {why}"
        )

    import os
    import stat

    try:
        # non-blocking and checked on the descriptor, as the trace readers open a trace: a
        # named pipe put in the file's place after the checks must not hang the read
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise bad("not a regular file; expected a regular YAML file")
            raw = f.read(MAX_PROFILE_BYTES + 1)
    except OSError as err:
        raise bad(err.strerror or type(err).__name__) from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise bad(f"larger than {MAX_PROFILE_BYTES} bytes; a profile is a short YAML mapping")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise bad(
            f"not valid UTF-8 (byte 0x{raw[err.start]:02x} at byte {err.start + 1}); "
            "expected a UTF-8 YAML file"
        ) from None
    try:
        return yaml.load(text, Loader=_profile_loader())  # a SafeLoader without aliases
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None)
        if problem and mark is not None:
            context = getattr(err, "context", None)
            what = f"{context}: {problem}" if context else problem
            why = f"invalid YAML ({what} at line {mark.line + 1}, column {mark.column + 1})"
        else:
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise bad(shown_text(why)) from None
    except RecursionError:
        raise bad("nested too deeply") from None


@functools.cache
def _profile_loader() -> Any:
    """The loader class, built on first use (``import yaml`` is not free)."""
    import yaml

    class ProfileLoader(yaml.SafeLoader):
        """PyYAML's safe loader, refusing aliases (see :func:`_read_profile`)."""

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, "YAML aliases (*name) are not allowed in a profile", mark
                )
            return super().compose_node(parent, index)

        def construct_yaml_int(self, node: Any) -> Any:
            # int(str) refuses more than sys.get_int_max_str_digits() digits (a traceback);
            # read such a number exactly, as the trace readers do, for the range checks to
            # refuse it by key (``layers: 99...9`` of 5,000 digits)
            try:
                return super().construct_yaml_int(node)
            except ValueError:
                text = str(self.construct_scalar(node)).replace("_", "")
                if re.fullmatch(r"[-+]?[0-9]+", text) is None:
                    raise
                return int(Decimal(text))

    ProfileLoader.add_constructor("tag:yaml.org,2002:int", ProfileLoader.construct_yaml_int)
    return ProfileLoader


def load_profile_doc(kind: str, name_or_path: str, key: str) -> tuple[dict[str, Any], str]:
    """The YAML mapping of a bundled profile ``name`` or of a file path, and where it came from.
    An unknown name lists the known ones."""
    text_path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or text_path.parent != Path("."):
        path = text_path
        if not path.exists():
            raise ParameterError(key, name_or_path, "no such profile file")
        why = not_a_profile_file(path)
        if why is not None:  # a named pipe was "no such profile file" (and open() would block)
            raise ParameterError(key, name_or_path, f"{shown_text(str(path))} {why}")
    else:
        path = profile_dir(kind) / f"{name_or_path}.yaml"
        if not path.is_file():
            known = ", ".join(_names(kind))
            raise ParameterError(key, name_or_path, f"unknown {kind} (known: {known})")
    doc = _read_profile(path, key, name_or_path)
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
