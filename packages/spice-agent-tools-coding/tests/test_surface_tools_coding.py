"""Public surface of the distribution."""

from __future__ import annotations

from spice.agent.tools import coding


def test_public_surface_is_exactly_the_contract() -> None:
    """``__all__`` names the contract's public names and nothing else."""
    expected = {
        "MAXIMUM_ANSWER_BYTES",
        "SECURITY_WARNING",
        "Config",
        "ProtectedPaths",
        "new_read",
        "new_replace",
        "new_shell",
    }
    assert expected == set(coding.__all__)
