"""Calibration: jobs that time the real engine, fit the simulator's cost formulas, and write profiles.

One module per concept: ``presets`` (the sweep grids), ``timer`` (warm-up, repetitions, device
sync), ``probe`` (one engine forward for a chosen batch shape), ``target`` (the model timed: a
checkpoint or a config preset with random weights and fewer layers), one module per sweep
(``sweep_prefill``, ``sweep_decode``; paging, speculative, sequence-parallel and compression sweeps
plug in the same way), ``samples`` (the append-only raw samples CSV that makes jobs resumable),
``fit`` (least squares + holdout error + refusal), ``plots``, ``job`` (the whole calibration),
``hardware`` (published specs), ``vidur`` (published operator timings), ``projection`` (roofline
scaling to other hardware) and ``inspect`` (show / compare). Nothing imports this package except
the CLI (and tests): the simulator never needs torch.
"""
