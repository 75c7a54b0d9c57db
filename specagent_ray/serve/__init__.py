"""The served application: gateway, coordinator shards, tool hosts and engines on Ray Serve (``app.build_app``)."""
