"""The ``spice-coding`` command line (placeholder until the application issue)."""

from __future__ import annotations

import sys


def main() -> int:
    """Entry point of the ``spice-coding`` console script."""
    sys.stderr.write("spice-coding: not implemented yet\n")
    return 2
