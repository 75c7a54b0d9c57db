"""The HTTP front door: the sessions API's routes (FastAPI), API keys and tenants, rate limits, retries
to the coordinator; it mounts the Responses API's routes. The top of ``serve/`` below ``app``."""
