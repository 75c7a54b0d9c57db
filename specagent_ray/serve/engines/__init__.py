"""The engines as the sessions see them: the engine clients (simulated, OpenAI-compatible; each session's
drafter, strong step and verifier), request priority, prefill-ahead, and the simulated engine. Imports
only ``serve.core`` of ``serve/``; a session comes in through ``core.views.SessionView``."""
