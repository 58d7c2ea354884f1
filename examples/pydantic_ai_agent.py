"""pydantic-ai 2: the Spice tools as the MCP toolset of an agent."""

import asyncio

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models import Model

SPICE_CODING = "spice-coding"
WORKTREE = "/path/to/worktree"


def spice_toolset(command: str = SPICE_CODING, worktree: str = WORKTREE) -> MCPToolset[None]:
    """`spice-coding serve` over stdio, with room for the longest command (1800 s)."""
    return MCPToolset(
        StdioTransport(command, ["serve", "--root", worktree]),
        init_timeout=30,  # the server starts in about a second; leave room on a busy machine
        read_timeout=1900,  # per request; the default 300 s would cut a long test run short
        # A refused call (a mistyped path, a stale digest) is an answer for the model to
        # read, not a retry: the default ends the run after two failures of one tool.
        tool_error_behavior="failed",
        max_retries=5,  # for arguments the model gets wrong
        include_instructions=True,  # the server's edit workflow, for the model
    )


async def main(
    model: Model | str = "anthropic:claude-sonnet-4-5",
    command: str = SPICE_CODING,
    worktree: str = WORKTREE,
) -> str:
    agent = Agent(model, toolsets=[spice_toolset(command, worktree)])
    async with agent:
        result = await agent.run("Read greeting.py, fix the typo, then run the tests.")
    return result.output


if __name__ == "__main__":
    print(asyncio.run(main()))
