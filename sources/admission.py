"""How much one poll may read: ``max_files_per_trigger`` and ``max_bytes_per_trigger`` as Spark applies them.

Files are a hard cap, bytes a soft one, and the first unit of a poll always fits, so a stream never
stalls on a file larger than the byte limit (DESIGN.md section 6).
"""

from __future__ import annotations

from dataclasses import dataclass

from sources.options import DeltaSourceOptions


@dataclass
class Admission:
    """Spark's AdmissionLimits: what is left of one poll's limits as units are admitted."""

    files_left: int | None
    bytes_left: int | None
    admitted_any: bool = False

    @classmethod
    def for_poll(cls, options: DeltaSourceOptions) -> Admission:
        """The full limits of a new poll."""
        return cls(options.effective_max_files, options.max_bytes_per_trigger)

    def has_capacity(self) -> bool:
        """Whether another file may start (file-by-file admission)."""
        return (self.files_left is None or self.files_left > 0) and (
            self.bytes_left is None or self.bytes_left > 0
        )

    def fits(self, files: int, nbytes: int) -> bool:
        """Whole-unit admission (CDF versions, event-time groups)."""
        if not self.admitted_any:
            return True
        return (self.files_left is None or self.files_left - files >= 0) and (
            self.bytes_left is None or self.bytes_left - nbytes >= 0
        )

    def take(self, files: int, nbytes: int) -> None:
        """Count an admitted unit against the limits."""
        self.admitted_any = True
        if self.files_left is not None:
            self.files_left -= files
        if self.bytes_left is not None:
            self.bytes_left -= nbytes
