"""Dispatch: every executable route reaches a tool through a ``Dispatcher``."""

from __future__ import annotations

from ._dispatcher import Dispatcher as Dispatcher
from ._dispatcher import Interceptor as Interceptor
from ._dispatcher import Proceed as Proceed

__all__ = ["Dispatcher", "Interceptor", "Proceed"]
