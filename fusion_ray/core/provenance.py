"""``Provenance``: what made an output, written the same way into every output.

Computed once from the :class:`ModelInfo` of the models used; it writes the PNG text chunks,
the JPEG/MP4 comment, the report field and the HTTP header, and names the precision each model
ran at (``fusion_ray.precision``, and in the comment). A stand-in's output always says
that it is not a real face swap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fusion_ray import __version__
from fusion_ray.core.modelset import ModelInfo

STAND_IN_KEY = "fusion_ray.stand_in_models"
PRECISION_KEY = "fusion_ray.precision"


@dataclass(frozen=True)
class Provenance:
    """The software that made an output and the stand-in models (if any) it used."""

    stand_in_models: tuple[str, ...] = ()
    software: str = f"fusion_ray {__version__}"
    precisions: tuple[tuple[str, str], ...] = ()
    """(model name, precision that ran), by name."""

    @classmethod
    def of(cls, info: Mapping[str, ModelInfo], used: Iterable[str] | None = None) -> Provenance:
        """From model info, restricted to the model names ``used`` (default: all of them)."""
        names = set(info) if used is None else set(used)
        return cls(tuple(sorted(n for n, item in info.items() if n in names and item.stand_in)),
                   precisions=tuple(sorted((n, item.precision) for n, item in info.items() if n in names)))

    def precision_text(self) -> str:
        """``scrfd_2.5g=int8,inswapper_128=fp32`` ('' when no model ran)."""
        return ",".join(f"{name}={precision}" for name, precision in self.precisions)

    @property
    def is_stand_in(self) -> bool:
        return bool(self.stand_in_models)

    def comment(self) -> str:
        """One line for a JPEG COM segment or an MP4 comment."""
        made_by = f"made by {self.software}" + (f" (precision {self.precision_text()})" if self.precisions else "")
        if not self.stand_in_models:
            return made_by
        return f"{made_by} with STAND-IN models ({', '.join(self.stand_in_models)}): not a real face swap"

    def metadata(self) -> dict[str, str]:
        """Key/value metadata (PNG tEXt chunks; joined into the JPEG comment)."""
        meta = {"Software": self.software}
        if self.precisions:
            meta[PRECISION_KEY] = self.precision_text()
        if self.stand_in_models:
            meta[STAND_IN_KEY] = ",".join(self.stand_in_models)
            meta["Comment"] = ("made with fusion_ray STAND-IN models (" + ", ".join(self.stand_in_models)
                               + "): not a real face swap")
        return meta

    def header_value(self) -> str | None:
        """The value of the service's stand-in header, or None when no stand-in was used."""
        return ",".join(self.stand_in_models) or None

    def report_field(self) -> list[str]:
        """The job report's ``stand_in_models`` list."""
        return list(self.stand_in_models)

    def warning(self, output: str) -> str | None:
        """The warning to log for ``output``, or None."""
        if not self.stand_in_models:
            return None
        return f"{output} was made with stand-in models ({', '.join(self.stand_in_models)}): it is NOT a real face swap"
