"""OpenAI Agents SDK: the Spice tools as an MCP server of an agent, with strict schemas."""

import asyncio

from agents import Agent, Model, Runner
from agents.mcp import MCPServerStdio

SPICE_CODING = "spice-coding"
WORKTREE = "/path/to/worktree"


def spice_server(command: str = SPICE_CODING, worktree: str = WORKTREE) -> MCPServerStdio:
    """`spice-coding serve` over stdio, with room for the longest command (1800 s)."""
    return MCPServerStdio(
        params={"command": command, "args": ["serve", "--root", worktree]},
        cache_tools_list=True,  # the tools never change while the server runs
        # The SDK's default of 5 s per request would cut off any longer command.
        client_session_timeout_seconds=1900,
    )


async def main(
    model: Model | str = "gpt-5",
    command: str = SPICE_CODING,
    worktree: str = WORKTREE,
) -> str:
    async with spice_server(command, worktree) as spice:
        agent = Agent(
            name="coder",
            instructions="Fix failing tests.",
            model=model,
            mcp_servers=[spice],
            mcp_config={"convert_schemas_to_strict": True},
        )
        result = await Runner.run(agent, "Run the tests and fix what fails.")
    return str(result.final_output)


if __name__ == "__main__":
    print(asyncio.run(main()))
