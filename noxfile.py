"""nox sessions for autograd-function-db.

    nox                                  lint and tests
    nox -s tests -- -k diff              the project's tests (arguments go to pytest)
    nox -s lint                          ruff (check and format), mypy, import-linter layers
    nox -s conformance                   the database on every torch in TORCH_VERSIONS
    nox -s "conformance(torch='2.13.0')" one torch version; reports in out/conformance/
                                         (-- --strict: fail when it regressed vs the baseline)
    nox -s baseline                      regenerate reports/baseline/torch-2.13.0-cpu.json
    nox -s regression                    2.13.0 vs 2.14.1 -> reports/regression-torch-2.13.0-vs-2.14.1.md
    nox -s matrix_run                    the database on every torch in MATRIX_VERSIONS (one venv
                                         each), then matrix_report: the regression matrix ->
                                         reports/regression-matrix.md/.html and the 2.13.0 vs
                                         2.14.1 diff (-- --allow-fail: keep a run that exits 1)
    nox -s matrix_report                 only the matrix and the diff, of the JSONs in out/matrix/
    nox -s "wheel(torch='2.14.1')"       the built wheel alone: the main job exits 0 from an empty dir

torch 2.13.0 is installed through ``-c constraints.txt`` (the CPU wheel on this machine
class). 2.14.1 is a CUDA build, about 5.5 GB once installed with its nvidia-* wheels; the
suite still runs on the CPU. A conformance run exits 1 when an entry does not conform:
that is data for the reports, so the sessions accept it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"

BASELINE_TORCH = "2.13.0"
TORCH_VERSIONS = (BASELINE_TORCH, "2.14.1")
#: The regression matrix's columns, oldest first. 2.12.1 comes from PyPI (a CUDA build with
#: its nvidia-* wheels, about 5 GB); it is older than the suite's declared floor (torch>=2.13),
#: so the suite goes in with --no-deps there (see ``install``).
MATRIX_VERSIONS = ("2.12.1", BASELINE_TORCH, "2.14.1")
#: The oldest torch the suite declares (pyproject.toml); older ones are measured all the same.
TORCH_FLOOR = (2, 13)
DEVICE = "cpu"
OUT = Path("out")
BASELINE_DIR = Path("reports/baseline")


def report_name(torch: str, device: str = DEVICE) -> str:
    return f"torch-{torch}-{device}"


def install(session: nox.Session, torch: str, *extras: str) -> None:
    project = f".[{','.join(extras)}]" if extras else "."
    if torch == BASELINE_TORCH:
        session.install("-c", "constraints.txt", "-e", project)
    elif tuple(int(p) for p in torch.split(".")[:2]) < TORCH_FLOOR:
        # pip refuses the project's torch>=2.13 with an older torch: the other dependencies
        # first, then the suite without them, so the run shows what that torch does.
        session.log(f"torch {torch} is older than the declared floor: suite installed --no-deps")
        session.install(f"torch=={torch}", *_other_dependencies())
        session.install("--no-deps", "-e", project)
    else:
        session.install(f"torch=={torch}", "-e", project)
    session.run(
        "python",
        "-c",
        "import torch; print('torch', torch.__version__, torch.version.git_version)",
    )


def _other_dependencies() -> list[str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10: nox brings tomli
        import tomli as tomllib  # type: ignore[no-redef]

    deps = tomllib.loads(Path("pyproject.toml").read_text())["project"]["dependencies"]
    return [d for d in deps if not d.replace(" ", "").startswith("torch")]


def run_suite(session: nox.Session, outdir: Path, name: str, *, all_formats: bool = True) -> Path:
    """The whole database; returns the JSON report's path (exit 1 = something fails: kept)."""
    outdir.mkdir(parents=True, exist_ok=True)
    report = outdir / f"{name}.json"
    args = ["afdb", "run", "--device", DEVICE, "-q", "--json", str(report)]
    if all_formats:
        args += [
            "--markdown",
            str(outdir / f"{name}.md"),
            "--html",
            str(outdir / f"{name}.html"),
            "--junit",
            str(outdir / f"{name}.xml"),
        ]
    session.run(*args, success_codes=[0, 1])
    return report


