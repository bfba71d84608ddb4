"""A registry of sample torch.autograd.Functions with shape-hazard-free samples.

Depends on torch and numpy only. ``REGISTRY`` holds every entry; each theme
module contributes its entries through an ``entries()`` function listed below.

The theme modules, ``THEMES`` and ``REGISTRY`` load on first use (PEP 562): a program that
only needs ``Entry`` and ``Sample`` (``afdb check`` of a user's Function) neither imports
the themes nor draws and validates every entry's samples (a fifth of a second). The
registry is still built, and every entry validated, the first time anything reads it.
"""

from __future__ import annotations

import importlib
from typing import Any

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

#: Theme modules, in the order their entries are listed (``THEMES`` holds the modules).
THEME_NAMES = (
    "numpy_ops",
    "elementwise",
    "reductions",
    "shapes",
    "indexing",
    "linalg",
    "ctx_features",
    "vmap_features",
    "containers",
    "custom_ops",
)


def _themes() -> tuple[Any, ...]:
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in THEME_NAMES)


def _build() -> Registry:
    return Registry(e for theme in _themes() for e in theme.entries())


def __getattr__(name: str) -> Any:
    """``REGISTRY``, ``THEMES`` and the theme modules, built or imported on first use."""
    if name == "REGISTRY":
        value: Any = _build()
    elif name == "THEMES":
        value = _themes()
    elif name in THEME_NAMES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_HAZARD_SIZES",
    "GRADIENT_CUSTOM",
    "GRADIENT_DERIVATIVE",
    "REGISTRY",
    "THEMES",
    "THEME_NAMES",
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
