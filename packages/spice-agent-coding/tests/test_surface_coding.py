"""Public surface of the distribution."""

from __future__ import annotations

import spice.agent.coding as application


def test_application_package_imports() -> None:
    """The application package imports and declares a public surface."""
    assert isinstance(application.__all__, list)
    assert {"PosixLauncher", "PosixResolver"} <= set(application.__all__)