@nox.session
def tests(session: nox.Session) -> None:
    install(session, BASELINE_TORCH, "test")
    session.run("pytest", "-n", "auto", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("-c", "constraints.txt", "ruff>=0.6", "mypy>=1.10", "import-linter>=2.1")
    session.install("-c", "constraints.txt", "-e", ".")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    session.run("lint-imports", "--no-cache")  # the layering contracts of pyproject.toml


@nox.session
@nox.parametrize("torch", TORCH_VERSIONS)
def conformance(session: nox.Session, torch: str) -> None:
    """The database on one torch version: JSON, Markdown, HTML and JUnit in out/conformance/."""
    install(session, torch)
    name = report_name(torch)
    report = run_suite(session, OUT / "conformance", name)
    baseline = BASELINE_DIR / f"{report_name(BASELINE_TORCH)}.json"
    if baseline.exists():
        diff = OUT / "conformance" / f"diff-{name}"
        session.run(
            "afdb",
            "diff",
            str(baseline),
            str(report),
            "--markdown",
            f"{diff}.md",
            "--json",
            f"{diff}.json",
            "--title",
            f"torch {torch} vs the baseline ({report_name(BASELINE_TORCH)})",
            "-q",
            # --strict: a regression against the baseline fails the session (CI, same torch).
            success_codes=[0] if "--strict" in session.posargs else [0, 1],
        )


@nox.session
def baseline(session: nox.Session) -> None:
    """Regenerate the committed baseline (deterministic apart from timings and the revision)."""
    install(session, BASELINE_TORCH)
    name = report_name(BASELINE_TORCH)
    fresh = run_suite(session, OUT / "baseline", name, all_formats=False)
    target = BASELINE_DIR / f"{name}.json"
    if target.exists():
        session.log(f"changes against the committed {target}:")
        session.run("afdb", "diff", str(target), str(fresh), "-q", success_codes=[0, 1])
    BASELINE_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(fresh, target)
    session.run("afdb", "report", str(target), "--markdown", str(BASELINE_DIR / f"{name}.md"))
    session.log(f"wrote {target}")


@nox.session
def regression(session: nox.Session) -> None:
    """Both torch versions in one environment, one after the other, then ``afdb diff``."""
    old, new = TORCH_VERSIONS
    outdir = OUT / "regression"
    install(session, old)
    old_report = run_suite(session, outdir, report_name(old))
    install(session, new)
    new_report = run_suite(session, outdir, report_name(new))
    target = Path("reports") / f"regression-torch-{old}-vs-{new}.md"
    session.run(
        "afdb",
        "diff",
        str(old_report),
        str(new_report),
        "--markdown",
        str(target),
        "--json",
        str(outdir / f"regression-torch-{old}-vs-{new}.json"),
        "--title",
        f"Regression report: torch {old} vs {new} ({DEVICE})",
        success_codes=[0, 1],
    )
    session.log(f"wrote {target}")


@nox.session
@nox.parametrize("torch", TORCH_VERSIONS)
def wheel(session: nox.Session, torch: str) -> None:
    """The wheel as a user installs it: the main job (both sources) exits 0 from an empty
    directory, with the expectations the wheel carries (their "torch" conditions choose)."""
    session.install("build")
    dist = (OUT / "dist").resolve()
    shutil.rmtree(dist, ignore_errors=True)
    session.run("python", "-m", "build", "--wheel", "--outdir", str(dist), ".")
    wheel_file = str(next(dist.glob("*.whl")))
    if torch == BASELINE_TORCH:
        session.install("-c", "constraints.txt", wheel_file)
    else:
        session.install(f"torch=={torch}", wheel_file)
    empty = tempfile.mkdtemp(prefix="afdb-wheel-")
    with session.chdir(empty):
        session.run(
            "python", "-c", "import harness, torch; print(harness.__file__, torch.__version__)"
        )
        session.run("afdb", "run", "--device", DEVICE, "-q", "--json", "afdb.json")
        session.run("afdb", "run", "--source", "pytorch", "--device", DEVICE, "-q")


MATRIX_OUT = OUT / "matrix"


@nox.session
@nox.parametrize("torch", MATRIX_VERSIONS)
def matrix_run(session: nox.Session, torch: str) -> None:
    """The database on one torch of the matrix (its own venv), as the matrix's column:
    ``afdb run -n 2 -q --json out/matrix/torch-V-cpu.json``. Each column must exit 0 (its
    expectations' "torch" conditions decide); ``-- --allow-fail`` keeps a run that exits 1.
    Then ``matrix_report`` (notified: it runs once, after every column)."""
    install(session, torch)
    MATRIX_OUT.mkdir(parents=True, exist_ok=True)
    report = MATRIX_OUT / f"{report_name(torch)}.json"
    session.run(
        "afdb",
        "run",
        "--device",
        DEVICE,
        "-n",
        "2",
        "-q",
        "--json",
        str(report),
        success_codes=[0, 1] if "--allow-fail" in session.posargs else [0],
    )
    session.notify("matrix_report")


@nox.session
def matrix_report(session: nox.Session) -> None:
    """The matrix of the columns in out/matrix/ (oldest torch first) -> reports/regression-
    matrix.md and .html (JSON in out/matrix/), and the committed 2.13.0 vs 2.14.1 diff."""
    install(session, BASELINE_TORCH)
    reports = [MATRIX_OUT / f"{report_name(v)}.json" for v in MATRIX_VERSIONS]
    missing = [str(r) for r in reports if not r.exists()]
    if missing:
        session.error(f"no column report {', '.join(missing)}: run `nox -s matrix_run` first")
    title = f"Regression matrix: torch {', '.join(MATRIX_VERSIONS)} ({DEVICE})"
    session.run(
        "afdb",
        "matrix",
        *map(str, reports),
        "--markdown",
        "reports/regression-matrix.md",
        "--html",
        "reports/regression-matrix.html",
        "--json",
        str(MATRIX_OUT / "regression-matrix.json"),
        "--title",
        title,
        "-q",
    )
    old, new = TORCH_VERSIONS
    target = Path("reports") / f"regression-torch-{old}-vs-{new}.md"
    session.run(
        "afdb",
        "diff",
        str(MATRIX_OUT / f"{report_name(old)}.json"),
        str(MATRIX_OUT / f"{report_name(new)}.json"),
        "--markdown",
        str(target),
        "--json",
        str(MATRIX_OUT / f"regression-torch-{old}-vs-{new}.json"),
        "--title",
        f"Regression report: torch {old} vs {new} ({DEVICE})",
        "-q",
        success_codes=[0, 1],
    )
    session.log(
        "wrote reports/regression-matrix.md, reports/regression-matrix.html, " + str(target)
    )
