"""The tool host (tau2, BFCL and MCP tool sources, with at-most-once writes through ``serve.log``'s
idempotency records) and the sources as a session sees them. Imports ``serve.log`` and ``serve.core``."""
