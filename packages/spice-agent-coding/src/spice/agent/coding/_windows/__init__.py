"""The Windows platform: the launcher (Job Objects), its API and its executable resolver."""
