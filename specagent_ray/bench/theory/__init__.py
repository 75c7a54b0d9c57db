"""The protocol loop in a synthetic world that satisfies Assumption 2: Proposition 1 (and the chain's) checked
by Monte-Carlo, and the loop's own throughput."""
