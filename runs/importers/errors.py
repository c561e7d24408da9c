"""What goes wrong while reading a trace: the error type, and the records skipped on the way.

A `TraceError` says where a trace broke (file, line, field) and why. Most errors cost one
record: the importer skips it and counts it in a `Skips`, whose count and first messages end
up on the run. `TooManySteps` is different: it fails the whole file, because a run is stored
whole or not at all.
"""

from __future__ import annotations

from detection.model import Run

MAX_WARNINGS = 100  # messages kept per file; the count goes on past it


class TraceError(ValueError):
    """A trace that cannot be read, with where it broke: file, line, field, reason."""

    def __init__(
        self,
        reason: str,
        *,
        source: str = "",
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.source = source
        self.line = line
        self.field = field

    def __str__(self) -> str:
        where = self.source or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        if self.field:
            where += f": field {self.field!r}"
        return f"{where}: {self.reason}"


class TooManySteps(TraceError):
    """A run over Limits.max_steps: the whole file fails (a run is stored whole or not at all)."""


def too_many_held(limits_held: int, *, source: str, line: int | None = None) -> TooManySteps:
    """The error for a file that would need more than `limits_held` steps in memory at once."""
    return TooManySteps(
        f"the file holds more than {limits_held} steps across runs that are still open (an "
        "importer keeps them all until the end of the file); split it into smaller files",
        source=source,
        line=line,
    )


class Skips:
    """Invalid records skipped while reading one file: a count and the first 100 messages."""

    def __init__(self) -> None:
        self.count = 0
        self.warnings: list[str] = []
        self.first: TraceError | None = None

    def add(self, error: TraceError) -> None:
        """Count one skipped record and keep its message."""
        self.count += 1
        self.first = self.first or error
        self.note(str(error))

    def note(self, message: str) -> None:
        """Record a warning that is not a skipped record (a clipped value, an orphan result)."""
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(message)

    def apply(self, run: Run) -> Run:
        """Add the count and the warnings to a run; return the run."""
        run.skipped += self.count
        run.warnings.extend(self.warnings)
        return run
