"""The simulated world (SIMULATED: never claims about a real model): what stands in for models and users
when a run has no real ones.

- ``gold.py``: a benchmark task's gold path (tau2, BFCL) and ``SimSettings``, the seeded weak and strong
  policies, verifier and mid judge that replay it, for the bench and for the sim engines alike;
- ``script.py``: the gold path a simulated run replays (``GoldScript``); ``parallel.py``: which of its calls
  a model could issue at once;
- ``policies.py``: the simulated policies and verifier and their error model; ``mutate.py``: how a policy
  gets a write wrong; ``judge.py``: the judges' stated assumptions beyond one verdict (second looks, the
  mid verifier);
- ``users.py``: the scripted users (tau2's customer, a BFCL case's turns).

Token figures come from the token model shared with the serving path (``models/tokens.py``). Served
sessions reach this package only through the sim engines (``serve/engines/sim_engine.py``).
"""
