"""Animated images (GIF, WebP, APNG) as short videos: every frame read, every frame written
back with its duration and the loop count (Pillow reads and writes all three).

Frames come out as :class:`~fusion_ray.imageio.LoadedImage` (BGR uint8 and alpha), each
composed as a viewer shows it (Pillow applies the GIF and APNG disposal and blending).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image, PngImagePlugin

from fusion_ray.errors import InputError
from fusion_ray.imageheader import ImageHeader, ImageTooLargeError
from fusion_ray.imageio import LoadedImage, check_frames_size, to_bgr_uint8
from fusion_ray.types import Frame

ANIMATED_SUFFIXES = {".gif": "GIF", ".webp": "WEBP", ".png": "PNG", ".apng": "PNG"}
"""Output extensions that hold an animation, with Pillow's format name."""
DEFAULT_DURATION_MS = 100
"""A frame's duration when the file gives none (browsers show such GIF frames about this long)."""


@dataclass(frozen=True)
class Animation:
    """An animated image: its frames, each frame's duration, and how often it loops."""

    frames: tuple[LoadedImage, ...]
    durations_ms: tuple[int, ...]
    loop: int | None
    """0: forever; n: n times more; None: the file says nothing (a GIF plays once)."""
    format: str


def is_animated(header: ImageHeader) -> bool:
    return header.frames > 1


def check_animated_output(header: ImageHeader, suffix: str, name: str = "image") -> None:
    """InputError, before any work, when an animated image's output cannot hold its frames."""
    if is_animated(header) and suffix.lower() not in ANIMATED_SUFFIXES:
        raise InputError(f"{name} is an animated {header.format.upper()} of {header.frames} frames, and {suffix!r} "
                         "holds one frame: write it as .gif, .webp or .png (APNG)")


def animation_changes(animation: Animation, suffix: str) -> list[str]:
    """What writing the animation as ``suffix`` loses (GIF: a palette, on/off transparency)."""
    if suffix.lower() != ".gif":
        return []
    changes = ["frames written as GIF: at most 256 colours each"]
    if any(f.alpha is not None and bool(((f.alpha > 0) & (f.alpha < 255)).any()) for f in animation.frames):
        changes.append("partial transparency written as GIF: each pixel clear or opaque")
    return changes


def read_animation(data: bytes, header: ImageHeader, name: str, max_pixels: int) -> Animation:
    """Every frame of an animated image; InputError when they are more pixels than ``max_pixels``
    together (the cap of a still image, over the whole animation; each frame's canvas checked
    before it is decoded, as a GIF frame may grow it) or cannot be decoded. A frame's duration
    is the file's (0 ms stays 0: viewers apply their own minimum, as they did to the input);
    a frame without one gets :data:`DEFAULT_DURATION_MS`."""
    check_frames_size(header, name, max_pixels)
    planes: list[np.ndarray] = []
    durations = []
    try:
        with Image.open(io.BytesIO(data)) as image:
            loop = image.info.get("loop")
            for index in range(header.frames):
                image.seek(index)  # reads the frame's header; the canvas may grow, nothing is decoded yet
                canvas = image.size[0] * image.size[1]
                if canvas * header.frames > max_pixels:
                    raise ImageTooLargeError(
                        f"{name}: frame {index} makes a canvas of {image.size[0]}x{image.size[1]}; "
                        f"{header.frames} frames of it are over the limit of {max_pixels} pixels")
                planes.append(np.asarray(image.convert("RGBA"))[..., [2, 1, 0, 3]])  # BGRA, as composed
                duration = image.info.get("duration")  # WebP: set on load
                durations.append(DEFAULT_DURATION_MS if duration is None else max(0, int(duration)))
    except Image.DecompressionBombError as exc:
        raise ImageTooLargeError(f"{name}: frame {len(planes)} of {header.frames} is too large to decode: "
                                 f"{exc}") from exc
    except (OSError, ValueError, EOFError, SyntaxError) as exc:
        raise InputError(f"{name}: cannot read frame {len(planes)} of {header.frames}: {exc}") from exc
    keep_alpha = any(int(plane[..., 3].min()) < 255 for plane in planes)  # one layout for every frame
    frames = []
    for plane in planes:
        frame, alpha = to_bgr_uint8(np.ascontiguousarray(plane if keep_alpha else plane[..., :3]))
        frames.append(LoadedImage(frame, alpha, "uint8", 4 if keep_alpha else 3))
    return Animation(tuple(frames), tuple(durations), None if loop is None else int(loop), header.format)


def encode_animation(frames: Sequence[Frame], animation: Animation, suffix: str,
                     metadata: Mapping[str, str] | None = None) -> bytes:
    """The frames as an animated image of ``suffix``'s format, with the source's durations, loop
    count and alpha; ``metadata`` as PNG text chunks or the GIF comment (WebP has no text)."""
    fmt = ANIMATED_SUFFIXES[suffix.lower()]
    images = [_pil_image(frame, source.alpha) for frame, source in zip(frames, animation.frames, strict=True)]
    options: dict[str, object] = {"save_all": True, "append_images": images[1:],
                                  "duration": list(animation.durations_ms)}
    if animation.loop is not None:
        options["loop"] = animation.loop
    text = "; ".join(f"{k}={v}" for k, v in (metadata or {}).items())
    if fmt == "PNG" and metadata:
        info = PngImagePlugin.PngInfo()
        for key, value in metadata.items():
            info.add_text(key, value)
        options["pnginfo"] = info
    elif fmt == "GIF":
        options.update(disposal=2, optimize=False, **({"comment": text.encode("utf-8")} if text else {}))
    elif fmt == "WEBP":
        options.update(quality=90)
    buffer = io.BytesIO()
    images[0].save(buffer, fmt, **options)
    return buffer.getvalue()


def _pil_image(frame: Frame, alpha: np.ndarray | None) -> Image.Image:
    rgb = np.ascontiguousarray(frame[..., ::-1])
    if alpha is None:
        return Image.fromarray(rgb, "RGB")
    return Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
