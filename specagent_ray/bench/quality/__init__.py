"""Quality: every method on the same benchmark tasks (tau2 domains, BFCL categories), graded by the benchmark's
own evaluator, on simulated policies (``runs``) or real engines (``live``); the beyond-the-paper variants."""
