"""The tools on Windows: the root, replace's commit, the workdir and their Win32 calls.

``_api`` holds the ctypes calls; ``_security`` the descriptors; ``_names`` the name
rules (platform-neutral, measured on every platform); ``_root``, ``_commit``,
``_replace`` and ``_workdir`` what the POSIX modules of the same concern do there.
"""
