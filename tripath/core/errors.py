"""One error type for bad user input, so the CLI can exit 2 with a message that names file and field."""

from __future__ import annotations


class InputError(ValueError):
    """A scenario, profile, trace or checkpoint is malformed or missing.

    The message always names the file (when there is one) and the field, e.g.
    ``data/scenarios/x.toml: workload.arrival.rate_per_s: must be > 0, got -1``.
    """

    def __init__(self, source: str | None, field: str | None, problem: str) -> None:
        self.source = source
        self.field = field
        self.problem = problem
        where = ": ".join(part for part in (source, field) if part)
        super().__init__(f"{where}: {problem}" if where else problem)


def read_input_text(path: object, missing: str, unreadable: str) -> str:
    """The UTF-8 text of a user's input file; a missing or unreadable one is an InputError naming the file
    (``missing``: the message when it does not exist; ``unreadable``: the prefix of the OS or decoding error)."""
    from pathlib import Path

    try:
        return Path(str(path)).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(path), None, missing) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(str(path), None, f"{unreadable}: {err}") from None
