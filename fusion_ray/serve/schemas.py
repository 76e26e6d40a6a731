"""Request options and response bodies of the HTTP API (shown in the generated OpenAPI page)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fusion_ray.serve.limits import ApiError

API_VERSION = "v1"
STAND_IN_HEADER = "X-Fusion-Ray-Stand-In"
FACES_DETECTED_HEADER = "X-Fusion-Ray-Faces-Detected"
FACES_SWAPPED_HEADER = "X-Fusion-Ray-Faces-Swapped"
MEDIA_TYPES = {"png": "image/png", "jpeg": "image/jpeg"}
SUFFIXES = {"png": ".png", "jpeg": ".jpg"}


class SwapOptions(BaseModel):
    """Text fields of ``POST /v1/swap`` (besides the ``target`` and ``source`` files)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source_id: str | None = Field(default=None, min_length=1, max_length=64,
                                  description="An id from POST /v1/sources (or send `source` image(s) instead).")
    select: Literal["all", "largest", "index"] | None = Field(
        default=None, description="Which target faces to swap (default: the service's configured mode).")
    face_index: int | None = Field(default=None, ge=0, le=1024,
                                   description="Face index in reading order, for select=index.")
    enhance: bool = Field(default=False, description="Enhance the swapped faces (GFPGAN).")
    blend: float | None = Field(default=None, ge=0.0, le=1.0,
                                description="Share of the enhanced face (default: the service's setting).")
    format: Literal["png", "jpeg"] = Field(default="png", description="Output image format.")
    jpeg_quality: int = Field(default=95, ge=1, le=100)
    strict: bool = Field(default=False,
                         description="422 instead of the unchanged image when no target face is swapped.")

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> SwapOptions:
        data: dict[str, Any] = {k: v for k, v in fields.items() if v != ""}
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
    deployments: dict[str, str] = Field(description="State of each deployment: ready, or why not.")
    models: dict[str, str] = Field(default_factory=dict, description="Model name -> loaded file.")
    stand_in_models: list[str] = Field(default_factory=list)


def _file_field(description: str) -> dict[str, Any]:
    return {"type": "string", "format": "binary", "description": description}


def swap_request_schema() -> dict[str, Any]:
    """OpenAPI requestBody of POST /v1/swap (the body is parsed by the ingress, not by FastAPI)."""
    properties: dict[str, Any] = {
        "target": _file_field("Target image (PNG, JPEG, WebP or BMP)."),
        "source": {"type": "array", "items": _file_field("Source face image."),
                   "description": "Source image(s), when no source_id is given; several average into one identity."},
    }
    for name, spec in SwapOptions.model_json_schema()["properties"].items():
        properties[name] = spec
    return {"required": True, "content": {"multipart/form-data": {"schema": {
        "type": "object", "required": ["target"], "properties": properties}}}}


def sources_request_schema() -> dict[str, Any]:
    return {"required": True, "content": {"multipart/form-data": {"schema": {
        "type": "object", "required": ["image"],
        "properties": {"image": {"type": "array", "items": _file_field("Source face image."),
                                 "description": "One or more images of the same person (the largest face of each)."}},
    }}}}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {400: "Malformed request", 401: "Missing or wrong bearer token", 404: "Unknown source id",
            408: "The request body did not arrive within limits.receive_timeout_s",
            413: "Body or image too large", 415: "Not multipart, or not a supported image",
            422: "Invalid option, undecodable image, or no face", 503: "Overloaded: retry after Retry-After seconds",
            504: "A stage timed out"}
    return {code: {"model": ErrorBody, "description": text.get(code, "Error")} for code in codes}
