"""Request options and response bodies of the HTTP API (shown in the generated OpenAPI page)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fusion_ray.core.facefusion_options import FaceFusionOptions
from fusion_ray.options_table import LIST_OPTIONS, Cap
from fusion_ray.serve.forms import Form, Part
from fusion_ray.serve.images import ImageHeader, check_image
from fusion_ray.serve.limits import ApiError, clip
from fusion_ray.types import StreamSelectMode

API_VERSION = "v1"
STAND_IN_HEADER = "X-Fusion-Ray-Stand-In"
FACES_DETECTED_HEADER = "X-Fusion-Ray-Faces-Detected"
FACES_SWAPPED_HEADER = "X-Fusion-Ray-Faces-Swapped"
FORMAT_CHANGES_HEADER = "X-Fusion-Ray-Format-Changes"
"""What writing the output changed (an EXIF orientation applied, alpha dropped, 16 to 8 bits)."""
MEDIA_TYPES = {"png": "image/png", "jpeg": "image/jpeg"}
SUFFIXES = {"png": ".png", "jpeg": ".jpg"}


class SwapOptions(FaceFusionOptions):
    """Text fields of ``POST /v1/swap`` (besides the ``target`` and ``source`` files), with
    FaceFusion's per-request options (:class:`~fusion_ray.core.facefusion_options.FaceFusionOptions`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source_id: str | None = Field(default=None, min_length=1, max_length=64,
                                  description="An id from POST /v1/sources (or send `source` image(s) instead).")
    select: StreamSelectMode | None = Field(
        default=None, description="Which target faces to swap (default: the service's configured mode).")
    face_index: int | None = Field(default=None, ge=0, le=1024,
                                   description="Face index in reading order, for select=index.")
    enhance: bool = Field(default=False, description="Enhance the swapped faces (as face_enhancer_blend does).")
    blend: float | None = Field(default=None, ge=0.0, le=1.0,
                                description="Share of the enhanced face (default: the service's setting); "
                                "face_enhancer_blend in percent is FaceFusion's name for it.")
    format: Literal["png", "jpeg"] = Field(default="png", description="Output image format.")
    jpeg_quality: int = Field(default=95, ge=1, le=100)
    strict: bool = Field(default=False,
                         description="422 instead of the unchanged image when no target face is swapped.")

    @classmethod
    def from_fields(cls, fields: Mapping[str, str | list[str]]) -> SwapOptions:
        data: dict[str, Any] = {k: v for k, v in fields.items() if v not in ("", [])}
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'form'}: {e['msg']}" for e in exc.errors())
            raise ApiError(422, "invalid_option", problems) from exc


class ErrorBody(BaseModel):
    """Every error answer: a short machine-readable code and a human-readable message."""

    error: str = Field(description="Error code, e.g. body_too_large, no_face_in_source.")
    detail: str


class SourceCreated(BaseModel):
    source_id: str = Field(description="Use it as `source_id` in POST /v1/swap.")
    num_images: int
    stand_in_models: list[str] = Field(description="Stand-in (not real) models that made the identity.")


class SourceInfo(BaseModel):
    source_id: str
    num_images: int


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready", "not_ready"]
    deployments: dict[str, str] = Field(description="State of each deployment: ready, or why not (in generic "
                                        "terms; with the API token also the error type).")
    models: dict[str, str] = Field(default_factory=dict,
                                   description="Model name -> 'loaded'; with the API token, the loaded file.")
    stand_in_models: list[str] = Field(default_factory=list)


# ------------------------------------------------------------------ request forms
def _unknown(form: Form, known: set[str], hint: str = "") -> None:
    unknown = sorted(form.names() - known)
    if unknown:
        shown = [clip(name) for name in unknown[:8]] + (["..."] if len(unknown) > 8 else [])
        raise ApiError(422, "invalid_field", f"unknown field(s) {shown}{hint}")


def image_name(kind: str, part: Part, i: int) -> str:
    """How an uploaded image is named in error messages (its file name, clipped, else its position)."""
    return f"{kind} {clip(part.filename) if part.filename else f'#{i + 1}'}"


def check_sources(parts: list[Part], max_pixels: int) -> list[ImageHeader]:
    return [check_image(p.data, image_name("source image", p, i), max_pixels) for i, p in enumerate(parts)]


@dataclass(frozen=True)
class SwapRequest:
    """A checked ``POST /v1/swap`` form: options, the target and source images and their headers."""

    options: SwapOptions
    target: Part
    target_header: ImageHeader
    sources: list[Part]
    source_headers: list[ImageHeader]

    @classmethod
    def from_form(cls, form: Form, max_pixels: int) -> SwapRequest:
        _unknown(form, {"target", "source", *SwapOptions.model_fields})
        fields: dict[str, str | list[str]] = dict(form.text_fields())
        fields.update({name: form.texts(name) for name in LIST_OPTIONS})
        options = SwapOptions.from_fields(fields)
        target = form.file("target")
        if target is None:
            raise ApiError(422, "missing_field", "the 'target' image is required")
        sources = form.files("source")
        if options.source_id and sources:
            raise ApiError(422, "invalid_field", "give either source_id or source image(s), not both")
        if not options.source_id and not sources:
            raise ApiError(422, "missing_field", "a source is required: source_id or source image(s)")
        return cls(options, target, check_image(target.data, "target image", max_pixels), sources,
                   check_sources(sources, max_pixels))


def sources_form(form: Form, max_pixels: int) -> tuple[list[Part], list[ImageHeader]]:
    """The checked images of a ``POST /v1/sources`` form."""
    _unknown(form, {"image"}, "; send the images as 'image'")
    parts = form.files("image")
    return parts, check_sources(parts, max_pixels)


def _file_field(description: str) -> dict[str, Any]:
    # contentMediaType: how OpenAPI 3.1 (and FastAPI's UploadFile) declares a file; format: binary
    # is the 3.0 spelling that older client generators look for.
    return {"type": "string", "format": "binary", "contentMediaType": "application/octet-stream",
            "description": description}


def _form(title: str, required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"multipart/form-data": {"schema": {
        "title": title, "type": "object", "required": required, "properties": properties}}}}


def swap_request_schema() -> dict[str, Any]:
    """OpenAPI requestBody of POST /v1/swap: the ingress parses the body itself (under its byte cap
    and receive deadline), so FastAPI learns the form's fields from this declaration."""
    properties: dict[str, Any] = {
        "target": _file_field("Target image (PNG, JPEG, WebP or BMP)."),
        "source": {"type": "array", "items": _file_field("Source face image."),
                   "description": "Source image(s), when no source_id is given; several average into one identity."},
    }
    for name, spec in SwapOptions.model_json_schema()["properties"].items():
        properties[name] = spec
    return _form("SwapForm", ["target"], properties)


def sources_request_schema() -> dict[str, Any]:
    """OpenAPI requestBody of POST /v1/sources."""
    return _form("SourcesForm", ["image"], {
        "image": {"type": "array", "items": _file_field("Source face image."),
                  "description": "One or more images of the same person (the largest face of each)."}})


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {400: "Malformed request", 401: "Missing or wrong bearer token",
            403: f"Over one of this service's caps (limits.{', '.join(get_args(Cap))})", 404: "Unknown source id",
            408: "The request body did not arrive within limits.receive_timeout_s",
            413: "Body or image too large", 415: "Not multipart, or not a supported image",
            422: "Invalid option, undecodable image, or no face", 503: "Overloaded: retry after Retry-After seconds",
            504: "A stage timed out"}
    return {code: {"model": ErrorBody, "description": text.get(code, "Error")} for code in codes}
