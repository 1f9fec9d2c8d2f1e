"""One-line messages about the configuration, shared by its conversion
(:func:`sweep.config.to_sweep_config`) and the command line's checks (:mod:`sweep.overrides`):
here, apart from both, so that neither imports the other for them."""

from __future__ import annotations

import difflib
import re
from typing import Any

from prefixsim.errors import SHOWN_CHARS, shown_text


def unknown_key(prefix: str, name: str, known: list[str]) -> str:
    """``PREFIX.NAME: not a key of ...; did you mean PREFIX.CLOSEST?`` (one line; a NAME of
    100,000 characters is cut in the middle and not matched: difflib would take its time)."""
    if len(name) > 4 * SHOWN_CHARS:
        where = f"the {prefix.rstrip('.')} node" if prefix else "the sweep configuration"
        return f"{shown_text(prefix + name)}: not a key of {where} (keys: {', '.join(known)})"
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if not close:  # a prefix or a long slip (capacityy, small): the best match above noise
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.4)
    where = f"the {prefix.rstrip('.')} node" if prefix else "the sweep configuration"
    if close:
        return f"{prefix}{name}: not a key of {where}; did you mean {prefix}{close[0]}?"
    return f"{prefix}{name}: not a key of {where} (keys: {', '.join(known)})"


def describe_omegaconf_error(cfg: Any, err: Exception) -> str:
    """One line for an OmegaConf error met while converting the composed configuration (an
    interpolation that does not resolve, or resolves to a value of the wrong type; a mandatory
    key left unset): the key, the value as written and the reason."""
    key = str(getattr(err, "full_key", "") or "")
    message = str(getattr(err, "msg", None) or err).strip().splitlines()
    reason = message[0] if message else type(err).__name__
    reason = re.sub(r"^\w+ raised while resolving interpolation: ", "", reason)
    raw = _raw_value(cfg, key)
    shown = f"{key}={short(raw, 120)}" if raw is not None else key or "the configuration"
    if type(err).__name__ == "MissingMandatoryValue":
        return f"{key}: missing a value (??? in the configuration); give it, e.g. {key}=..."
    return f"{shown}: {reason}"


def _raw_value(cfg: Any, key: str) -> str | None:
    """The value of ``key`` (``capacity[0]``, ``tiers.hbm.capacity``) as written, without
    resolving it; None when it cannot be found."""
    node = cfg
    try:
        for part in re.findall(r"[^.\[\]]+", key):
            node = node._get_node(int(part) if part.isdigit() else part)
        value = node._value()
    except Exception:  # a key OmegaConf named but the walk cannot reach: no value shown
        return None
    return None if value is None else str(value)


def short(value: Any, limit: int = 60) -> str:
    """``value`` as text of at most about ``limit`` characters (its head and tail)."""
    text = str(value)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 4 :]}"
