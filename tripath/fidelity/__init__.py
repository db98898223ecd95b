"""Fidelity: the same workload served on the real engine and simulated, compared percentile by percentile."""
