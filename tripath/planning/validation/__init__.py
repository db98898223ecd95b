"""Checks of the planner against published GPU results (docs/gpu_validation.md)."""
