# One spice-coding server for one worktree, over MCP streamable HTTP behind bearer tokens.
#
#   make dist                      # the wheels this image installs (dist/)
#   docker build -t spice-coding .
#
# The build context is only dist/'s wheels (.dockerignore). The third-party dependencies
# (mcp, orjson and theirs) come from PyPI at build time, within the ranges the wheels name.
# Run it with a worktree at /worktree and a token file at /run/secrets/spice-tokens that
# belongs to the server's user (uid 10001) and is mode 0600 or 0400: docs/deploy.md.
# TLS is not served here: put a reverse proxy or an ingress with TLS in front.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# The one version of the three distributions (spice-release.json); the test that reads this
# file checks these names against what `make dist` builds.
ARG SPICE_VERSION=0.1.0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY dist/spice_agent_api-${SPICE_VERSION}-py3-none-any.whl \
     dist/spice_agent_tools_coding-${SPICE_VERSION}-py3-none-any.whl \
     dist/spice_agent_coding-${SPICE_VERSION}-py3-none-any.whl \
     /wheels/
# The siblings can only come from /wheels (no index serves them); the rest from PyPI.
RUN python -m venv /opt/spice \
 && /opt/spice/bin/pip install --find-links /wheels "spice-agent-coding==${SPICE_VERSION}" \
 && /opt/spice/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE}
# bubblewrap: the sandbox's namespaces, where the container runtime lets an unprivileged
# process make them. The server says whether shell commands run contained, and over HTTP
# serves shell only when they do (contract 11.2; docs/deploy.md).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install --yes --no-install-recommends bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 spice \
 && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin spice \
 && mkdir /worktree \
 && chown spice:spice /worktree
COPY --from=build /opt/spice /opt/spice
ENV PATH=/opt/spice/bin:$PATH PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /worktree
EXPOSE 8765
# Arguments after the image name are appended (e.g. --public-url https://HOST/mcp).
ENTRYPOINT ["spice-coding", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", "8765", "--path", "/mcp", "--allow-remote", "--token-file", "/run/secrets/spice-tokens", "--root", "/worktree"]
