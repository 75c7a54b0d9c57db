"""A bench run's results: what one trajectory yields (``trial``), Pass@1 and its intervals (``stats``), the
summaries, JSON and plot (``summaries``), the tables (``tables``), and ``specagent-ray results`` (``command``):
list, show and compare stored runs."""
