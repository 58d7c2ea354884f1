"""A tiny module for the Spice coding demo."""


def greet(name: str) -> str:
    """Return a friendly greeting for ``name``."""
    return "Helo, " + name + "!"
