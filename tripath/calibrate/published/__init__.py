"""Profiles from published measurements: Vidur's operator timings and roofline projection to other GPUs."""
