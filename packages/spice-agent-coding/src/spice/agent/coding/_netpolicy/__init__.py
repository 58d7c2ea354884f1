"""The network policy and its wire, platform-neutral and sans-IO.

``_domains`` judges a host against the allowed patterns; ``_head`` parses a proxy
request's head; ``_netpolicy._tlshello`` reads the server name of a TLS ClientHello;
``_netpolicy._upstream`` is the host's corporate proxy; ``_netpolicy._hostconfig`` what the host
configures for installers (index hosts, registries, its CA). Nothing here reads,
writes or resolves: the POSIX proxy (``_posix._net._proxy``) does the I/O.
"""
