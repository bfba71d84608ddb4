"""Minimal reproducers: a short plain-torch script per case, to paste into a bug report.

The script imports the Function (from the user's module, or the database), draws the
case's sample as the suite does (the same seeds, so the same values), makes the case's one
transform call with the suite's tangents or cotangents, computes the suite's reference
(a loop over slices, finite differences in float64, eager autograd), and compares them
with ``torch.testing.assert_close`` at the suite's tolerances: exit status 1 and the
difference when the failure reproduces, 0 when it does not. About 30 lines; ``afdb repro
--full`` writes the self-checking script of ``harness.repro.script``.

It makes the case's main call (every differentiable input and output together), not each
sub-check (one input alone, non-contiguous inputs, torch.autograd.grad next to
torch.func.vjp): a failure that only a sub-check sees prints "not reproduced" here and
reproduces with ``--full``. A case the short form does not cover (nested vmap levels,
container or complex arguments, samples without a seed, in-place or random Functions, the
contract check, ...) raises ``NotMinimal`` saying why; ``afdb repro`` then writes the full
script.

This module puts a script together; its parts: the facts learned from the case
(``minimal_facts``), the header and the sample's draw (``minimal_source``), the bodies of
the autodiff checks (``minimal_autodiff``) and of the composites (``minimal_composite``);
the vmap body is here.
"""

from __future__ import annotations

import os
from typing import Any

from autograd_function_db.entry import Entry
from harness.core.options import Options
from harness.core.repro_scope import COMPOSITES, MINIMAL_CHECKS, VMAP_FAMILY
from harness.engine.cases import Case
from harness.plans.plan import MID
from harness.repro.literal import literal
from harness.repro.minimal_autodiff import autodiff_body
from harness.repro.minimal_composite import composite_body
from harness.repro.minimal_facts import CaseFacts, DiffNames, NotMinimal
from harness.repro.minimal_source import ScriptSource, slice_lines
from harness.repro.subcheck import SubCheck

#: With ``gradient="custom"`` the suite accepts some results against either of two
#: references; the short form covers the checks with one reference.
CUSTOM_OK = (*VMAP_FAMILY, "vjp", *COMPOSITES)


