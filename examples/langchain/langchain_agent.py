"""LangChain: the Spice tools as LangChain tools, over one MCP session.

`MultiServerMCPClient.get_tools()` gives tools that start a new `spice-coding serve` for
every call (about 2 s each); a session kept open for the whole task answers each call in
milliseconds. Give the tools to any LangChain agent (e.g. `create_agent(model, tools)`)
inside the `async with` block.
"""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from langchain_core.tools import BaseTool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools

SPICE_CODING = "spice-coding"
WORKTREE = "/path/to/worktree"


def spice_client(command: str = SPICE_CODING, worktree: str = WORKTREE) -> MultiServerMCPClient:
    return MultiServerMCPClient(
        {"spice": {"transport": "stdio", "command": command, "args": ["serve", "--root", worktree]}}
    )


@asynccontextmanager
async def spice_tools(
    command: str = SPICE_CODING, worktree: str = WORKTREE
) -> AsyncIterator[dict[str, BaseTool]]:
    """The three tools, all on one server session for as long as the block lasts."""
    async with spice_client(command, worktree).session("spice") as session:
        yield {tool.name: tool for tool in await load_mcp_tools(session)}


async def main(command: str = SPICE_CODING, worktree: str = WORKTREE) -> str:
    async with spice_tools(command, worktree) as tools:
        await tools["read"].ainvoke({"path": "greeting.py", "limit": 1})
        ran = await tools["shell"].ainvoke({"argv": ["python3", "-m", "unittest", "-q"]})
    return str(ran)


if __name__ == "__main__":
    print(asyncio.run(main()))
