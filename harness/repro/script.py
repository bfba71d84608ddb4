"""Standalone reproducers: one Python script per case that imports only torch and the Function.

The script inlines the data-building logic of the harness (the same derived
seeds, the same per-slice draws, the same stacking at each level's in_dims), so
it rebuilds exactly the batched inputs of the case, runs the transform and the
reference, prints the mismatch and exits 1 when the failure reproduces (0 when
it does not). It never imports ``harness``: it can be attached to a bug report.

vmap, vmap_nested, vmap_chunked and contract are reproduced exactly. The
autodiff checks rebuild the exact sample and compare the transform with
central finite differences in float64 (or, for the vmap compositions, with a
loop of per-slice transforms); the tangents and cotangents are the script's own.
"""

from __future__ import annotations

import os
import re
from typing import Any

import torch

from autograd_function_db.entry import Entry
from harness.core.options import Options
from harness.engine.cases import Case
from harness.repro.literal import literal
from harness.repro.script_autodiff import AUTODIFF
from harness.repro.script_data import DATA, FOOTER
from harness.repro.script_eager import EAGER
from harness.repro.script_opcheck import OPCHECK
from harness.repro.script_vmap import VMAP

#: A module path (``pkg.mod``) or an attribute path (``Class.attr``).
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def spec_problem(spec: Any, what: str) -> str:
    """Why ``spec`` is not a ``pkg.module:Name`` or ``path/to/file.py:Name`` spec ('' if it is)."""
    if not isinstance(spec, str) or ":" not in spec:
        return f"{what} {spec!r} must look like package.module:Name or path/to/file.py:Name"
    module, _, attr = spec.rpartition(":")
    if not _DOTTED.fullmatch(attr):
        return f"{what} {spec!r}: {attr!r} is not an attribute name (Name or Class.attr)"
    if module.endswith(".py") or "/" in module or os.sep in module:
        if not module.endswith(".py"):
            return f"{what} {spec!r}: a file target must end in .py"
        if any(not ch.isprintable() for ch in module):
            return f"{what} {spec!r}: the file path holds control characters"
        return ""
    if not _DOTTED.fullmatch(module):
        return f"{what} {spec!r}: {module!r} is not a module path (package.module)"
    return ""


VMAP_CHECKS = ("vmap", "vmap_nested", "vmap_chunked", "vmap_hazard", "contract")


