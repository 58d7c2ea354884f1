claude mcp add spice-coding -- spice-coding serve --root /path/to/worktree
