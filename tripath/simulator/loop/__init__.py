"""The replica loops: the exact fast path, the per-iteration stepper, batching policies, preemption,
the cluster that routes between replicas and the time series sampled from them.
"""
