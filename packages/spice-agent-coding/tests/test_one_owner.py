"""One owner per fact (review D7): each is defined once and followed wherever it is used.

The worktree variable and its rule (the product's ``Config.root_in``), the refused-host
bound (the contract's ``spice.agent.process.MAXIMUM_REFUSED_HOSTS``), the proxy's port
inside a call (the supervisor's ``_bridge``) and the loopback rule
(``tests/netpolicy/test_loopback.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spice.agent.coding import resolve_config
from spice.agent.coding._mcp import _outputs
from spice.agent.coding._posix import _containment
from spice.agent.coding._posix._net import _admission
from spice.agent.coding._posix._supervisor import _bridge
from spice.agent.process import MAXIMUM_REFUSED_HOSTS
from spice.agent.tools.coding import Config, _sandbox_fields


@pytest.mark.parametrize("value", ["", None])
def test_an_empty_or_missing_worktree_variable_is_no_root_for_both(
    value: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The application then takes the current directory, the library refuses."""
    environ = {} if value is None else {"SPICE_AGENT_WORKTREE": value}
    monkeypatch.chdir(tmp_path)
    assert resolve_config(None, environ).root == str(tmp_path)
    with pytest.raises(ValueError, match="SPICE_AGENT_WORKTREE is not set"):
        Config.from_environment(environ)


def test_a_set_worktree_variable_is_the_root_for_both(tmp_path: Path) -> None:
    environ = {"SPICE_AGENT_WORKTREE": str(tmp_path)}
    assert resolve_config(None, environ).root == Config.from_environment(environ).root
    assert resolve_config(str(tmp_path / "flag"), environ).root == str(tmp_path / "flag")


def test_the_refused_host_bound_is_the_contracts() -> None:
    assert _sandbox_fields.MAXIMUM_REFUSED_HOSTS == MAXIMUM_REFUSED_HOSTS
    assert _admission.MAXIMUM_REFUSED_REPORTED == MAXIMUM_REFUSED_HOSTS
    per_host = _sandbox_fields.MAXIMUM_HOST_BYTES + 3  # quoted and separated
    assert _outputs.NETWORK_REFUSED_CHARS >= MAXIMUM_REFUSED_HOSTS * per_host


def test_the_reported_proxy_is_where_the_bridge_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``tools`` report names the bridge's own address and port (a literal was there)."""
    monkeypatch.setattr(_bridge, "PORT", _bridge.PORT + 1)
    policy = _containment.Containment("workspace", "workspace", 1)
    monkeypatch.setattr(
        _containment.Containment, "proxied", property(lambda self: True), raising=True
    )
    report = policy.domains_report()
    assert report["proxy"] == (
        f"http://{_bridge.ADDRESS}:{_bridge.PORT} inside the call (HTTP_PROXY, HTTPS_PROXY)"
    )


def test_the_posix_launcher_has_the_optional_parts_the_shell_reads() -> None:
    """The product reads a launcher's parts by protocol (``_optional``): the application's
    launcher has them (its process's are checked by every contained shell test)."""
    from spice.agent.coding import PosixLauncher  # noqa: PLC0415
    from spice.agent.tools.coding import _optional  # noqa: PLC0415

    launcher = PosixLauncher()
    assert isinstance(launcher, _optional.SaysContained)
    assert isinstance(launcher, _optional.DescribesContainment)
