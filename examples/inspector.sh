# The MCP Inspector's CLI mode (it needs Node >= 22.19): list the tools, then call one.
npx -y @modelcontextprotocol/inspector@2.12.0 --cli \
  spice-coding serve --root /path/to/worktree --method tools/list
npx -y @modelcontextprotocol/inspector@2.12.0 --cli \
  spice-coding serve --root /path/to/worktree \
  --method tools/call --tool-name read --tool-arg path=greeting.py
