"""The load generator (``specagent-ray loadtest``): bounded closed- or open-loop runs against a gateway
over HTTP, reported as JSON, CSV and a PNG of latency against load."""
