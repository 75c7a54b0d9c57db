"""``python -m specagent_ray.bench.roofline``: the roofline probe without the rest of the CLI (PyTorch, no Ray)."""

from .command import main

raise SystemExit(main())
