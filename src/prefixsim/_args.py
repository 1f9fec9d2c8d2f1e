"""The command lines' argument parser: an error is one bounded line, exit status 2.

argparse prints its usage block, then the message quoting the value whole: ``--capacity`` with
5,000 digits gave thirty lines and every digit. Here the message is cut in the middle
(:func:`prefixsim.errors.shown_text`) and ``--help`` says the rest.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from .errors import error_line, shown_text


class OneLineParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors are ``PROG: error: MESSAGE`` on one line."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(shown_text(message).split())  # one line whatever the value holds
        sys.stderr.write(f"{error_line(self.prog, text)} (see --help)\n")
        sys.exit(2)
