"""The capabilities: the one list of the model kinds declared in a file of their own
(:class:`fusion_ray.capability.Capability`), and what the registry, the model loader, the stand-ins
and the chain read from it.

Adding a capability is writing its file and naming it in :data:`CAPABILITIES`. The functions
below read the tuple when they are called (a test may put a throwaway capability in it and take it
out again).
"""

from __future__ import annotations

from fusion_ray.capability import Capability, Component, Step
from fusion_ray.models import face_classifier
from fusion_ray.models.spec import ModelSpec

CAPABILITIES: tuple[Capability, ...] = (face_classifier.CAPABILITY,)
"""Every capability, in the order their steps are placed within a phase."""


def capability_specs() -> tuple[ModelSpec, ...]:
    """The registry rows of every capability."""
    return tuple(spec for capability in CAPABILITIES for spec in capability.specs)


def capability_kinds() -> tuple[Component, ...]:
    """The model kinds the capabilities declare."""
    return tuple(capability.kind for capability in CAPABILITIES)


def capability_of_kind(kind: str) -> Capability | None:
    """The capability that declares model kind ``kind`` (None: a built-in kind)."""
    return next((capability for capability in CAPABILITIES if capability.kind == kind), None)


def capability_steps() -> tuple[Step, ...]:
    """The steps of every capability."""
    return tuple(step for capability in CAPABILITIES for step in capability.steps)
