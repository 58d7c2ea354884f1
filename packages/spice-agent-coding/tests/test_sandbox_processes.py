"""Round 4's process attacks (``sandbox-attacks-round3.md``) against the real kernel, on
both paths: what a command can reach of its own call's machinery, and the bounds on its
processes and memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from test_sandbox_attacks import policy, root, run_python

from spice.agent.coding._containment import Containment

__all__ = ["policy", "root"]

DESCRIPTORS: Final = (
    "import json, os\n"
    "found = {}\n"
    "for name in os.listdir('/proc/self/fd'):\n"
    "    try:\n"
    "        found[name] = os.readlink('/proc/self/fd/' + name)\n"
    "    except OSError:\n"
    "        pass\n"
    "print(json.dumps(found))\n"
)


# -- R4-7: the call's spec never reaches the command -------------------------------------


async def test_r4_7_no_descriptor_of_the_spec_survives_execve(
    policy: Containment, root: Path
) -> None:
    """The command's open descriptors are its three streams (the listing's own is closed
    by the time it is read): no memory file of the spec (the server's pid, the writable
    paths), no pipe of the supervisor's."""
    outcome, output = await run_python(policy, root, DESCRIPTORS)
    assert outcome.exit_code == 0, output
    found: dict[str, str] = json.loads(output)
    assert not [target for target in found.values() if "memfd:" in target]
    assert set(found) == {"0", "1", "2"}, found
