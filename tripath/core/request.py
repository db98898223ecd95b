"""What one request asks of the system: the input of both the simulator and the real engine's serving loop."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """A request before it is served.

    arrival_s is seconds from the start of the run; the lengths are in tokens.
    output_tokens counts every generated token including the first, so it is >= 1.
    """

    request_id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    task: str = "default"

    def __post_init__(self) -> None:
        if not self.arrival_s >= 0.0:  # also rejects NaN
            raise ValueError(f"request {self.request_id}: arrival_s must be >= 0, got {self.arrival_s}")
        if self.prompt_tokens < 1:
            raise ValueError(f"request {self.request_id}: prompt_tokens must be >= 1, got {self.prompt_tokens}")
        if self.output_tokens < 1:
            raise ValueError(f"request {self.request_id}: output_tokens must be >= 1, got {self.output_tokens}")
