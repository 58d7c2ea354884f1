"""The composition root: all three tools, the POSIX platform, and the shell's cleanup."""

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
