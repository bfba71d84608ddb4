"""opcheck's tests as checks of torch.library custom ops: ``opcheck_schema``,
``opcheck_autograd_registration``, ``opcheck_faketensor``, ``opcheck_aot_dispatch_static``
and ``opcheck_aot_dispatch_dynamic``.

Each runs ``torch.library.opcheck(op, args, test_utils=<its test>)`` on every sample, so a
user of the suite needs no separate opcheck run; the tests are torch's own, not written
again here, and a failure's message is opcheck's (``test_faketensor failed with ... Shapes
torch.Size([3, 5]) and torch.Size([3, 6]) are not equal!``) after the name of the check.
What each test checks (torch's documentation of ``opcheck``): ``test_schema``, that the
kernel mutates and aliases exactly what the schema declares; ``test_autograd_registration``,
that autograd is registered through ``register_autograd`` or an Autograd key rather than
inside a backend kernel; ``test_faketensor``, that the fake (meta) kernel exists and gives
the real kernel's metadata (shapes, strides, dtypes, devices); ``test_aot_dispatch_static``
and ``..._dynamic``, that outputs and gradients agree between eager mode and AOTDispatcher
(torch.compile's tracer) with static and with dynamic shapes (supersets of
``test_faketensor``).

Floating tensor arguments the schema does not mutate require grad when the op has autograd
(a CustomOpDef's register_autograd) or is an op defined with ``torch.library.Library``
(opcheck's advice: the autograd tests only look at an op that is differentiated). An
autograd.Function gets no opcheck case at all (``CheckSpec.by_default``), named with
``--checks`` or not.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from autograd_function_db.entry import Entry
from harness.checks.catalogue import (
    CaseContext,
    CheckFailure,
    CheckSpec,
    no_plan,
    register,
)

#: (check name, opcheck's test name), in opcheck's order.
TESTS = (
    ("opcheck_schema", "test_schema"),
    ("opcheck_autograd_registration", "test_autograd_registration"),
    ("opcheck_faketensor", "test_faketensor"),
    ("opcheck_aot_dispatch_static", "test_aot_dispatch_static"),
    ("opcheck_aot_dispatch_dynamic", "test_aot_dispatch_dynamic"),
)

NOT_A_CUSTOM_OP = (
    "not a torch.library custom op: opcheck tests operators (a @torch.library.custom_op "
    "function or torch.ops.NS.NAME), not autograd.Functions"
)


def _supported(entry: Entry) -> str | None:
    return None if entry.custom_op is not None else NOT_A_CUSTOM_OP


def _schema(op: Any) -> Any:
    overload = getattr(op, "_opoverload", op)
    return getattr(overload, "_schema", None)


def _mutated(op: Any) -> set[int]:
    """Positions of the arguments the op's schema declares mutable (``Tensor(a!)``)."""
    schema = _schema(op)
    if schema is None:
        return set()
    return {
        i
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    }


def _args(ctx: CaseContext) -> tuple[Any, ...]:
    from torch._library.custom_ops import CustomOpDef

    op = ctx.entry.custom_op
    mutated = _mutated(op)
    # A CustomOpDef says whether it has autograd (register_autograd); an op defined with
    # torch.library.Library gets inputs that require grad, as opcheck advises, so that its
    # autograd tests see how (and whether) it registered autograd.
    grad = ctx.entry.caps.backward or not isinstance(op, CustomOpDef)
    out = []
    for i, a in enumerate(ctx.slices.args()):
        if (
            grad
            and i not in mutated
            and isinstance(a, torch.Tensor)
            and (a.is_floating_point() or a.is_complex())
        ):
            a = a.detach().requires_grad_(True)
        out.append(a)
    return tuple(out)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """opcheck's tests log the tracebacks they catch (torch's fake-tensor logger) and warn
    through anomaly mode; the failure message already says what went wrong."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _runner(check: str, test: str) -> Any:
    def run(ctx: CaseContext) -> str:
        op = ctx.entry.custom_op
        args = _args(ctx)
        rtol, atol = ctx.tolerances
        try:
            with torch.random.fork_rng(devices=[]), _quiet():
                torch.library.opcheck(op, args, test_utils=test, atol=atol, rtol=rtol)
        except Exception as e:
            text = str(e).strip() or type(e).__name__
            text = text.replace(" (scroll up for stack trace)", "")
            text = text.removeprefix("opcheck(op, ...): ")
            raise CheckFailure(f"{check}: torch.library.opcheck {text}") from e
        return f"torch.library.opcheck {test}"

    return run


for _check, _test in TESTS:
    register(
        CheckSpec(
            _check,
            _runner(_check, _test),
            no_plan,
            _supported,
            "opcheck",
            f"torch.library.opcheck {_test}",
            f"custom ops only: torch.library.opcheck(op, sample, test_utils='{_test}') on "
            "every sample",
            # no case at all for an autograd.Function: five `unsupported` lines in every
            # user's report said nothing they could act on
            by_default=lambda entry: entry.custom_op is not None,
        )
    )
