"""The driver's side of a group's run: its engine, the source identities, the provenance.

The driver embeds each distinct source set once (the actors get the small identities), and
says which models are stand-ins, in the report and in every output. Each concern is one small
function, to be replaced by the core's ``identity`` module and ``Provenance`` value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fusion_ray import __version__
from fusion_ray.config import EngineConfig
from fusion_ray.engine import Engine
from fusion_ray.errors import FusionRayError
from fusion_ray.image import metadata_for
from fusion_ray.imageio import read_image
from fusion_ray.pipeline.report import ItemResult
from fusion_ray.types import SourceIdentity


def load_driver_engine(cfg: EngineConfig) -> Engine:
    """The models the driver needs to embed the sources and the reference face, on CPU
    (a few small embeddings; GPU memory held here would be memory Ray does not count)."""
    components: list[Any] = ["detector", "embedder"] if (
        cfg.swap.swapper == "inswapper" or cfg.selection.mode == "reference") else ["detector"]
    return Engine.load(cfg.in_ray_actor(gets_gpu=False), components=components, cpu_budget=1)


def prepare_identities(sources: Mapping[int, tuple[Path, ...]], engine: Engine, results: Sequence[ItemResult]
                       ) -> tuple[dict[str, SourceIdentity], dict[int, str]]:
    """Embed each distinct source set once; items whose source fails are marked failed.

    Returns the identities by source id, and each remaining item's source id.
    """
    identities: dict[str, SourceIdentity] = {}
    by_sources: dict[tuple[Path, ...], str | BaseException] = {}
    source_of: dict[int, str] = {}
    for n, key in sources.items():
        if key not in by_sources:
            try:
                images = [read_image(p).frame for p in key]
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


def stand_in_models(cfg: EngineConfig, driver_engine: Engine) -> list[str]:
    """Stand-ins among every model the pipeline loads (the driver holds only some of them)."""
    from fusion_ray.engine import required_components
    from fusion_ray.models.standins import is_stand_in
    from fusion_ray.models.store import ModelStore, resolve_models_dir

    names = set(driver_engine.stand_in_models)
    store = ModelStore(resolve_models_dir(cfg.models.models_dir), overrides=dict(cfg.models.paths))
    wanted = required_components(cfg)
    model_names = {"swapper": cfg.models.swapper if cfg.swap.swapper == "inswapper" else None,
                   "enhancer": cfg.models.enhancer, "embedder": cfg.models.embedder}
    for component, name in model_names.items():
        if component in wanted and name is not None:
            path = store.path_for(name)
            if path.is_file() and is_stand_in(path):
                names.add(name)
    return sorted(names)


def image_metadata(stand_ins: Sequence[str]) -> dict[str, str]:
    """The PNG text / JPEG comment of image outputs."""
    return metadata_for(stand_ins)


def video_comment(stand_ins: Sequence[str]) -> str:
    """The MP4 comment of video outputs."""
    metadata = metadata_for(stand_ins)
    comment = f"made by fusion_ray {__version__}"
    if "fusion_ray.stand_in_models" in metadata:
        comment += f" with STAND-IN models ({metadata['fusion_ray.stand_in_models']}): not a real face swap"
    return comment
