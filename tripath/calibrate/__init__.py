"""Calibration: jobs that time the real engine, fit the simulator's cost formulas and write profiles;
builders that turn published GPU timings into profiles.

Only the CLI imports this package: the simulator never needs torch.
"""
