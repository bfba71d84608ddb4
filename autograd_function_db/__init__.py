"""A registry of sample torch.autograd.Functions with shape-hazard-free samples.

Depends on torch and numpy only. ``REGISTRY`` holds every entry; each theme
module contributes its entries through an ``entries()`` function listed below.
"""

from __future__ import annotations

from . import (
    containers,
    ctx_features,
    custom_ops,
    elementwise,
    indexing,
    linalg,
    numpy_ops,
    reductions,
    shapes,
    vmap_features,
)
from .entry import (
    GRADIENT_CUSTOM,
    GRADIENT_DERIVATIVE,
    VMAP_GENERATED,
    VMAP_NONE,
    VMAP_RULE,
    Capabilities,
    Entry,
    Sample,
    Tolerances,
    entry,
)
from .hazards import DEFAULT_HAZARD_SIZES, HazardousSampleError, find_hazards
from .registry import Registry, RegistryError, validate_entry

#: Theme modules, in the order their entries are listed.
THEMES = (
    numpy_ops,
    elementwise,
    reductions,
    shapes,
    indexing,
    linalg,
    ctx_features,
    vmap_features,
    containers,
    custom_ops,
)


def _build() -> Registry:
    return Registry(e for theme in THEMES for e in theme.entries())


REGISTRY: Registry = _build()

__all__ = [
    "DEFAULT_HAZARD_SIZES",
    "GRADIENT_CUSTOM",
    "GRADIENT_DERIVATIVE",
    "REGISTRY",
    "THEMES",
    "VMAP_GENERATED",
    "VMAP_NONE",
    "VMAP_RULE",
    "Capabilities",
    "Entry",
    "HazardousSampleError",
    "Registry",
    "RegistryError",
    "Sample",
    "Tolerances",
    "entry",
    "find_hazards",
    "validate_entry",
]
