"""The application's public surface, exactly."""

from __future__ import annotations

import pytest

import spice.agent.coding as application
import spice.agent.coding.dishka as dishka_integration
from spice.agent.coding._mcp._server import mcp_server
from spice.agent.coding._mcp._stdio import serve_stdio


def test_the_application_exports_exactly_its_public_names() -> None:
    """``__all__`` is the platform, the composition root and the two MCP entry points."""
    assert [
        "PosixLauncher",
        "PosixResolver",
        "compose",
        "mcp_server",
        "resolve_config",
        "serve_stdio",
    ] == sorted(application.__all__)


def test_every_exported_name_resolves() -> None:
    """Each name in ``__all__`` is importable, the MCP ones on first use."""
    for name in application.__all__:
        assert getattr(application, name) is not None
    assert mcp_server is application.mcp_server
    assert serve_stdio is application.serve_stdio


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    """The lazy loader answers only for its two names."""
    with pytest.raises(AttributeError):
        _ = application.nothing_here


def test_the_dishka_integration_exports_exactly_its_names() -> None:
    """``spice.agent.coding.dishka`` exports the provider builder and the bean names."""
    assert ["BEAN_NAMES", "coding_providers"] == sorted(dishka_integration.__all__)
