"""Typed settings of the Serve application: the ``args`` of ``configs/serve.yaml``.

``configs/serve.yaml`` is a Ray Serve config file (``serve run`` / ``serve deploy`` / a
RayService's ``serveConfigV2``); its application's ``args`` mapping is validated into
:class:`ServeSettings` by ``fusion_ray.serve.app.build_app``. Nothing here imports Ray.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fusion_ray.config import EngineConfig, parse_config
from fusion_ray.errors import ConfigError
from fusion_ray.live.config import LiveConfig
from fusion_ray.options_table import MODEL_MASKS, OPTIONS, Cap, ModelMask
from fusion_ray.types import STREAM_SELECT_MODES

APP_IMPORT_PATH = "fusion_ray.serve.app:build_app"
DEFAULT_TOKEN_ENV = "FUSION_RAY_API_TOKEN"


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BatchSettings(_Settings):
    """``@serve.batch`` settings of one batched method."""

    max_batch_size: int = Field(default=8, ge=1, le=256,
                                description="Most requests per batch; 1 turns batching off.")
    batch_wait_timeout_s: float = Field(default=0.015, ge=0.0, le=5.0,
                                        description="How long a partial batch waits for more requests.")


class BatchingSettings(_Settings):
    """Batching of the GPU deployments, across concurrent requests."""

    swap: BatchSettings = BatchSettings()
    embed: BatchSettings = BatchSettings()
    enhance: BatchSettings = BatchSettings(max_batch_size=4)
    frames: BatchSettings = Field(
        default=BatchSettings(max_batch_size=8, batch_wait_timeout_s=0.005),
        description="The fused placement: whole frames (of HTTP requests and live streams) per chain call.")
    adaptive_wait: bool = Field(
        default=True,
        description="Skip the wait window while requests arrive further apart than it (low load: no added "
        "latency); under load the configured window applies.")


class DeploymentSettings(_Settings):
    """Ray Serve options of one deployment (fractional CPUs: whole-CPU actors deadlock small hosts)."""

    num_replicas: int = Field(default=1, ge=1)
    num_cpus: float = Field(default=0.25, gt=0.0, description="Ray CPUs per replica (fractional is fine).")
    num_gpus: float = Field(default=0.0, ge=0.0, description="Ray GPUs per replica (0 on CPU-only hosts).")
    cpu_budget: float | None = Field(
        default=None, gt=0.0,
        description="CPU budget ONNX Runtime threads are sized to; None uses num_cpus.")
    max_ongoing_requests: int | None = Field(
        default=None, ge=1,
        description="Requests in flight per replica; None chooses a default (batched: 2x the batch size).")
    max_queued_requests: int = Field(
        default=64, ge=-1, description="Requests queued per caller before Serve answers 503 (-1: no limit).")

    def threads_budget(self) -> float:
        return self.cpu_budget if self.cpu_budget is not None else self.num_cpus


class DeploymentsSettings(_Settings):
    """Per-deployment options."""

    ingress: DeploymentSettings = DeploymentSettings(num_cpus=0.5, max_ongoing_requests=64, max_queued_requests=64)
    detector: DeploymentSettings = DeploymentSettings(num_cpus=0.5, max_ongoing_requests=4)
    swapper: DeploymentSettings = DeploymentSettings(num_cpus=0.25)
    enhancer: DeploymentSettings = DeploymentSettings(num_cpus=0.25)
    fused: DeploymentSettings = DeploymentSettings(num_cpus=0.5, cpu_budget=1.0)
    state: DeploymentSettings = DeploymentSettings(num_cpus=0.05, max_ongoing_requests=256,
                                                   max_queued_requests=-1)
    enhancer_enabled: bool = Field(
        default=True, description="Deploy the enhancer (requests with enhance=true get 422 without it).")

    @model_validator(mode="before")
    @classmethod
    def _over_coded_defaults(cls, data: Any) -> Any:
        """A partial mapping for a deployment overrides that deployment's defaults above, field by field.

        Without this, ``state: {num_cpus: 0.1}`` would reset the state's other fields to the generic
        DeploymentSettings defaults (e.g. max_queued_requests 64 instead of -1).
        """
        if not isinstance(data, dict):
            return data
        merged = dict(data)
        for name, info in cls.model_fields.items():
            value = merged.get(name)
            if isinstance(value, dict) and isinstance(info.default, DeploymentSettings):
                merged[name] = {**info.default.model_dump(exclude_unset=True), **value}
        return merged

    @model_validator(mode="after")
    def _state_single_replica(self) -> DeploymentsSettings:
        if self.state.num_replicas != 1:
            raise ValueError("deployments.state holds the source store and must have exactly one replica")
        return self


def _capped(cap: Cap) -> str:
    """The options ``cap`` bounds (the table's rows that name it)."""
    return ", ".join(option.name for option in OPTIONS if option.cap == cap)


class LimitsSettings(_Settings):
    """Request limits and overload behaviour of the ingress."""

    max_body_bytes: int = Field(default=20_000_000, ge=1024, description="Largest request body (413 above).")
    max_pixels: int = Field(default=24_000_000, ge=1,
                            description="Largest image (width x height), checked from the header before decoding.")
    max_source_images: int = Field(default=8, ge=1, description="Most source images per request.")
    max_inflight: int = Field(
        default=16, ge=1,
        description="Requests the ingress works on at once, per replica; more get 503 with Retry-After. "
        "Memory per ingress replica stays below about max_inflight x (2 x max_body_bytes + 6 x 3 x max_pixels) "
        "bytes (the body and its parts, and the decoded frames a request holds at once).")
    max_uploads: int = Field(
        default=32, ge=1,
        description="Request bodies being received at once, per ingress replica; more get 503 with Retry-After. "
        "A request takes an in-flight slot only once its body is complete, so slow uploads cannot lock "
        "compute out.")
    max_uploads_per_client: int = Field(
        default=8, ge=1, description="Request bodies being received at once from one client address (503 above).")
    retry_after_s: int = Field(default=1, ge=0, description="Retry-After (seconds) sent with 503 answers.")
    stage_timeout_s: float = Field(default=60.0, gt=0.0, description="Longest wait for one downstream stage (504).")
    receive_timeout_s: float = Field(
        default=30.0, gt=0.0,
        description="Longest time to receive a whole request body (408 after it): a slow or stalled upload "
        "would otherwise hold an upload slot. Bodies of max_body_bytes need at least "
        "max_body_bytes / receive_timeout_s bytes per second.")
    max_pixel_boost: int = Field(
        default=256, ge=128, le=1024,
        description=f"Largest {_capped('max_pixel_boost')} a request may ask, in pixels (403 over_cap above): a boost of "
        "k x the model's size costs k x k swaps per face. 256 suits CPU hosts; 512 to 1024 on GPUs.")
    enhancer_allowed: bool = Field(
        default=True, description=f"Requests may ask for the enhancer (enhance, {_capped('enhancer_allowed')}); "
        "false: 403 over_cap. The enhancer costs more than the swap.")
    mask_models_allowed: list[ModelMask] = Field(
        default_factory=list,
        description=f"Mask types that run a model per face which requests may ask for in "
        f"{_capped('mask_models_allowed')} (403 over_cap otherwise). The service loads their models (engine.masks.occluder_model, parser_model) at start.")

    @model_validator(mode="after")
    def _per_client(self) -> LimitsSettings:
        if self.max_uploads_per_client > self.max_uploads:
            raise ValueError(f"max_uploads_per_client ({self.max_uploads_per_client}) is above max_uploads "
                             f"({self.max_uploads})")
        return self


class AuthSettings(_Settings):
    """Optional bearer-token authentication of the /v1 endpoints."""

    token_env: str | None = Field(
        default=DEFAULT_TOKEN_ENV,
        description="Environment variable (read in the ingress replica) holding the token.")
    token: str | None = Field(
        default=None, description="The token itself (prefer token_env; a token here is stored in the Serve config).")
    metrics_public: bool | None = Field(
        default=None,
        description="Serve /metrics without the token. null: only on a loopback listen address (127.0.0.1, ::1, "
        "localhost); with any other bind, /metrics needs the token like /v1.")

    def resolve_token(self, environ: dict[str, str] | None = None) -> str | None:
        """The configured token, else the environment variable's value, else None (auth off)."""
        if self.token:
            return self.token
        env = os.environ if environ is None else environ
        value = env.get(self.token_env) if self.token_env else None
        return value or None


class SourcesSettings(_Settings):
    """The store of registered source identities (bounded: least recently used are dropped)."""

    max_count: int = Field(default=4096, ge=1, description="Identities kept (about 4 KB each).")


class ShutdownSettings(_Settings):
    """How the service stops (SIGTERM or Ctrl-C of ``fusion-ray serve``, or Serve deleting the app)."""

    drain_timeout_s: float = Field(
        default=10.0, ge=0.0, le=60.0,
        description="Longest wait for in-flight requests and live streams to finish once stopping; live "
        "streams are ended at once (error event shutting_down, close 1001). fusion-ray serve then stops "
        "Ray: every Ray process is gone within about 5 s more, and the command exits within drain_timeout_s + 10 s "
        "whatever hangs.")
    wait_loop_s: float = Field(default=0.2, gt=0.0, le=5.0,
                               description="How often a stopping replica checks that its requests are done.")


Placement = Literal["auto", "fused", "split"]


class ServeSettings(_Settings):
    """The ``args`` of the fusion_ray Serve application."""

    placement: Placement = Field(
        default="auto",
        description="Where the chain runs. fused: one deployment runs the whole chain in-process (deployments.fused, "
        "batching.frames); split: per-model pools (detector, swapper, enhancer); auto: fused where no node has "
        "more than one GPU, else split. HTTP requests and live streams use the same placement.")
    engine: EngineConfig = EngineConfig()
    batching: BatchingSettings = BatchingSettings()
    deployments: DeploymentsSettings = DeploymentsSettings()
    limits: LimitsSettings = LimitsSettings()
    auth: AuthSettings = AuthSettings()
    sources: SourcesSettings = SourcesSettings()
    shutdown: ShutdownSettings = ShutdownSettings()
    live: LiveConfig = Field(default_factory=LiveConfig,
                             description="Live streams (GET /v1/stream): limits, deadline, degradation ladder.")

    @model_validator(mode="after")
    def _check(self) -> ServeSettings:
        if self.engine.selection.mode not in STREAM_SELECT_MODES:
            raise ValueError(f"the service does not support selection mode {self.engine.selection.mode!r}; "
                             f"use {', '.join(STREAM_SELECT_MODES)}")
        ingress = self.deployments.ingress
        admitted = self.limits.max_inflight + self.limits.max_uploads
        if ingress.max_ongoing_requests is not None and ingress.max_ongoing_requests <= admitted:
            raise ValueError(
                f"deployments.ingress.max_ongoing_requests ({ingress.max_ongoing_requests}) must exceed "
                f"limits.max_inflight + limits.max_uploads ({admitted}) so that excess requests reach the "
                "ingress and get a 503 with Retry-After instead of waiting in Serve's queue")
        for name, batch in (("swapper", self.batching.swap), ("enhancer", self.batching.enhance),
                            ("fused", self.batching.frames)):
            dep: DeploymentSettings = getattr(self.deployments, name)
            if dep.max_ongoing_requests is not None and dep.max_ongoing_requests < batch.max_batch_size:
                raise ValueError(
                    f"deployments.{name}.max_ongoing_requests ({dep.max_ongoing_requests}) is below its batch "
                    f"size ({batch.max_batch_size}): batches could never fill")
        swap_ongoing = self.deployments.swapper.max_ongoing_requests
        if swap_ongoing is not None and swap_ongoing < self.batching.embed.max_batch_size:
            raise ValueError("deployments.swapper.max_ongoing_requests is below batching.embed.max_batch_size")
        return self

    @model_validator(mode="after")
    def _defaults_within_caps(self) -> ServeSettings:
        """The service's own defaults (a request that gives no option) are within its caps."""
        boost, cap = self.engine.swap.pixel_boost, self.limits.max_pixel_boost
        if boost is not None and boost > cap:
            raise ValueError(f"engine.swap.pixel_boost ({boost}) is over limits.max_pixel_boost ({cap})")
        unallowed = sorted(set(MODEL_MASKS) & set(self.engine.masks.types) - set(self.limits.mask_models_allowed))
        if unallowed:
            raise ValueError(f"engine.masks.types has {', '.join(unallowed)}, which limits.mask_models_allowed "
                             f"({self.limits.mask_models_allowed}) does not allow")
        return self

    # ------------------------------------------------------------ derived
    def swapper_max_ongoing(self) -> int:
        dep = self.deployments.swapper.max_ongoing_requests
        return dep if dep is not None else 2 * max(self.batching.swap.max_batch_size,
                                                   self.batching.embed.max_batch_size)

    def fused_max_ongoing(self) -> int:
        dep = self.deployments.fused.max_ongoing_requests
        return dep if dep is not None else 2 * max(self.batching.frames.max_batch_size,
                                                   self.batching.embed.max_batch_size)

    def enhancer_max_ongoing(self) -> int:
        dep = self.deployments.enhancer.max_ongoing_requests
        return dep if dep is not None else 2 * self.batching.enhance.max_batch_size

    def ingress_max_ongoing(self) -> int:
        dep = self.deployments.ingress.max_ongoing_requests
        return dep if dep is not None else self.limits.max_inflight + self.limits.max_uploads + 16

    def with_batch_size(self, size: int) -> ServeSettings:
        """These settings with every batched method at ``size`` (1 = batching off)."""
        data = self.model_dump()
        for name in ("swap", "embed", "enhance", "frames"):
            data["batching"][name]["max_batch_size"] = size
        return parse_settings(data)


def resolve_placement(placement: Placement, node_gpus: list[float]) -> Placement:
    """``auto``: fused where no node has more than one GPU (``node_gpus``: each node's GPUs), else split."""
    if placement != "auto":
        return placement
    return "split" if max(node_gpus, default=0.0) > 1.0 else "fused"


def parse_settings(args: dict[str, Any] | ServeSettings | None, source: str = "serve args") -> ServeSettings:
    """Validate the application's ``args`` (ConfigError with field paths when invalid)."""
    if isinstance(args, ServeSettings):
        return args
    return parse_config(dict(args or {}), ServeSettings, source=source)


def read_serve_config(path: Path) -> dict[str, Any]:
    """Read a Serve config file (``applications: [...]``) and return it as a mapping."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("applications"), list) or not data["applications"]:
        raise ConfigError(f"{path}: expected a Serve config file with a non-empty 'applications' list")
    return data


def find_application(config: dict[str, Any], source: str = "serve config") -> dict[str, Any]:
    """The application entry whose import_path is fusion_ray's builder."""
    for app in config.get("applications", []):
        if isinstance(app, dict) and app.get("import_path") == APP_IMPORT_PATH:
            return app
    raise ConfigError(f"{source}: no application with import_path {APP_IMPORT_PATH!r}")
