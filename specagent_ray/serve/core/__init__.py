"""The floor of ``serve/``: the profile's config (``config``, ``tuning``, ``tenants``), the sessions API's
bodies (``api``), the HTTP errors, and the small shared types the parts above take (``catalog``,
``views``, ``handles``, ``batcher``). Imports nothing else of ``serve/``."""
