"""The run-time K controller: how many steps each block drafts, from a session's acceptance and the engines' load.

``controller.py`` prices every K with the cost model's planner (``costs/planner.py``); ``online.py`` keeps a
session's estimates and asks the controller per block. The served sessions (``serve/sessions/block_sizes.py``)
and the adaptive bench use them. Pure: no Ray, no HTTP, no bench.
"""
