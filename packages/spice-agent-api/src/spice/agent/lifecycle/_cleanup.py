"""The ``Cleanup`` type."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

Cleanup = Callable[[], Awaitable[None]]
"""Releases what a component owns. Idempotent, safe to call concurrently, and bounded
by the caller (``async with asyncio.timeout(...): await cleanup()``)."""
