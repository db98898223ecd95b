"""The SimPy simulation of batched serving: a scenario on a profile gives request records.

``scenario`` (what is simulated), ``loop`` (the replica loops and their batching), ``paths`` (the
physics of the optimization paths), and beside them the iteration costs, the capacity estimate,
the runner and its summary.
"""
