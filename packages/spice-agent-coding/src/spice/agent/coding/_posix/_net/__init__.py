"""The server's per-call proxy: its I/O, on the policy of ``_netpolicy``.

``_proxy`` serves one call's connections (``CallProxy``); ``_admission`` reads a
connection's first bytes and decides; ``_relay`` carries the bytes both ways;
``_peer`` checks that a connection comes from the call's own processes.
"""
