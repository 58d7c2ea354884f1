"""Lifecycle: the one shape of cleanup an owner hands back."""

from __future__ import annotations

from ._cleanup import Cleanup as Cleanup

__all__ = ["Cleanup"]
