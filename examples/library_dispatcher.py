"""The tools as a library: one dispatcher, two tools, one call."""

import asyncio

from spice.agent.dispatch import Dispatcher
from spice.agent.tool import Call
from spice.agent.tools.coding import Config, new_read, new_replace

WORKTREE = "/path/to/worktree"


async def main(worktree: str = WORKTREE) -> None:
    config = Config(worktree)  # absolute root; touches nothing yet
    dispatcher = Dispatcher([new_read(config), new_replace(config)])
    result = await dispatcher.dispatch(Call("1", "read", '{"path": "greeting.py"}'))
    print(result.is_error, result.content)


if __name__ == "__main__":
    asyncio.run(main())
