"""Typed errors. Library code raises these; only the CLI turns them into messages and exit codes."""

from __future__ import annotations

import re


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


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)): ?(.*)$")
_RAY_HEAD = re.compile(r"^(.*?)(?:(?:[A-Za-z_][\w]*\.)*\w+(?:Error|Exception)\b: |ray::)")
_IN_RAY = " (in a Ray worker)"


def one_line(text: str, *, keep_head: bool = True) -> str:
    """``text`` as one line without ANSI codes; a Ray error text with a traceback becomes its cause.

    Ray puts the worker's traceback into an error's text (an ActorDiedError keeps nothing
    else): such a text becomes what precedes the Ray error on its first line (e.g. the item)
    and the last exception line of the traceback, its type without the module. ``keep_head``
    False drops the first part (for Ray's own text, whose first line is Ray's wording).
    """
    text = _ANSI.sub("", text)
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0].strip() if lines else ""
    if not any(line.lstrip().startswith(('File "', "Traceback (most recent call last)")) for line in lines):
        return "; ".join(line.strip() for line in lines)
    for line in reversed(lines):
        found = _EXCEPTION_LINE.match(line.strip())
        if found:
            head = _RAY_HEAD.match(lines[0]) if keep_head else None
            return f"{head.group(1) if head else ''}{found.group(1)}: {found.group(2)}{_IN_RAY}"
    return lines[0].strip()


def describe_error(exc: BaseException) -> str:
    """One line for any error: a FusionRayError's message, else ``Type: message``.

    A Ray error (RayTaskError, ActorDiedError, ...) is described by its cause: the worker's
    exception, never Ray's traceback.
    """
    cause = getattr(exc, "cause", None)
    if type(exc).__module__.startswith("ray.") and isinstance(cause, BaseException) and cause is not exc:
        inner = describe_error(cause)
        if not inner.endswith(_IN_RAY):
            inner = f"{type(cause).__name__}: {inner}" if isinstance(cause, FusionRayError) else inner
            inner += _IN_RAY
        return inner
    text = one_line(str(exc), keep_head=not type(exc).__module__.startswith("ray."))
    if isinstance(exc, FusionRayError) or text.endswith(_IN_RAY):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
