"""The plain `mcp` client: one session over stdio, the tools listed and one called."""

import asyncio
import json

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SPICE_CODING = "spice-coding"
WORKTREE = "/path/to/worktree"


async def main(command: str = SPICE_CODING, worktree: str = WORKTREE) -> dict[str, object]:
    server = StdioServerParameters(command=command, args=["serve", "--root", worktree])
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        print([tool.name for tool in listed.tools])
        result = await session.call_tool("read", {"path": "greeting.py"})
        content = result.structured_content or {}
        print(result.is_error, json.dumps(content)[:200])
        return content


if __name__ == "__main__":
    asyncio.run(main())
