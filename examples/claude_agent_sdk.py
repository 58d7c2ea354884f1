"""Claude Agent SDK: the Spice tools as an MCP server of Claude Code's agent loop."""

import asyncio

from claude_agent_sdk import ClaudeAgentOptions, query

SPICE_CODING = "spice-coding"
WORKTREE = "/path/to/worktree"
LINE_BYTES = 8 * 1024 * 1024
"""Claude Code's line to the SDK holds a tool's answer three times (its structured content,
and twice its JSON as a string): up to about 5 MiB for a 1 MiB answer, past the SDK's
default 1 MiB buffer."""


def spice_options(command: str = SPICE_CODING, worktree: str = WORKTREE) -> ClaudeAgentOptions:
    return ClaudeAgentOptions(
        mcp_servers={
            "spice-coding": {
                "type": "stdio",
                "command": command,
                "args": ["serve", "--root", worktree],
            }
        },
        allowed_tools=[
            "mcp__spice-coding__read",
            "mcp__spice-coding__replace",
            "mcp__spice-coding__shell",
        ],
        max_buffer_size=LINE_BYTES,
    )


async def main() -> None:
    async for message in query(prompt="Fix the typo in greeting.py", options=spice_options()):
        print(message)


if __name__ == "__main__":
    asyncio.run(main())
