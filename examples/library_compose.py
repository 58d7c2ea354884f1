"""The composition root: all three tools, the POSIX platform, and the shell's cleanup.

Not contained: compose() wires the plain platform launcher, so a shell command runs with
your user's full authority (every answer says "contained": false). For contained commands,
run the server (`spice-coding serve`) or `spice-coding call shell ...` instead.
"""

import asyncio

from spice.agent.coding import compose, resolve_config
from spice.agent.tool import Call

WORKTREE = "/path/to/worktree"


async def main(worktree: str = WORKTREE) -> None:
    async with compose(resolve_config(worktree)) as dispatcher:
        result = await dispatcher.dispatch(
            Call("1", "shell", '{"argv": ["python3", "-m", "unittest"]}')
        )
        print(result.is_error, result.content)
    # leaving the block ran the shell's Cleanup: no process of ours is left


if __name__ == "__main__":
    asyncio.run(main())
