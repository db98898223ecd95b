"""GPU profiles built from aiconfigurator-core's measured kernel tables (docs/aic_profiles.md)."""
