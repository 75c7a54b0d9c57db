"""Test fixtures that run real parts on a machine without a GPU, a cloud or a model hub: a served
gateway in a thread, a real MCP server, fault injection, a local Prometheus, temporary folders.

Nothing under ``specagent_ray/`` outside this package imports from it (a test checks).
The local models the main job builds live in :mod:`specagent_ray.models.tiny` and
:mod:`specagent_ray.models.smollm2`.
"""
