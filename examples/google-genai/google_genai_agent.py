"""google-genai (Gemini): the Spice tools as an MCP session the SDK calls by itself."""

import asyncio
from typing import Any

from google import genai
from google.genai import types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult

SPICE_CODING = "spice-coding"
WORKTREE = "/path/to/worktree"


class OneCopySession(ClientSession):
    """The SDK sends the model the whole MCP result: the answer's text and its structured
    content, the same JSON twice. This session hands it the text alone (an image stays
    an image block beside it)."""

    async def call_tool(self, *args: Any, **kwargs: Any) -> CallToolResult:  # noqa: ANN401
        result: CallToolResult = await super().call_tool(*args, **kwargs)
        return result.model_copy(update={"structured_content": None})


def spice_server(command: str = SPICE_CODING, worktree: str = WORKTREE) -> StdioServerParameters:
    """`spice-coding serve` over stdio."""
    return StdioServerParameters(command=command, args=["serve", "--root", worktree])


async def main(
    client: genai.Client | None = None,  # None: GEMINI_API_KEY from the environment
    command: str = SPICE_CODING,
    worktree: str = WORKTREE,
    model: str = "gemini-2.5-flash",
) -> str:
    gemini = client or genai.Client()
    async with (
        stdio_client(spice_server(command, worktree)) as (read, write),
        OneCopySession(read, write) as session,
    ):
        await session.initialize()
        # The session as a tool: the SDK lists its tools and calls them as the model asks.
        # A dict, not GenerateContentConfig (nor a chat): the SDK deep-copies those, session
        # included, and fails (googleapis/python-genai#2669).
        config: types.GenerateContentConfigDict = {
            "tools": [session],
            # The SDK stops calling tools after 10 calls unless told otherwise.
            "automatic_function_calling": {"maximum_remote_calls": 100},
        }
        response = await gemini.aio.models.generate_content(
            model=model,
            contents="Run the tests with python3 -m unittest and fix what fails.",
            config=config,
        )
    return response.text or ""


if __name__ == "__main__":
    print(asyncio.run(main()))
