"""Swapping faces in still images, in-process (no Ray start-up for a single image)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fusion_ray.animation import (
    Animation,
    animation_changes,
    encode_animation,
    is_animated,
    read_animation,
)
from fusion_ray.config import EngineConfig
from fusion_ray.imageheader import ImageHeader
from fusion_ray.imageio import (
    DEFAULT_MAX_PIXELS,
    FORMAT_CHANGES_KEY,
    LoadedImage,
    check_header,
    check_writable_image_path,
    decode_image,
    encode_image,
    format_changes,
    read_file,
    read_image,
    write_bytes_atomic,
)
from fusion_ray.runners.inline import Engine
from fusion_ray.types import Embedding, SourceIdentity

log = logging.getLogger(__name__)


@dataclass
class ImageSwapResult:
    """What the image swap did: faces found and swapped, per-stage timings, stand-in models used."""

    output: Path
    faces_detected: int
    faces_swapped: int
    timings_ms: dict[str, float] = field(default_factory=dict)
    stand_in_models: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    frames: int = 1
    """Frames of the image (more than one for an animated GIF, WebP or APNG)."""


@dataclass(frozen=True)
class CheckedImage:
    """An input image read once: its bytes and its header, checked (not an image, too many pixels)."""

    path: Path
    data: bytes
    header: ImageHeader

    @classmethod
    def read(cls, path: Path, max_pixels: int = DEFAULT_MAX_PIXELS) -> CheckedImage:
        data = read_file(Path(path))
        return cls(Path(path), data, check_header(data, str(path), max_pixels))

    def decode(self) -> LoadedImage:
        return decode_image(self.data, str(self.path))


@dataclass(frozen=True)
class ImageSwapInputs:
    """The image command's inputs, each read and checked once before any model loads."""

    sources: list[CheckedImage]
    target: CheckedImage
    reference: CheckedImage | None = None

    @classmethod
    def read(cls, sources: Sequence[Path], target: Path | CheckedImage, reference: Path | None = None
             ) -> ImageSwapInputs:
        """Read the target first (or take it already read), then the sources and the reference."""
        checked_target = target if isinstance(target, CheckedImage) else CheckedImage.read(target)
        return cls([CheckedImage.read(p) for p in sources], checked_target,
                   CheckedImage.read(reference) if reference is not None else None)


def reference_file(cfg: EngineConfig) -> Path | None:
    """The reference face's image when the selection mode asks for one."""
    selection = cfg.selection
    return selection.reference_path if selection.mode == "reference" else None


def load_sources(engine: Engine, paths: Sequence[Path]) -> SourceIdentity:
    """Read the source images and compute the identity once (NoFaceError when a source has no face)."""
    return _identity(engine, [CheckedImage.read(p) for p in paths])


def _identity(engine: Engine, sources: Sequence[CheckedImage]) -> SourceIdentity:
    images = [source.decode() for source in sources]
    return engine.prepare_source([img.frame for img in images], [str(s.path) for s in sources])


def load_reference(engine: Engine) -> Embedding | None:
    """The reference face's embedding when the selection mode asks for one."""
    path = reference_file(engine.cfg)
    if path is None:
        return None
    return engine.prepare_reference(read_image(path).frame, str(path))


def swap_image(engine: Engine, identity: SourceIdentity, target: LoadedImage, output: Path, *,
               reference: Embedding | None = None, force: bool = False,
               target_path: Path | None = None) -> ImageSwapResult:
    """Swap faces in one decoded image and write ``output`` atomically.

    No face in the target: the unchanged image is written (a byte copy when the formats
    match) and a warning logged.
    """
    result = engine.process_frame(target.frame, identity, reference)
    provenance = engine.provenance
    metadata = provenance.metadata()
    if result.faces_swapped == 0:
        if result.faces_detected == 0:
            log.warning("no face found in the target %s: writing it unchanged", target_path or "image")
        else:
            log.warning("%d face(s) in the target, none selected: writing it unchanged", result.faces_detected)
        if target_path is not None and target_path.suffix.lower() == output.suffix.lower():
            write_bytes_atomic(output, target_path.read_bytes(), force=force)
            return ImageSwapResult(output, result.faces_detected, 0, result.timings_ms, engine.stand_in_models, {})
    changes = format_changes(target, output.suffix)
    for change in changes:
        log.warning("%s: %s", target_path or "image", change)
    if changes:
        metadata[FORMAT_CHANGES_KEY] = "; ".join(changes)
    data = encode_image(result.frame, output.suffix, alpha=target.alpha, metadata=metadata)
    write_bytes_atomic(output, data, force=force)
    warning = provenance.warning(str(output))
    if warning:
        log.warning("%s", warning)
    return ImageSwapResult(output, result.faces_detected, result.faces_swapped, result.timings_ms,
                           engine.stand_in_models, metadata)


def swap_image_files(engine: Engine, sources: Sequence[Path], target: Path, output: Path, *,
                     force: bool = False) -> ImageSwapResult:
    """The whole image command: validate paths, read, prepare the source once, swap, write."""
    check_writable_image_path(output, force)
    inputs = ImageSwapInputs.read(sources, target, reference_file(engine.cfg))
    return swap_checked_images(engine, inputs, output, force=force)


def swap_checked_images(engine: Engine, inputs: ImageSwapInputs, output: Path, *,
                        force: bool = False) -> ImageSwapResult:
    """:func:`swap_image_files` on inputs already read and checked (the output path too)."""
    identity = _identity(engine, inputs.sources)
    reference = None
    if inputs.reference is not None and engine.cfg.selection.mode == "reference":
        reference = engine.prepare_reference(inputs.reference.decode().frame, str(inputs.reference.path))
    target = inputs.target
    if is_animated(target.header):
        animation = read_animation(target.data, target.header, str(target.path), DEFAULT_MAX_PIXELS)
        result = swap_animation(engine, identity, animation, output.suffix, reference=reference, name=str(target.path))
        write_bytes_atomic(output, result.data, force=force)
        return ImageSwapResult(output, result.faces_detected, result.faces_swapped, result.timings_ms, engine.stand_in_models,
                               result.metadata, len(animation.frames))
    return swap_image(engine, identity, target.decode(), output, reference=reference, force=force,
                      target_path=target.path)


@dataclass(frozen=True)
class AnimationSwap:
    """An animated image swapped frame by frame: the encoded output and what was found."""

    data: bytes
    faces_detected: int
    faces_swapped: int
    metadata: dict[str, str]
    changes: list[str]
    timings_ms: dict[str, float]
    """Per stage, summed over the frames."""


def swap_animation(engine: Engine, identity: SourceIdentity, animation: Animation, suffix: str, *,
                   reference: Embedding | None = None, name: str = "image") -> AnimationSwap:
    """Every frame of ``animation`` swapped (a short video: no tracking), encoded as ``suffix``
    with the source's frame durations and loop count; its format changes warned and recorded."""
    results = [engine.process_frame(frame.frame, identity, reference) for frame in animation.frames]
    metadata = engine.provenance.metadata()
    changes = animation_changes(animation, suffix)
    for change in changes:
        log.warning("%s: %s", name, change)
    if changes:
        metadata[FORMAT_CHANGES_KEY] = "; ".join(changes)
    data = encode_animation([r.frame for r in results], animation, suffix, metadata)
    timings: dict[str, float] = {}
    for result in results:
        for stage, ms in result.timings_ms.items():
            timings[stage] = timings.get(stage, 0.0) + ms
    return AnimationSwap(data, sum(r.faces_detected for r in results), sum(r.faces_swapped for r in results),
                         metadata, changes, timings)
