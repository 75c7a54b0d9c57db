"""``specagent-ray bench``: the benchmarks, in parts that never import one another (import-linter holds it).

- ``quality/``: every method on benchmark tasks (tau2, BFCL), graded by the benchmark's own evaluator; ``beyond``.
- ``served/``: the Ray Serve app under load, restarts and faults (batching, scale, restart, chaos, calls, binder,
  meter).
- ``engines/``: the agent-aware engine features on real vLLM engines; ``roofline/``: the device's roofline probe.
- ``theory/``: the protocol loop in a synthetic world (Proposition 1, loop throughput).

Their results are ``results/``'s; ``bench adaptive`` (the K controller at the planner's loads) is the planner's.
"""
