"""Typed errors. Library code raises these; only the CLI turns them into messages and exit codes."""

from __future__ import annotations


class FusionRayError(Exception):
    """Base class of every error fusion_ray raises on purpose."""

    exit_code = 1


class InputError(FusionRayError):
    """A user-supplied file or value is missing, unreadable or of the wrong kind."""

    exit_code = 2


class NoFaceError(InputError):
    """An image that must contain a face (a source, a reference) contains none."""

    exit_code = 3


class OutputExistsError(InputError):
    """The output path exists and overwriting was not allowed."""

    exit_code = 2


class ModelError(FusionRayError):
    """A model file is missing, corrupt, or does not have the expected interface."""

    exit_code = 4


class ModelMissingError(ModelError):
    """A model file is not in the models directory."""


class ModelIntegrityError(ModelError):
    """A model file does not match its recorded hash."""


class DownloadError(ModelError):
    """A model could not be downloaded."""


class ConfigError(FusionRayError):
    """A configuration file or value is invalid."""

    exit_code = 2


class VideoError(InputError):
    """A video could not be probed, decoded or encoded."""


def is_fatal(exc: BaseException) -> bool:
    """Whether ``exc`` means the worker is broken, not the input (raise it; Ray restarts the actor).

    Fatal: out of memory, a model that cannot be used, and any error raised by ONNX Runtime
    itself (provider, device or session failures). Everything else raised while processing one
    frame is that frame's problem: the frame is marked and the batch goes on.
    """
    if isinstance(exc, (MemoryError, ModelError, SystemError)):
        return True
    return type(exc).__module__.startswith("onnxruntime")
