"""The synthetic workload's parameters: :class:`SynthConfig`, their bounds, and the presets.

Every field of :class:`SynthConfig` is documented on it and in ``docs/synth.md``;
:meth:`SynthConfig.check` refuses a value out of its bounds (the ``MAX_*`` constants below,
``docs/synth.md``, "Bounds") and a plan that would not fit in memory, before anything is drawn.
:data:`PRESETS` are the named configs of ``--like``. The generator that draws a plan from a
config is :mod:`prefixsim.synth`, which re-exports :class:`SynthConfig` and :data:`PRESETS`
(users import them from there).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ._memory import check_fits
from .errors import ParameterError
from .policies.base import check_int


@dataclass(frozen=True)
class SynthConfig:
    """The generator's parameters (token counts are tokens, times are seconds)."""

    requests: int = 10_000
    """Requests in the trace."""
    seed: int = 0
    """Seed of numpy's PCG64 generator: the same config and seed give the same trace."""
    rate: float = 3.4
    """Mean request arrival rate, requests per second."""
    system_prompts: int = 1
    """Size of the pool of shared system prompts."""
    system_zipf: float = 1.0
    """Zipf exponent of the system prompts' popularity (rank k drawn with weight 1 / k**a)."""
    system_tokens_median: float = 700.0
    """Median system prompt length (lognormal, drawn once per pool prompt)."""
    system_tokens_sigma: float = 0.0
    """Sigma of the system prompt length."""
    turns_mean: float = 1.57
    """Mean turns of a chat session (geometric, at least 1)."""
    first_tokens_median: float = 5000.0
    """Median length of a chat session's first message."""
    first_tokens_sigma: float = 1.25
    followup_tokens_median: float = 750.0
    """Median length of a later message (added with the previous answer)."""
    followup_tokens_sigma: float = 1.5
    answer_tokens_median: float = 350.0
    """Median answer length (``output_length``)."""
    answer_tokens_sigma: float = 0.3
    think_time: float = 60.0
    """Mean time between a chat session's turns (exponential)."""
    agent_fraction: float = 0.0
    """Probability that a session is an agent loop."""
    agent_turns_mean: float = 10.0
    """Mean steps of an agent loop (geometric, at least 1)."""
    agent_context_tokens_median: float = 20_000.0
    """Median length of the long context an agent loop starts with."""
    agent_context_tokens_sigma: float = 0.5
    agent_step_tokens_median: float = 200.0
    """Median length added by each agent step (with the previous answer)."""
    agent_step_tokens_sigma: float = 0.8
    agent_delay: float = 5.0
    """Mean time between an agent loop's steps (exponential)."""
    max_prompt_tokens: int = 131_072
    """A turn whose prompt would be longer ends its session."""

    def check(self) -> None:
        """Every field, type and range (docs/synth.md, "Bounds"): the integers within what the
        token ids and the block ids can hold, the floats finite, and the plan's memory within
        the machine's, so that a config is refused before anything is drawn."""

        def bad(name: str, allowed: str) -> ParameterError:
            return ParameterError(name, getattr(self, name), allowed)

        check_int("requests", self.requests, 1, MAX_REQUESTS)
        check_int("system_prompts", self.system_prompts, 1, MAX_SYSTEM_PROMPTS)
        check_int("max_prompt_tokens", self.max_prompt_tokens, 1, MAX_PROMPT_TOKENS)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise bad("seed", "expected an integer (taken modulo 2**64)")
        for f in dataclasses.fields(self):
            if f.name in _INTEGER_FIELDS:
                continue
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise bad(f.name, "expected a number")
            if not math.isfinite(value):
                raise bad(f.name, "expected a finite number")
        if not 0.0 <= self.agent_fraction <= 1.0:
            raise bad("agent_fraction", "expected a probability in [0, 1]")
        if not MIN_RATE <= self.rate <= MAX_RATE:
            raise bad("rate", f"expected requests per second in [{MIN_RATE:g}, {MAX_RATE:g}]")
        if not self.system_zipf >= 0:
            raise bad("system_zipf", "expected a number >= 0 (0: uniform)")
        for name in ("turns_mean", "agent_turns_mean"):
            value = getattr(self, name)
            if not 1.0 <= value <= self.max_prompt_tokens:
                # name the key typed: a small max_prompt_tokens under the default mean was
                # "invalid agent_turns_mean=10.0"
                default = SynthConfig()
                if value == getattr(default, name) and (
                    self.max_prompt_tokens != default.max_prompt_tokens
                ):
                    raise bad(
                        "max_prompt_tokens",
                        f"expected at least {name}={value} (a turn adds at least two tokens, "
                        "so no session has more turns than max_prompt_tokens)",
                    )
                raise bad(
                    name,
                    f"expected a number in [1, max_prompt_tokens={self.max_prompt_tokens}] (a "
                    "turn adds at least two tokens, so no session has more turns than that)",
                )
        for name in ("think_time", "agent_delay"):
            if not 0 < getattr(self, name) <= MAX_DELAY:
                raise bad(name, f"expected seconds in (0, {MAX_DELAY:g}]")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_median") and not value > 0:
                raise bad(f.name, "expected a positive number")
            if f.name.endswith("_sigma") and not value >= 0:
                raise bad(f.name, "expected a non-negative number")
        mean = (1 - self.agent_fraction) * self.turns_mean + self.agent_fraction * (
            self.agent_turns_mean
        )
        check_fits(
            "requests",
            self.requests,
            int(_BYTES_PER_TURN * _first_sessions(self.requests, mean) * mean),
            f"synth's plan of {self.requests} requests",
        )
        check_fits(
            "system_prompts",
            self.system_prompts,
            _BYTES_PER_SYSTEM_PROMPT * self.system_prompts,
            f"a pool of {self.system_prompts} system prompts",
        )


MAX_REQUESTS = 2**31 - 1
"""Most ``requests``: a trace's block ids are int32."""
MAX_SYSTEM_PROMPTS = 2**30
"""Most ``system_prompts``: prompt ``k``'s token ids are ``k * 2**32 + ...``, and the sessions'
own ids follow the pool's, all below 2**63."""
MAX_PROMPT_TOKENS = 2**31 - 1
"""Most ``max_prompt_tokens``: every prompt and every length the generator adds stay exact in
int64 however many turns a session has (docs/synth.md, "Bounds")."""
MIN_RATE, MAX_RATE = 1e-9, 1e12
"""``rate`` accepted, requests per second (``1e-320`` would make every arrival ``Infinity``)."""
MAX_DELAY = 1e12
"""Longest mean ``think_time`` and ``agent_delay``, seconds (31,700 years): the arrival times,
in ms, stay finite (``Infinity`` would be written, and refused by every reader)."""
_INTEGER_FIELDS = ("requests", "seed", "system_prompts", "max_prompt_tokens")
_BYTES_PER_TURN = 256
"""Peak memory of a drawn turn (about 25 arrays of 8 bytes while a plan is drawn)."""
_BYTES_PER_SYSTEM_PROMPT = 64


def _first_sessions(requests: int, mean_turns: float) -> int:
    """Sessions drawn first for ``requests`` (more only if the cap ended many sessions)."""
    return int(requests / mean_turns * 1.2) + 16


PRESETS: dict[str, SynthConfig] = {
    # The defaults were calibrated against the bundled Mooncake conversation trace at block_size
    # 512 (experiments/synth_match.py prints the match; the README quotes it).
    "conversation": SynthConfig(requests=12_031),
}
