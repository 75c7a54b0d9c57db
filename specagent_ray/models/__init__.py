"""The models an agent session runs on, real or scripted (the simulated ones are ``sim/``'s).

- real backends: ``backend.py`` (any OpenAI-compatible endpoint), ``llm.py`` (a policy and a verifier on
  one), ``prompts.py``, ``parsing.py`` and ``structured.py`` (what is sent and what may come back);
- local model folders that vLLM loads: ``tiny.py`` (random weights), ``smollm2.py``, ``folders.py``;
- scripted engines (SCRIPTED, no model runs): ``scripted.py`` (a fixed list of outputs) and
  ``scripted_plan.py`` (the plan written in the user's message);
- ``tau2_user.py``: tau2's own LLM user simulator on a real endpoint;
- ``tokens.py``: the token model, shared by the simulated world and the served wires' estimates.
"""
