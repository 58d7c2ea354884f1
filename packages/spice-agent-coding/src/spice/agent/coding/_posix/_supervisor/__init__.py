"""What runs in the per-call supervisor's own process (contract 10.1, 13.5).

The launcher compiles these modules once at start and runs them with ``python -I -S``
from a sealed memory file: ``_seccomp``, ``_landlock``, ``_tmpdir`` and ``_bridge``
as helpers, ``_main`` as ``__main__``. They import the standard library only, and each
other by their flat names there (``tests/posix/test_supervisor_imports.py`` holds them
to that); the server imports them as a package to build the spec and read the report.
"""
