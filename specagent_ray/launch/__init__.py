"""Launching and driving a served app from outside it: the deployment profiles, a local Ray cluster and
local engines, the gateway client, the app watch, and the README's main job. A client of ``serve/``,
like the load test; ``serve/`` never imports it."""
