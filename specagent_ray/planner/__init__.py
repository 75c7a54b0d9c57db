"""``specagent-ray plan``: the capacity planner's command (inputs, tables, JSON, plot) and its checks against the
sim profile's load tests, and ``bench adaptive`` (the K controller on the planner's fleets and loads). The math is
``costs/planner.py``, ``costs/fleet.py`` and ``costs/totals.py``."""
