"""A Function's own bug is not "samples that do not fit" (issue 34, part 8).

The samples probe blames the samples only on evidence: a call that cannot take its
arguments, or every sample raising. A Function that raises inside on one sample of five is
checked: that sample's cases are its ``error`` (with the exception and its line), exit 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import harness
from harness.cli.main import main
from harness.core.errors import UsageError
from harness.core.options import Options
from harness.engine import probe
from harness.sources.entries import make_entry
from harness.sources.user_samples import base_samples
from tests import sample_blame_functions as sb

ROOT = Path(__file__).resolve().parent.parent
SB = "tests/sample_blame_functions.py"
CHECKS = "vmap,vjp"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _check(capsys, name, samples="five_samples", *extra):
    rc = main(["check", f"{SB}:{name}", "--samples", f"{SB}:{samples}", "--checks", CHECKS, *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("isolate", [[], ["--no-isolate"]], ids=["forked-probe", "in-process"])
def test_a_function_raising_on_one_sample_of_five_is_checked_not_refused(capsys, isolate):
    rc, out, err = _check(capsys, "SoftClipReturnsInput", "five_samples", *isolate)
    assert rc == 1, out + err
    assert "do not fit" not in out + err
    assert "An input that has been returned as-is as output is being saved for backward" in out
    assert "s3/" in out


def test_the_raising_samples_cases_are_the_functions_error_with_its_line():
    r = harness.check(sb.SoftClipReturnsInput, sb.five_samples, checks=["vmap", "vjp"])
    bad = [c for c in r.cases if c.sample == 3]
    others = [c for c in r.cases if c.sample != 3 and c.status != "unsupported"]
    assert bad and {c.status for c in bad} == {"error"}, {c.status for c in bad}
    for c in bad:
        assert "returned as-is as output is being saved for backward" in c.message
        assert "`SoftClipReturnsInput.forward` (tests/sample_blame_functions.py:" in c.message
    assert others and {c.status for c in others} == {"pass"}
    assert r.exit_status == 1


def test_the_correct_twin_passes(capsys):
    rc, out, err = _check(capsys, "SoftClip")
    assert rc == 0, out + err


def test_a_missing_argument_is_still_the_samples(capsys):
    rc, out, err = _check(capsys, "SoftClipNeedsTwo")
    assert rc == 2, out + err
    line = err.strip().splitlines()[-1]
    assert "sample 0: SoftClipNeedsTwo.apply(*sample) raises TypeError" in line, line
    assert "the samples do not fit the Function" in line


def test_a_list_where_a_tensor_belongs_in_one_sample_of_five_is_the_samples(capsys):
    rc, out, err = _check(capsys, "SoftClip", "one_list_among_tensors", "--no-isolate")
    assert rc == 2, out + err
    line = err.strip().splitlines()[-1]
    assert "sample 4: SoftClip.apply(*sample) raises AttributeError: 'list'" in line, line


def _raise_in_user_code(x):
    raise TypeError("unsupported operand type(s) inside the Function")


def test_at_binding_tells_the_apply_boundary_from_the_functions_own_type_error():
    with pytest.raises(TypeError) as boundary:
        sb.SoftClip.apply(torch.ones(2), torch.ones(2))  # forward takes one argument
    assert probe.at_binding(boundary.value, (torch.ones(2), torch.ones(2)))
    with pytest.raises(TypeError) as inside:
        _raise_in_user_code(torch.ones(2))
    assert not probe.at_binding(inside.value, (torch.ones(2),))
    with pytest.raises(AttributeError) as attr:
        sb.SoftClip.apply([1.0, 2.0])
    assert probe.at_binding(attr.value, ([1.0, 2.0],))
    assert not probe.at_binding(attr.value, (torch.ones(2),))  # no list among the arguments


def test_every_sample_raising_inside_is_still_the_samples_and_says_so():
    class AlwaysSmall(sb.SoftClipReturnsInput):
        pass

    def small(seed):
        return [(torch.randn(2, 3, dtype=torch.float64),) for _ in range(3)]

    entry = make_entry(AlwaysSmall, small)
    found = probe.probe_in_process(entry, base_samples(entry, Options()), 10)
    assert found is not None and found.why == probe.EVERY_SAMPLE and found.raised_count == 3
    with pytest.raises(UsageError) as e:
        harness.check(AlwaysSmall, small, checks=["vmap"])
    assert "as every one of the 3 samples does: the samples do not fit" in str(e.value)
