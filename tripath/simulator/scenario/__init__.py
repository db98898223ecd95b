"""A scenario: its TOML, its workload, cluster, batching, SLA and strategy, and the requests it generates."""
