"""The durable session log: records (``records``, ``wire``), the store-backed log and its lease
(``session_log``, ``lease``), group commit, the tool host's idempotency records, and replay after a
restart (``recovery``). Imports only ``serve.core`` of ``serve/``."""
