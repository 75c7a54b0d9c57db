"""The agent service that every wire shares (Responses, Chat Completions, Anthropic Messages).

Wire-neutral: ``terms`` (what the server offers), ``port`` (the typed coordinator calls), ``readback``
(records read back as neutral items and response snapshots), ``service`` (turns, replays, forks, the
session binder's lookups), ``canon`` and ``binder`` (the client-visible conversation, normalised, and the
per-tenant index of it). No module here imports a wire; the wires import these.
"""
