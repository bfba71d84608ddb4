"""Entry sources: the registry, and PyTorch's own autograd_function_db through the adapter."""

from __future__ import annotations

import json

import pytest
import torch

from autograd_function_db import REGISTRY
from autograd_function_db.hazards import find_hazards
from autograd_function_db.registry import structure_of
from harness.core.options import Options
from harness.engine.runner import run_entries
from harness.sources.batch_sizes import options_for_source
from harness.sources.database import SourceError, expectations_path, load_source
from harness.sources.pytorch_db import PYTORCH_PREFIX

VMAP_FAMILY = ("vmap", "vmap_nested", "vmap_chunked", "contract")


@pytest.fixture(scope="module")
def pytorch_entries():
    return load_source("pytorch")


def test_afdb_source_is_the_registry():
    assert [e.name for e in load_source("afdb")] == REGISTRY.names()
    assert options_for_source("afdb", load_source("afdb"), Options()) == Options()


def test_unknown_source_is_a_one_line_error():
    with pytest.raises(SourceError, match="known sources: afdb, pytorch"):
        load_source("nope")


def test_pytorch_adapter_yields_every_opinfo(pytorch_entries):
    import torch.testing._internal.autograd_function_db as m

    assert len(pytorch_entries) == len(m.autograd_function_db) >= 10
    assert all(e.name.startswith(PYTORCH_PREFIX) for e in pytorch_entries)
    by_name = {e.name: e for e in pytorch_entries}
    assert by_name["pytorch.NumpySort"].caps.nondiff_outputs == (1, 2)
    assert by_name["pytorch.NumpyTake"].linked_args == ((1, 2),)
    assert by_name["pytorch.CubeGenVmap"].caps.vmap == "generated"
    assert by_name["pytorch.NumpyCubeNotComposable"].caps.vmap == "none"
    assert not by_name["pytorch.NumpySort"].caps.jvp  # the OpInfo says no forward AD


def test_pytorch_samples_are_seeded(pytorch_entries):
    for e in pytorch_entries:
        a, b = e.make_samples(0, torch.float32), e.make_samples(1, torch.float32)
        assert [structure_of(s) for s in a] == [structure_of(s) for s in b], e.name
        again = e.make_samples(0, torch.float32)
        for s, t in zip(a, again):
            for x, y in zip(s.args, t.args):
                if isinstance(x, torch.Tensor):
                    assert torch.equal(x, y), e.name
        floats = [
            (x, y)
            for s, t in zip(a, b)
            for x, y in zip(s.args, t.args)
            if isinstance(x, torch.Tensor) and x.is_floating_point()
        ]
        assert any(not torch.equal(x, y) for x, y in floats), e.name


def test_pytorch_batch_sizes_avoid_the_sample_dims(pytorch_entries):
    options = options_for_source("pytorch", pytorch_entries, Options())
    assert options.batch_size_note
    sizes = options.hazard_sizes()
    assert 3 not in sizes
    for e in pytorch_entries:
        for s in e.make_samples(0, torch.float32):
            assert not find_hazards(s.args, sizes), (e.name, sizes)


def test_pytorch_entries_run_through_the_vmap_family(pytorch_entries):
    options = options_for_source("pytorch", pytorch_entries, Options(checks=VMAP_FAMILY))
    results = run_entries(pytorch_entries, options)
    assert len(results) > 100
    bad = [(r.id, r.status, r.message) for r in results if r.status not in ("pass", "unsupported")]
    assert not bad, bad[:5]
    assert sum(r.status == "pass" for r in results) > 100


def test_pytorch_expectations_file(pytorch_entries):
    path = expectations_path("pytorch")
    assert path is not None
    data = json.loads(path.read_text())
    assert data["schema"] == "afdb-expectations/1"
    names = {e.name for e in pytorch_entries}
    for x in data["expectations"]:
        assert x["status"] in ("xfail", "skip")
        assert x["reason"].strip()
        assert x["id"].split("/")[0] in names, x["id"]


_SUMMARY = r"""
import json, sys
import torch
from harness.sources import pytorch_db as sources

def summary(registry):
    out = []
    for e in registry:
        samples = [
            [a.tolist() if isinstance(a, torch.Tensor) else repr(a) for a in s.args]
            for seed in (0, 7)
            for s in e.make_samples(seed, torch.float64)
        ]
        out.append([e.name, e.function.__qualname__, repr(e.caps), e.linked_args,
                    sorted(e.tags), e.description, samples])
    return out

stand_ins = sys.argv[1] == "stand-ins"
registry = sources.pytorch_registry(stand_ins=stand_ins)
print(json.dumps({
    "entries": summary(registry),
    "opinfo_core_imported": sources.OPINFO_CORE in sys.modules,
    "real_module_imported": sources.PYTORCH_MODULE in sys.modules,
}))
"""


def _summary_in_fresh_process(mode: str) -> dict:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _SUMMARY, mode], capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout)


def test_stand_ins_build_the_same_entries_as_the_real_import():
    """The fast load (PyTorch's module executed with stand-ins for OpInfo and SampleInput,
    without importing opinfo.core) gives exactly the entries of the ordinary import:
    names, Functions, capabilities, links, descriptions and the seeded sample data."""
    fast = _summary_in_fresh_process("stand-ins")
    real = _summary_in_fresh_process("real")
    assert not fast["opinfo_core_imported"] and not fast["real_module_imported"]
    assert real["opinfo_core_imported"] and real["real_module_imported"]
    assert len(fast["entries"]) == len(real["entries"]) >= 10
    for a, b in zip(fast["entries"], real["entries"]):
        assert a == b, a[0]


def test_stand_ins_step_aside_for_a_module_needing_more(tmp_path, monkeypatch):
    """A module that imports more of opinfo.core than the stand-ins give is imported the
    ordinary way, and the stand-in is not left in sys.modules."""
    import importlib.util
    import sys

    from harness.sources import pytorch_db as sources

    fake = tmp_path / "needs_more.py"
    fake.write_text("from torch.testing._internal.opinfo.core import OpInfo, DecorateInfo\n")
    spec = importlib.util.spec_from_file_location(sources.PYTORCH_MODULE, fake)
    monkeypatch.setattr(sources.importlib.util, "find_spec", lambda name: spec)
    monkeypatch.delitem(sys.modules, sources.OPINFO_CORE, raising=False)
    monkeypatch.delitem(sys.modules, sources.PYTORCH_MODULE, raising=False)
    assert sources._module_with_stand_ins() is None
    assert sources.OPINFO_CORE not in sys.modules
