"""The cost model (every figure ESTIMATED unless a module says MEASURED): what a call, a step and a fleet cost.

- the paper's theory (``theory.py``: Propositions 1 and 2), per-call roofline (``model.py``), calls per
  committed step (``calls.py``), the closed-loop batch model (``planner.py``), fleets and totals over every
  role (``fleet.py``, ``totals.py``);
- the inputs: model specs and GPU profiles (``specs.py``, ``data/``), MEASURED GPU profiles from the roofline
  probe (``measured_gpus.py``), deployments, hardware and prices (``deployment.py``, ``hardware.py``,
  ``pricing.py``), and the run's ledger of calls (``ledger.py``).

The run-time K controller that prices K with ``planner.py`` is ``control/``.
"""
