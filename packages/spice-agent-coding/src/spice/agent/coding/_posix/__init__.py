"""The POSIX platform: the launcher, its process parts and the sandbox.

The sandbox's parts: bwrap's namespaces, Landlock and capabilities, the seccomp filter
and the per-call supervisor that applies them.
"""
