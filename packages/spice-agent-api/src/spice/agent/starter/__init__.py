"""Starter: declarative records of default beans a package contributes.

Nothing here registers anything; an application reads a record and decides.
"""

from __future__ import annotations

from ._beans import AutoBean as AutoBean
from ._beans import AutoConfiguration as AutoConfiguration

__all__ = ["AutoBean", "AutoConfiguration"]
