claude mcp add spice-coding -- /path/to/spice/.venv/bin/spice-coding serve --root /path/to/worktree