def generate_minimal(
    entry: Entry,
    options: Options,
    case: Case,
    *,
    target: Any = None,
    command: str = "",
    script_dir: str | None = None,
    sub_check: str = "",
) -> str:
    """The text of a short plain-torch script reproducing ``case`` (or ``NotMinimal``).

    ``sub_check``: the sub-check the case failed (its message's ``failing sub-checks:``),
    made instead of the case's main call.

    ``script_dir``: where the script is written (the files it imports are found relative
    to it); default the working directory.
    """
    check = case.check
    if check == "contract":
        raise NotMinimal("the contract check (it inspects the vmap rule's raw return)")
    if check not in MINIMAL_CHECKS:
        raise NotMinimal(f"the {check} check")
    if entry.gradient == "custom" and check not in CUSTOM_OK:
        raise NotMinimal("gradient=custom (the suite accepts either of two references)")
    if getattr(case.plan, "dtype", None):
        raise NotMinimal("a dtype leg (the Function at one dtype, the reference at float64)")
    facts = CaseFacts(entry, options, case)
    sub = SubCheck(sub_check) if sub_check else None
    if sub is not None:
        if check not in ("vjp", "jvp", "eager_vjp", "eager_jvp"):
            raise NotMinimal(f"the sub-checks of {check}")
        sub.restrict(facts)
    src = ScriptSource(entry, options, case, target, script_dir or os.getcwd())
    full = f"{command or 'afdb repro ' + case.id} --full"
    doc = (
        f"afdb case {case.id}: a minimal repro. Exit status 1: it reproduced; 0: it did not.\n"
        f"The self-checking script: `{full}`."
    )
    call = f"({src.call}(*a),)" if facts.single else f"tuple({src.call}(*a))"
    lines = [
        *src.header(doc),
        f"RTOL, ATOL = {literal(facts.rtol)}, {literal(facts.atol)}  # the suite's tolerances at {facts.dtype}",
        f"call = lambda *a: {call}  # noqa: E731 (the Function's outputs, a tuple)",
    ]
    if check in VMAP_FAMILY:
        body, transform = (
            vmap_body(entry, options, facts, src, facts.level(case)),
            "torch.func.vmap",
        )
    else:
        if not facts.diff or not facts.outs:
            raise NotMinimal("nothing differentiable")
        diff = DiffNames(facts)
        if check in COMPOSITES:
            body, transform = composite_body(entry, options, case, facts, src, diff)
        else:
            body, transform = autodiff_body(entry, options, case, facts, src, diff, sub)
    # NaN "matches" NaN in assert_close(equal_nan=True): non-finite results are reported
    tail0 = [
        "if any(isinstance(a, torch.Tensor) and a.is_floating_point() and not "
        "torch.isfinite(a).all() for a in actual):",
        f'    print("REPRODUCED: {transform} gives non-finite values (NaN or inf)")',
        "    sys.exit(1)",
    ]
    if any(line.startswith("NAMES = ") for line in body):  # compared item by item, named
        tail = [
            "for name, a, e, atol in zip(NAMES, actual, expected, ATOLS):",
            "    try:",
            "        torch.testing.assert_close(a, e, rtol=RTOL, atol=atol, check_dtype=False, "
            "equal_nan=True)",
            "    except AssertionError as err:",
            f'        print(f"REPRODUCED: {transform} differs from the reference at the '
            '{name}\\n{err}")',
            "        sys.exit(1)",
        ]
    else:
        tail = [
            "try:",
            "    torch.testing.assert_close(list(actual), list(expected), rtol=RTOL, atol=ATOL, "
            "check_dtype=False, equal_nan=True)",
            "except AssertionError as e:",
            f'    print(f"REPRODUCED: {transform} differs from the reference\\n{{e}}")',
            "    sys.exit(1)",
        ]
    tail.append(f'print("not reproduced: {transform} matches the reference here")')
    if any("fwAD." in line for line in body):
        lines.insert(lines.index("import torch") + 1, "import torch.autograd.forward_ad as fwAD")
    return "\n".join([*lines, *_raising_reproduces(body, transform), *tail0, *tail]) + "\n"


#: The first statement of a script's body that makes the transform call (the others draw
#: the sample or compute the reference).
_TRANSFORM_CALL = ("actual = ", "grads = ", "jac = ")


def _raising_reproduces(body: list[str], transform: str) -> list[str]:
    """``body`` with its transform call in a try: the transform raising is the case's
    failure reproduced (exit 1, its traceback); any other exception is the script's own
    (the header's hook: exit 2)."""
    at = next((n for n, line in enumerate(body) if line.startswith(_TRANSFORM_CALL)), None)
    if at is None:
        return body
    return [
        *body[:at],
        "try:",
        f"    {body[at]}",
        "except Exception as exc:  # the transform raised: the failure the suite saw, reproduced",
        "    traceback.print_exc()",
        "    sys.exit(2 if isinstance(exc, MemoryError) or 'tried to allocate' in str(exc) else "
        f'"REPRODUCED: {transform} raised")  # out of memory: the script\'s own failure',
        *body[at + 1 :],
    ]


def vmap_body(
    entry: Entry, options: Options, facts: CaseFacts, src: ScriptSource, lv: Any
) -> list[str]:
    dims = facts.out_dims(lv)
    out_dims = dims[0] if lv.out_dims != MID else tuple(dims)
    chunk = f", chunk_size={lv.chunk_size}" if lv.chunk_size else ""
    return [
        *slice_lines(options, entry, src, lv, len(facts.args)),
        f"actual = torch.func.vmap(call, in_dims=in_dims, out_dims={out_dims!r}{chunk})(*batched)",
        "loop = [call(*a) for a in per_slice]  # the reference: one call per slice, stacked",
        f"expected = [torch.stack([p[k] for p in loop], d) for k, d in enumerate({dims!r})]",
    ]
