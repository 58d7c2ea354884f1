"""Starter: declarative records of default beans a package contributes.

Nothing here registers anything; an application reads a record and decides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import final

from spice.agent.tool import MAXIMUM_IDENTITY_BYTES


@final
@dataclass(frozen=True, slots=True)
class AutoBean:
    """One default: a name, the factory that builds it, and how it yields to others.

    ``fallback`` beans are used only when the application provides none of that name.
    """

    name: str
    factory: Callable[..., object]
    fallback: bool = True
    primary: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("bean name must be a non-empty string")
        if len(self.name.encode("utf-8", "replace")) > MAXIMUM_IDENTITY_BYTES:
            raise ValueError("bean name exceeds the identity bound")
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


__all__ = ["AutoBean", "AutoConfiguration"]
