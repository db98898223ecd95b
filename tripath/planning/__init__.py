"""Planning analyses on top of the simulator: which path, how many GPUs, what if.

executor (where jobs run), cache (results on disk), sweep (jobs and their outcomes), candidates
(the optimization paths as scenario transforms), matrix, capacity, whatif, stack, breakeven.
docs/planning.md lists the public API.
"""
