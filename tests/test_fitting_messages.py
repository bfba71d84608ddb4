"""Messages that fit the Function (issue 31, part 5): a custom op's forward-mode cases say
what a custom op needs instead of a jvp staticmethod, and a numpy broadcast error under a
vmap rule names the rule's lines that built the operands."""

from __future__ import annotations

import inspect

import pytest
import torch

from autograd_function_db import REGISTRY
from autograd_function_db.entry import entry
from autograd_function_db.numpy_ops import binary_samples
from harness.core.options import Options
from harness.core.shape_origin import broadcast_shapes, built_at, without_rule_lines
from harness.engine.runner import run_entries
from harness.reports.grouping import group_cases
from tests import broadcast_rules as br
from tests.planted_autodiff import SinNoJvp, unary

FORWARD_MODE = ("jvp", "jacfwd", "vmap_of_jvp", "eager_jvp")


def test_a_custom_ops_forward_mode_cases_say_what_it_needs():
    results = run_entries([REGISTRY.get("CustomNumpySin")], Options(checks=FORWARD_MODE))
    assert {r.id.split("/")[1] for r in results} == set(FORWARD_MODE)
    for r in results:
        assert r.status == "unsupported", (r.id, r.status)
        assert "no jvp staticmethod" not in r.message, r.message
        assert "register_autograd gives reverse mode only" in r.message, r.message
        assert "CompositeImplicitAutograd" in r.message and "afdb::numpy_sin" in r.message


def test_a_function_without_jvp_still_gets_the_staticmethod_advice():
    results = run_entries([entry("SinNoJvp", SinNoJvp, unary)], Options(checks=("jvp",)))
    assert results and all("no jvp staticmethod" in r.message for r in results)


@pytest.mark.skipif(not torch.__version__.startswith("2.13"), reason="facts checked on 2.13")
def test_the_facts_the_custom_op_message_states():
    """register_autograd gives no forward mode (jvp silently returns zero tangents); an op
    whose kernel is CompositeImplicitAutograd is differentiated by forward AD."""
    assert not any("jvp" in n or "forward" in n for n in dir(torch.library) if "register" in n)

    @torch.library.custom_op("afdb_test_messages::sin", mutates_args=())
    def op_sin(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    op_sin.register_autograd(lambda ctx, g: g * ctx.saved_tensors[0].cos(), setup_context=setup)
    x = torch.tensor([0.3, 1.2])
    _, tangent = torch.func.jvp(op_sin, (x,), (torch.ones(2),))
    assert torch.equal(tangent, torch.zeros(2))  # not cos(x), and no error

    lib = torch.library.Library("afdb_test_messages", "FRAGMENT")
    lib.define("csin(Tensor x) -> Tensor")
    lib.impl("csin", lambda t: torch.sin(t), "CompositeImplicitAutograd")
    _, tangent = torch.func.jvp(torch.ops.afdb_test_messages.csin, (x,), (torch.ones(2),))
    assert torch.allclose(tangent, x.cos())


def _line(cls: type, text: str) -> int:
    lines, start = inspect.getsourcelines(cls.vmap)
    return start + next(i for i, s in enumerate(lines) if s.strip().startswith(text))


def test_a_broadcast_error_names_the_rule_lines_that_built_the_operands():
    cls = br.StepwiseMisalignedMul
    results = run_entries([entry(cls.__name__, cls, binary_samples)], Options(checks=("vmap",)))
    errors = [r for r in results if r.status == "error"]
    assert errors
    x_line = f"tests/broadcast_rules.py:{_line(cls, 'x = ')}"
    y_line = f"tests/broadcast_rules.py:{_line(cls, 'y = ')}"
    for r in errors:
        assert "operands could not be broadcast" in r.message
        assert "the rule built" in r.message, r.message
        assert x_line in r.message or y_line in r.message, r.message
        assert "/work/" not in r.message  # portable locations only
    named = next(r for r in errors if "in_dims=(None,0)" in r.id)
    assert x_line in named.message and y_line in named.message
    assert "pad it with size-1 dims after its batch dim" in named.message

    twin = run_entries(
        [entry("AlignedMul", br.AlignedMul, binary_samples)], Options(checks=("vmap",))
    )
    assert twin and all(r.status == "pass" for r in twin)


def test_broadcast_shapes_reads_numpys_message():
    text = "operands could not be broadcast together with shapes (2,) (2,4) (3,1,5)"
    assert broadcast_shapes(text) == [(2,), (2, 4), (3, 1, 5)]
    assert broadcast_shapes("operands could not be broadcast together with shapes () (2,)") == [
        (),
        (2,),
    ]
    assert broadcast_shapes("The size of tensor a (5) must match") == []


def test_the_rule_lines_stay_in_the_message_and_out_of_the_root_cause():
    cls = br.StepwiseMisalignedMul
    results = run_entries([entry(cls.__name__, cls, binary_samples)], Options(checks=("vmap",)))
    errors = [r for r in results if r.status == "error"]
    assert errors and all("the rule built" in r.message for r in errors)
    (group,) = group_cases(errors)
    assert "the rule built" not in group.key and "pad it with" not in group.key
    assert group.first.message == errors[0].message  # the message keeps them
    # The same failure at a plan where no local matched numpy's shapes: the same cause.
    bare = without_rule_lines(errors[0].message)
    assert "the rule built" not in bare and "pad it with" not in bare and bare.endswith(")")
    assert bare.count("(") == bare.count(")"), bare


def test_without_rule_lines_takes_out_exactly_the_added_text():
    base = (
        "vmap p: the Function raised ValueError: operands could not be broadcast (at f.py:9 in vmap"
    )
    added = (
        "; the rule built x (shape (4, 2)) at f.py:3: `x = x.movedim(d, 0)`; "
        "y (shape ()) at f.py:4: `y = 'a' + \"b\"`"
    )
    assert without_rule_lines(base + added + ")") == base + ")"
    advice = added + " -- numpy lines up trailing dims, so the batch dim at the front of the "
    advice += (
        "operand with fewer dims meets another dim: pad it with size-1 dims after its batch dim"
    )
    assert without_rule_lines(base + advice + ") -- hint") == base + ") -- hint"
    assert without_rule_lines(base + ")") == base + ")"


class _StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("no text for you")


def test_built_at_reads_the_text_it_is_given_never_str_of_the_exception():
    exc = _StrRaises()
    assert (
        built_at(exc, "operands could not be broadcast together with shapes (2,) (3,)", _no, _no)
        == ""
    )
    assert built_at(exc, "<unprintable _StrRaises>", _no, _no) == ""


def _no(*_: object) -> bool:
    return False
