"""The driver's side of a group's run: its engine, the source identities, the provenance.

The driver embeds each distinct source set once with the core's ``identity`` functions (the
actors get the small identities), and its :class:`Provenance` says which models are
stand-ins, in the report and in every output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fusion_ray.config import EngineConfig
from fusion_ray.core.modelset import ModelInfo
from fusion_ray.core.provenance import Provenance
from fusion_ray.errors import FusionRayError
from fusion_ray.imageio import LoadedImage, decode_image, read_image
from fusion_ray.jobs.report import ItemResult
from fusion_ray.runners.inline import Engine
from fusion_ray.storage import Location, Storage
from fusion_ray.types import SourceIdentity


def load_driver_engine(cfg: EngineConfig) -> Engine:
    """The models the driver needs to embed the sources and the reference face, on CPU
    (a few small embeddings; GPU memory held here would be memory Ray does not count); the
    landmarker too when ``cfg`` names one: source faces are aligned on its points as targets are."""
    components: list[Any] = ["detector", "embedder"] if (
        cfg.swap.swapper == "inswapper" or cfg.selection.mode == "reference") else ["detector"]
    if cfg.landmarker.model != "none":
        components.append("landmarker")
    return Engine.load(cfg.in_ray_actor(gets_gpu=False), components=components, cpu_budget=1)


def prepare_identities(sources: Mapping[int, tuple[Path | Location, ...]], engine: Engine,
                       results: Sequence[ItemResult], storage: Storage | None = None
                       ) -> tuple[dict[str, SourceIdentity], dict[int, str]]:
    """Embed each distinct source set once; items whose source fails are marked failed.
    Sources in a bucket are read through ``storage``.

    Returns the identities by source id, and each remaining item's source id.
    """
    identities: dict[str, SourceIdentity] = {}
    by_sources: dict[tuple[Path | Location, ...], str | BaseException] = {}
    source_of: dict[int, str] = {}
    for n, key in sources.items():
        if key not in by_sources:
            try:
                images = [_read_source(p, storage).frame for p in key]
                source_id = f"s{len(identities)}"
                identities[source_id] = engine.prepare_source(images, [str(p) for p in key])
                by_sources[key] = source_id
            except FusionRayError as exc:
                by_sources[key] = exc
        outcome = by_sources[key]
        if isinstance(outcome, BaseException):
            results[n].fail(outcome)
        else:
            source_of[n] = outcome
    return identities, source_of


def _read_source(source: Path | Location, storage: Storage | None) -> LoadedImage:
    if isinstance(source, Location):
        return decode_image((storage or Storage()).read_bytes(source), str(source))
    return read_image(source)


def driver_provenance(planned: Mapping[str, ModelInfo], driver_engine: Engine) -> Provenance:
    """The provenance of every model the pipeline uses: the driver's own, and the stage actors'
    as planning read them from their files (``inspect_models``), so every output made with a
    stand-in says so."""
    return Provenance.of({**planned, **driver_engine.model_info})
