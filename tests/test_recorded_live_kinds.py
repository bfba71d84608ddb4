"""What real calls pass that cannot be data, on the example project's ``softlib.live_kinds``
(a lambda, an nn.Module, a wrapper tensor subclass, classes made per call by a factory, a
Function called only inside another), each with a planted bug softlib's own tests miss.

``pytest --afdb`` checks every one in the recording process and fails exactly the planted
ones; ``afdb record`` + ``afdb check --recorded`` checks the data-only ones (a module-level
function is a reference, imported again) and names each live-only one in one line; a
hostile reference is refused with one line, exit 2; the terminal, JSON and Markdown say
the same numbers; ``[tool.afdb]`` declarations reach every path.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from harness.core.schema import read_report
from tests.test_recorded_project import PROJECT, pytest_argv

PLANTED = "lambda,module,subclass,factory,nested"
FAST = "vjp"
LK = "softlib.live_kinds"
WRAP = f"{LK}:elementwise.<locals>.Wrapper"
BUGGY = {
    f"{LK}:EulerStep",
    f"{LK}:LinearTanh",
    f"{LK}:Halve",
    f"{LK}:Inner",
    f"{WRAP}[softplus_and_sigmoid]",
}
CORRECT = {f"{LK}:Outer", f"{WRAP}[sin_and_cos]"}
AFDB = str(Path(sys.executable).parent / "afdb")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(
        PROJECT, tmp_path / "proj", ignore=shutil.ignore_patterns(".afdb", "__pycache__")
    )
    return tmp_path / "proj"


def lines_of(out: str) -> dict[str, str]:
    found = {}
    for line in out.splitlines():
        if line.startswith(f"  {LK}:"):
            target, _, rest = line.strip().partition("  ")
            found[target] = rest.strip()
    return found


def _with_env(cwd: Path, argv: list[str], planted: str) -> object:
    """``run`` with SOFTLIB_PLANTED set to ``planted`` (``run`` only knows the old two)."""
    import os
    import subprocess

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["SOFTLIB_PLANTED"] = planted
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("planted", [PLANTED, ""])
def test_pytest_afdb_checks_every_kind_and_fails_exactly_the_planted_ones(project, planted):
    argv = pytest_argv("--afdb", "--afdb-checks", FAST, "tests/test_live_kinds.py")
    proc = _with_env(project, argv, planted)
    out = proc.stdout
    assert "6 passed" in out, out + proc.stderr  # the project's tests never see the bugs
    found = lines_of(out)
    assert set(found) == BUGGY | CORRECT, out  # every kind reached, each named once
    failing = {t for t, line in found.items() if line.startswith("FAIL: ")}
    assert failing == (BUGGY if planted else set()), out
    for target in (BUGGY | CORRECT) - failing:
        assert found[target].startswith("conforms ("), (target, out)
    assert "from its calls inside softlib.live_kinds:Outer.forward" in found[f"{LK}:Inner"]
    fails = len(BUGGY) if planted else 0
    assert f"7 Functions called by 6 tests: {7 - fails} conform, {fails} fail" in out
    assert proc.returncode == (1 if planted else 0), out


def test_record_then_check_recorded_checks_data_and_names_live_only_ones(project):
    rec = _with_env(
        project, [AFDB, "record", "-m", *pytest_argv("tests/test_live_kinds.py")[2:]], PLANTED
    )
    assert rec.returncode == 0, rec.stdout + rec.stderr
    doc = json.loads((project / ".afdb" / "recorded" / "recording.json").read_text())
    euler = next(f for f in doc["functions"] if f["target"] == f"{LK}:EulerStep")
    kinds = [next(iter(c["args"][2])) for c in euler["calls"]]
    assert kinds == ["live", "ref"], kinds  # the lambda live-only, decay a reference
    assert euler["calls"][1]["args"][2]["ref"] == {
        "target": f"{LK}:decay",
        "type": "builtins:function",
    }
    md, js = project / "r.md", project / "r.json"
    argv = [AFDB, "check", "--recorded", "--checks", FAST, "--json", str(js), "--markdown", str(md)]
    checked = _with_env(project, argv, PLANTED)
    out = checked.stdout
    assert checked.returncode == 1, out + checked.stderr
    found = lines_of(out)
    need = "1 call needs the recording process: run `pytest --afdb` or `afdb record --check`"
    need2 = need.replace("1 call needs", "2 calls need")  # float64 and float32
    assert found[f"{LK}:LinearTanh"] == f"not checked here: {need2}", out
    assert found[f"{LK}:EulerStep"].startswith("FAIL: ") and found[f"{LK}:EulerStep"].endswith(
        f"; {need}"
    )
    # the TwoTensor is data (inner tensors, metadata, class) and rebuilt: checked here
    halve = next(f for f in doc["functions"] if f["target"] == f"{LK}:Halve")
    assert halve["calls"][0]["args"][0]["subclass"]["class"] == (
        "torch.testing._internal.two_tensor:TwoTensor"
    )
    assert found[f"{LK}:Halve"].startswith("FAIL: ")
    assert found[f"{LK}:Inner"].startswith("FAIL: ")
    assert found[f"{LK}:Outer"].startswith("conforms (")
    for suffix in ("[sin_and_cos]", "[softplus_and_sigmoid]"):
        assert "cannot be imported again" in found[WRAP + suffix], out
    sentence = next(ln for ln in out.splitlines() if ln.startswith("7 Functions called by"))
    assert sentence == (
        "7 Functions called by 6 tests: 1 conform, 3 fail, 1 live-only (need the recording "
        "process), 2 not checkable (2 not importable here)"
    )
    # the JSON and Markdown reports say the same numbers
    recorded = read_report(str(js))["metadata"]["recorded"]
    assert recorded["sentence"] == sentence
    assert (recorded["functions"], recorded["conform"], recorded["fail"]) == (7, 1, 3)
    assert recorded["live_only"] == 1 and recorded["not_checkable"] == {"not importable here": 2}
    assert {v["target"]: v["line"] for v in recorded["verdicts"]} == found
    markdown = md.read_text()
    assert "## Recorded Functions" in markdown and sentence in markdown.replace("\\", "")
    # the correct twin: the same recording, the bugs gone, the data-only ones conform
    fixed = _with_env(project, [AFDB, "check", "--recorded", "--checks", FAST], "")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    again = lines_of(fixed.stdout)
    for target in (f"{LK}:EulerStep", f"{LK}:Halve", f"{LK}:Inner", f"{LK}:Outer"):
        assert again[target].startswith("conforms ("), fixed.stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """The example project with its live kinds recorded once (no bug planted)."""
    root = tmp_path_factory.mktemp("recorded") / "proj"
    shutil.copytree(PROJECT, root, ignore=shutil.ignore_patterns(".afdb", "__pycache__"))
    argv = [AFDB, "record", "-m", *pytest_argv("tests/test_live_kinds.py")[2:]]
    rec = _with_env(root, argv, "")
    assert rec.returncode == 0, rec.stdout + rec.stderr
    return root


def _hostile(recorded: Path, tmp_path: Path, target: str, change) -> object:
    project = tmp_path / "proj"
    shutil.copytree(recorded, project)
    path = project / ".afdb" / "recorded" / "recording.json"
    doc = json.loads(path.read_text())
    function = next(f for f in doc["functions"] if f["target"] == target)
    change(function["calls"][-1]["args"])
    path.write_text(json.dumps(doc))
    return _with_env(project, [AFDB, "check", "--recorded", "--checks", FAST], "")


@pytest.mark.parametrize(
    ("target", "change", "words"),
    [
        (
            f"{LK}:EulerStep",
            lambda args: args[2]["ref"].update(target="os:system"),
            "outside the packages whose Functions the recording holds",
        ),
        (
            f"{LK}:EulerStep",
            lambda args: args[2]["ref"].update(type="torch.nn.modules.linear:Linear"),
            "is a `builtins:function` here",
        ),
        (
            f"{LK}:Halve",
            lambda args: args[0]["subclass"].update({"class": "collections:OrderedDict"}),
            "outside torch and the packages",
        ),
        (
            f"{LK}:Halve",
            lambda args: args[0]["subclass"].update({"class": "torch:Tensor"}),
            "cannot be rebuilt here",
        ),
    ],
)
def test_a_hostile_reference_is_refused_with_one_line(recorded, tmp_path, target, change, words):
    proc = _hostile(recorded, tmp_path, target, change)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert words in proc.stderr and "refused" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_the_live_snapshot_never_aliases_the_programs_objects(tmp_path, capsys):
    import harness

    sys.path.insert(0, str(PROJECT))
    try:
        from softlib import live_kinds as lk
    finally:
        sys.path.remove(str(PROJECT))
    layer = torch.nn.Linear(3, 2, dtype=torch.float64)
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    w = torch.full((3,), 0.5, dtype=torch.float64)
    with harness.recording(tmp_path / "rec") as recorder:
        out = lk.linear_tanh(x, layer)
        y = lk.linear_tanh(layer.weight, torch.nn.Linear(3, 3, dtype=torch.float64))
        lk.euler_step(x, 0.1, lambda v: -w * v)  # a closure holding the program's tensor
    snap = recorder.live_calls()[f"{LK}:LinearTanh"][0]
    (_, layer_copy), _, _ = snap
    assert layer_copy is not layer and layer_copy.weight is not layer.weight
    # after the calls the program changes everything it passed: the check sees none of it
    with torch.no_grad():
        layer.weight.fill_(float("nan"))
        x.fill_(float("nan"))
        w.fill_(float("nan"))
    assert torch.isfinite(layer_copy.weight).all() and torch.isfinite(snap[0][0]).all()
    assert torch.isfinite(out).all() and torch.isfinite(y).all()
    status = harness.check_recorded(recorder, "--checks", "vjp,vmap")
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"  {LK}:LinearTanh  conforms (" in out


def test_a_parameter_passed_as_a_tensor_stays_the_same_object_in_the_snapshot(tmp_path):
    import harness

    class Both(torch.autograd.Function):
        @staticmethod
        def forward(w, layer):
            return w * layer.weight.sum()

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    layer = torch.nn.Linear(2, 2)
    with harness.recording(tmp_path / "rec") as recorder:
        Both.apply(layer.weight, layer)
    ((args, _, _),) = next(iter(recorder.live_calls().values())).values()
    assert args[0] is args[1].weight and args[0] is not layer.weight


def test_observing_live_values_changes_nothing(tmp_path):
    import harness

    sys.path.insert(0, str(PROJECT))
    try:
        from softlib import live_kinds as lk
    finally:
        sys.path.remove(str(PROJECT))

    def program():
        torch.manual_seed(0)
        layer = torch.nn.Linear(3, 2, dtype=torch.float64)
        x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
        y = lk.euler_step(lk.linear_tanh(x, layer), 0.1, lambda v: -v)
        y.sum().backward()
        return y.detach(), x.grad, layer.weight.grad

    plain = program()
    with harness.recording(tmp_path / "rec"):
        observed = program()
    for a, b in zip(plain, observed, strict=True):
        assert (a is None and b is None) or torch.equal(a, b)


PYPROJECT = """
[tool.afdb]
declare = ["softlib.functions:RoundSTE gradient=custom"]
"""


@pytest.mark.parametrize("where", ["pyproject", "ini", "none"])
def test_declarations_written_once_reach_every_path(project, where):
    ini = project / "pytest.ini"
    text = ini.read_text()
    if where != "ini":
        ini.write_text(
            text.replace("afdb_declare =\n    softlib.functions:RoundSTE gradient=custom\n", "")
        )
    if where == "pyproject":
        (project / "pyproject.toml").write_text(PYPROJECT)
    word = "FAIL: " if where == "none" else "conforms ("
    select = ["tests/test_softlib.py::test_block_trains"]
    session = _with_env(project, pytest_argv("--afdb", "--afdb-checks", FAST, *select), "")
    record_check = _with_env(
        project, [AFDB, "record", "-o", "rc", "--check", "-m", "pytest", "-q", *select], ""
    )
    recorded = _with_env(project, [AFDB, "check", "--recorded", "rc", "--checks", FAST], "")
    for proc in (session, record_check, recorded):
        line = next(
            (
                ln
                for ln in proc.stdout.splitlines()
                if ln.startswith("  softlib.functions:RoundSTE")
            ),
            None,
        )
        assert line is not None and word in line, proc.stdout + proc.stderr


def test_a_command_line_declaration_replaces_the_files_line_for_its_function(tmp_path):
    from harness.sources.declare_config import declaration_lines

    (tmp_path / "pyproject.toml").write_text(
        '[tool.afdb]\ndeclare = """\nm:A gradient=custom\nm:B nondiff-args=1  # why\n"""\n'
        '[tool.pytest.ini_options]\nafdb_declare = ["m:C randomness"]\n'
    )
    assert declaration_lines(["m:B no-double-backward"], folder=tmp_path) == [
        "m:A gradient=custom",
        "m:C randomness",
        "m:B no-double-backward",
    ]
    (tmp_path / "pytest.ini").write_text("[pytest]\nafdb_declare =\n    m:D randomness\n")
    assert declaration_lines([], folder=tmp_path)[-1] == "m:D randomness"  # pytest.ini first
    (tmp_path / "pyproject.toml").write_text("[tool.afdb]\ncolour = 1\n")
    with pytest.raises(Exception, match="unknown key 'colour'"):
        declaration_lines([], folder=tmp_path)


def test_a_module_over_the_size_limit_is_not_copied_and_names_the_limit(tmp_path):
    import harness

    sys.path.insert(0, str(PROJECT))
    try:
        from softlib import live_kinds as lk
    finally:
        sys.path.remove(str(PROJECT))
    big = torch.nn.Linear(3, 40, dtype=torch.float64)  # 1280 bytes of weight
    small = torch.nn.Linear(3, 2, dtype=torch.float64)
    x = torch.randn(4, 3, dtype=torch.float64)
    with harness.recording(tmp_path / "rec", tensor_limit=1024) as recorder:
        lk.linear_tanh(x, big)
        lk.linear_tanh(x, small)
    f = recorder.result().function(f"{LK}:LinearTanh")
    assert len(f.calls) == 1 and "over the per-tensor limit" in f.skipped[0].reason
    (args, _, _) = recorder.live_calls()[f"{LK}:LinearTanh"][0]
    assert args[1].weight.shape == (2, 3)
