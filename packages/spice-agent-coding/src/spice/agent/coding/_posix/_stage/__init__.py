"""The staged worktree (contract 13.1): each contained call writes to a stage.

``_stage`` decides where a root's stages live, makes one per call, and mounts it over the
worktree in the spawned ``bwrap``'s own user and mount namespaces (an overlay whose upper
layer is the call's); ``_upper`` reads the upper layer, after every process of the call
is gone, into the exact list of changes the commit judges and applies.
"""