def _user_loader(spec: Any, entry: Entry) -> str:
    samples_expr = "load(SAMPLES_SPEC)" if spec.samples else "_samples_attr()"
    seeded = bool(getattr(entry.samples, "user_seeded", True))
    diversity = getattr(entry.samples, "diversity", None)
    keep = {k: tuple(sorted(v)) for k, v in diversity.keep.items()} if diversity else {}
    target = _portable(spec.resolved(spec.target))
    samples = _portable(spec.resolved(spec.samples)) if spec.samples else None
    return f'''
TARGET_SPEC = {literal(target)}
SAMPLES_SPEC = {literal(samples)}
#: Whether the samples callable takes a seed (called once per slice) or not
#: (called once, floating data perturbed per slice), as the harness decided.
SEEDED = {literal(seeded)}
#: Per sample, the integer/bool arguments kept identical in every slice (the Function's
#: forward refused them shuffled).
KEEP = {literal(keep)}


def load(spec):
    module, _, attr = spec.rpartition(":")
    if module.endswith(".py") or "/" in module or os.sep in module:
        path = os.path.abspath(module)
        sys.path.insert(0, os.path.dirname(path))
        name = os.path.splitext(os.path.basename(path))[0]
        if name in sys.modules and os.path.abspath(getattr(sys.modules[name], "__file__", "")) == path:
            mod = sys.modules[name]
        else:
            spec_ = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec_)
            sys.modules[name] = mod
            spec_.loader.exec_module(mod)
    else:
        sys.path.insert(0, os.getcwd())
        mod = importlib.import_module(module)
    obj = mod
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


TARGET = load(TARGET_SPEC)
if isinstance(TARGET, type) and issubclass(TARGET, torch.autograd.Function):
    FUNCTION, CALL = TARGET, TARGET.apply
elif isinstance(
    TARGET,
    (torch._library.custom_ops.CustomOpDef, torch._ops.OpOverload, torch._ops.OpOverloadPacket),
):
    FUNCTION, CALL = TARGET, TARGET  # a torch.library custom op
else:
    FUNCTION = next(
        getattr(TARGET, a)
        for a in ("autograd_function", "function", "__self__")
        if isinstance(getattr(TARGET, a, None), type)
    )
    CALL = TARGET


def _samples_attr():
    return getattr(TARGET, "samples", None) or FUNCTION.samples


SAMPLES = {samples_expr}


def perturbed(args, seed, keep=()):
    """Seeded noise on floating tensors, a shuffle of integer/bool tensors (except the
    arguments in keep), as the harness varies slices of samples without a seed."""
    gen = torch.Generator().manual_seed(seed)
    shuffle_gen = torch.Generator().manual_seed((seed * 31 + 7) % 2**63)

    def one(i, a):
        if not isinstance(a, torch.Tensor):
            return a
        if a.is_floating_point() or a.is_complex():
            noise = torch.randn(a.shape, generator=gen, dtype=torch.float64)
            scale = float(a.detach().abs().mean()) if a.numel() else 1.0
            return (a.detach().double() + 0.1 * (scale or 1.0) * noise).to(a.dtype)
        if i in keep or a.numel() < 2:
            return a
        flat = a.detach().flatten()
        return flat[torch.randperm(flat.numel(), generator=shuffle_gen)].reshape(a.shape)

    return tuple(map_leaves(a, lambda _k, v, i=i: one(i, v)) for i, a in enumerate(args))


def cast(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            same_kind = DTYPE is not None and (
                (a.is_floating_point() and DTYPE.is_floating_point)
                or (a.is_complex() and DTYPE.is_complex)
            )
            if same_kind and a.dtype != DTYPE:
                a = a.to(DTYPE)
            if str(a.device) != str(DEVICE):
                a = a.to(DEVICE)
        out.append(a)
    return tuple(out)


def as_args(s):
    if hasattr(s, "args"):
        return tuple(s.args)
    return tuple(s) if isinstance(s, (tuple, list)) else (s,)


def samples_for(seed):
    """The user's samples for one slice seed, as the harness builds them."""
    if SEEDED:
        return [cast(as_args(s)) for s in SAMPLES(seed)]
    base = [as_args(s) for s in SAMPLES()]
    return [
        cast(perturbed(a, derive_seed("perturb", seed), KEEP.get(k, ())) if seed else a)
        for k, a in enumerate(base)
    ]
'''


def _portable(spec: str | None) -> str | None:
    """A file target as an absolute path (the script may run from elsewhere)."""
    if not spec:
        return spec
    module, _, attr = spec.rpartition(":")
    if module.endswith(".py") or "/" in module or os.sep in module:
        return f"{os.path.abspath(module)}:{attr}"
    return spec


def _recorded_loader(target: Any) -> str:
    """A recorded Function: its entry rebuilt from the recording, through the suite."""
    return f"""
RECORDING = {literal(str(target.directory))}
DECLARATIONS = {literal(tuple(target.declarations))}

sys.path.insert(0, os.getcwd())  # the recorded Function's module, as `afdb check` found it
from harness.sources.declare import parse_declarations
from harness.sources.recorded import recorded_entries
from harness.recording import load_recording

ENTRY = {{
    r.target: r.entry
    for r in recorded_entries(
        load_recording(RECORDING), declarations=parse_declarations(DECLARATIONS)
    )
}}[ENTRY_NAME]
getattr(ENTRY.samples, "slice_seeds", lambda parts: None)((SEED, ENTRY_NAME))
FUNCTION = ENTRY.function
CALL = ENTRY.call


def samples_for(seed):
    return [tuple(s.args) for s in ENTRY.make_samples(seed, DTYPE, DEVICE)]
"""


