"""The trace-format options as command-line arguments (shared by ``python -m prefixsim`` and
``python -m prefixsim.convert``)."""

from __future__ import annotations

import argparse

from . import FORMATS, TraceOptions


def add_trace_arguments(p: argparse.ArgumentParser, *, format_flag: str = "--format") -> None:
    g = p.add_argument_group("trace format (see docs/trace-formats.md)")
    g.add_argument(
        format_flag,
        dest="trace_format",
        choices=FORMATS,
        default=None,
        help="the trace's format (default: detected from the first line)",
    )
    g.add_argument(
        "--chain",
        action="store_true",
        help="mooncake: re-hash each request's hash_ids along its prefix (unchained traces)",
    )
    g.add_argument(
        "--chat-template",
        default="chatml",
        help="chat: chatml, plain, or a per-message template with {role} and {content} "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--tokenizer",
        default="bytes",
        help="chat: bytes (built in) or a path to a tokenizer.json (default: %(default)s)",
    )
    g.add_argument(
        "--arrival-rate",
        type=float,
        default=1.0,
        help="chat: requests per second when the file has no timestamps (default: %(default)s)",
    )


def options_from_args(args: argparse.Namespace) -> TraceOptions:
    return TraceOptions.from_keys(args)
