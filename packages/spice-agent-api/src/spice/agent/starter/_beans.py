"""The records: ``AutoBean`` and ``AutoConfiguration``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import final

from spice.agent.tool._bounds import require_identity


@final
@dataclass(frozen=True, slots=True)
class AutoBean:
    """One default: a name, the factory that builds it, and how it yields to others.

    ``fallback`` beans are used only when the application provides none of that name.
    The name follows the identity rule of tool names (non-empty, at most
    ``MAXIMUM_IDENTITY_BYTES`` UTF-8 bytes, no control characters or surrounding space).
    """

    name: str
    factory: Callable[..., object]
    fallback: bool = True
    primary: bool = False

    def __post_init__(self) -> None:
        require_identity(self.name, "bean name")
        if not callable(self.factory):
            raise ValueError("bean factory must be callable")
        if not isinstance(self.fallback, bool) or not isinstance(self.primary, bool):
            raise ValueError("fallback and primary must be bools")


@final
@dataclass(frozen=True, slots=True)
class AutoConfiguration:
    """A package's declarative defaults: where they were reviewed, and the beans."""

    review: str
    beans: tuple[AutoBean, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.review, str) or not self.review:
            raise ValueError("review must name the document that reviewed the defaults")
        if isinstance(self.beans, (str, bytes)) or not isinstance(self.beans, Iterable):
            raise ValueError("beans must be a collection")
        beans = tuple(self.beans)
        if not all(isinstance(b, AutoBean) for b in beans):
            raise ValueError("beans must be AutoBean records")
        if len({b.name for b in beans}) != len(beans):
            raise ValueError("bean names must be unique")
        object.__setattr__(self, "beans", beans)