_DB_LOADER = """
from autograd_function_db import REGISTRY

ENTRY = REGISTRY.get(ENTRY_NAME)
FUNCTION = ENTRY.function
CALL = ENTRY.call


def samples_for(seed):
    return [tuple(s.args) for s in ENTRY.make_samples(seed, DTYPE, DEVICE)]
"""


def generate(
    entry: Entry,
    options: Options,
    case: Case,
    *,
    target: Any = None,
    command: str = "",
) -> str:
    """The text of a standalone script that reproduces ``case``."""

    leg = getattr(case.plan, "dtype", None) if case.plan is not None else None
    rtol, atol = entry.tolerances.for_dtype(
        getattr(torch, leg) if leg else (options.dtype or torch.float64)
    )
    # The plan's own in_dims (tuples stay tuples, dicts dicts: vmap matches pytree types).
    levels = [
        {
            "batch_size": lv.batch_size,
            "in_dims": list(lv.in_dims),
            "out_dims": lv.out_dims,
            "chunk_size": lv.chunk_size,
        }
        for lv in (case.plan.levels if case.plan is not None else ())
    ]
    recorded = getattr(target, "recorded", False)
    if recorded:
        module = "the suite (it reads the recording) and " + entry.name.rpartition(":")[0]
    else:
        module = target.target.rpartition(":")[0] if target is not None else "autograd_function_db"
    # Every string that came from a report, a case id or a command line enters the script
    # only through repr(): a docstring is one repr'd literal, not text between quotes.
    doc = (
        f"Reproduce afdb case {case.id}\n\n"
        f"Generated by `{command or 'afdb repro'}`.\n"
        f"Needs only torch and {module}; run it with `python THIS_FILE`.\n"
        "Exit status 1: the failure reproduced (printed below); 0: it did not.\n"
    )
    if options.dtype is None:  # the samples keep their own dtypes
        dtype_expr = "None"
    else:
        dtype_name = str(options.dtype).replace("torch.", "")
        if not isinstance(getattr(torch, dtype_name, None), torch.dtype):
            raise ValueError(f"not a torch dtype: {options.dtype!r}")
        dtype_expr = f"getattr(torch, {literal(dtype_name)})"
    header = f"""#!/usr/bin/env python
{literal(doc)}

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback

import torch
import torch.utils._pytree

CASE_ID = {literal(str(case.id))}
CHECK = {literal(str(case.check))}
ENTRY_NAME = {literal(str(entry.name))}
SAMPLE_INDEX = {literal(case.sample_index)}
SEED = {literal(options.seed)}
DTYPE = {dtype_expr}
DEVICE = {literal(str(options.device))}
RTOL, ATOL = {literal(float(rtol))}, {literal(float(atol))}
INPLACE_ARGS = {literal(tuple(int(i) for i in entry.caps.inplace_args))}
#: Arguments never differentiated (nondiff_args): held fixed like integer arguments.
NONDIFF_ARGS = {literal(tuple(int(i) for i in entry.caps.nondiff_args))}
#: "derivative": references are finite differences; "custom": eager autograd of the
#: same Function (its backward, its double backward), as the suite compares.
GRADIENT = {literal(str(entry.gradient))}
#: One dict per vmap level, outermost first: batch size, in_dims per argument,
#: out_dims ("mid": an interior position per output) and chunk_size.
LEVELS = {literal(levels)}
#: A dtype leg ("float32"): the float64 sample cast to it, against the float64 reference.
LEG_DTYPE = {literal(leg)}
"""
    if recorded:
        loader = _recorded_loader(target)
    else:
        loader = _user_loader(target, entry) if target is not None else _DB_LOADER
    if case.check in VMAP_CHECKS:
        body = VMAP
    elif case.check.startswith("opcheck_"):
        body = OPCHECK
    else:
        body = AUTODIFF + EAGER
    return header + loader + DATA + body + FOOTER
