"""One ``afdb migrate`` target end to end: find the legacy Functions, rewrite each, verify
each against the original on samples, optionally add a generated vmap rule (kept only if
the vmap checks pass), run the suite's torch.func checks on the result, and (when asked and
everything verified) write the files named, each atomically.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import libcst as cst

from harness.core.errors import UsageError
from harness.core.locations import describe_exception
from harness.migrate.codemod import (
    Migration,
    Refused,
    add_generated_rule,
    function_classes,
    migrate_class,
    parse,
)
from harness.migrate.loading import SourceFile, import_original, resolve, rewritten_module
from harness.migrate.verify import Verdict, verify
from harness.migrate.vmaprule import blockers

#: A class's outcome, worst last: the run's exit status is the worst one's.
MIGRATED, NEW_STYLE, REFUSED, DIFFERS = "migrated", "new-style", "refused", "differs"
EXIT = {MIGRATED: 0, NEW_STYLE: 0, REFUSED: 2, DIFFERS: 1}

NO_SAMPLES = (
    "no samples to verify the migration on: pass --samples module:NAME (a function returning "
    "argument tuples, as afdb check takes), --recorded DIR (calls recorded from your code), or "
    "give the class a `samples` attribute"
)

#: The checks the generated vmap rule must pass to be kept.
VMAP_CHECKS = ("vmap", "vmap_nested", "vmap_chunked")


@dataclass(frozen=True)
class ClassOutcome:
    name: str
    status: str
    message: str  # one line
    migration: Migration | None = None
    verdict: Verdict | None = None
    vmap: str = ""  # what happened to generate_vmap_rule, one line ("" when not asked)
    checks: Any = None  # the torch.func checks' RunResult on the migrated class
    checks_note: str = ""  # why they did not run, one line


@dataclass(frozen=True)
class FileOutcome:
    source: SourceFile
    original: bytes
    rewritten: bytes
    classes: tuple[ClassOutcome, ...] = ()
    written: bool = False

    def diff(self) -> str:
        a = self.original.decode("utf-8", "replace").splitlines(keepends=True)
        b = self.rewritten.decode("utf-8", "replace").splitlines(keepends=True)
        label = self.source.label
        return "".join(difflib.unified_diff(a, b, f"a/{label}", f"b/{label}"))


@dataclass(frozen=True)
class Settings:
    """What the command line says beyond the target."""

    samples: str | None = None
    recorded: str | None = None
    generate_vmap: bool = False
    write: bool = False
    force: bool = False
    #: The torch.func checks to run on a migrated class (None: all; (): none).
    func_checks: tuple[str, ...] | None = None
    check_options: dict[str, Any] = field(default_factory=dict)


def exit_status(files: Sequence[FileOutcome]) -> int:
    statuses = {c.status for f in files for c in f.classes}
    if DIFFERS in statuses:
        return 1
    return 2 if REFUSED in statuses else 0


def migrate(
    target: str, settings: Settings, progress: Callable[[str], None] = lambda s: None
) -> list[FileOutcome]:
    """Every file the target names, migrated and verified (written when asked and allowed).

    UsageError for bad input: a target that does not resolve, a file that does not parse, a
    named class that is not a Function, a target with no Function at all.
    """
    files, class_name = resolve(target)
    outcomes: list[FileOutcome] = []
    for src in files:
        original = _read(src)
        try:
            module = parse(original, src.label)
        except Refused as e:
            raise UsageError(str(e)) from None
        found = function_classes(module)
        if class_name is not None:
            found = [f for f in found if f.name == class_name]
            if not found:
                raise UsageError(
                    f"{src.label}: {class_name} is not a torch.autograd.Function defined at the "
                    "top level of the file (no class with a staticmethod forward by that name)"
                )
        if not found:
            continue
        named = class_name is not None
        outcomes.append(_migrate_file(src, original, module, found, named, settings, progress))
    if not any(f.classes for f in outcomes):
        raise UsageError(f"TARGET {target}: no torch.autograd.Function class found in it")
    outcomes = [f for f in outcomes if f.classes]
    if settings.write and (settings.force or exit_status(outcomes) != 1):
        outcomes = [_write(f) for f in outcomes]
    return outcomes


def _read(src: SourceFile) -> bytes:
    try:
        with open(src.path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"{src.label}: cannot read ({e.strerror})") from None


def _migrate_file(
    src: SourceFile,
    original: bytes,
    module: cst.Module,
    found: Sequence[Any],
    named: bool,
    settings: Settings,
    progress: Callable[[str], None],
) -> FileOutcome:
    import torch

    mod = import_original(src)
    start = module
    outcomes: dict[str, ClassOutcome] = {}
    migrations: dict[str, Migration] = {}
    for fc in found:
        obj = getattr(mod, fc.name, None)
        if not (isinstance(obj, type) and issubclass(obj, torch.autograd.Function)):
            if named:
                raise UsageError(f"{src.label}: {fc.name} is not a torch.autograd.Function")
            continue
        if not fc.legacy:
            outcomes[fc.name] = ClassOutcome(
                fc.name, NEW_STYLE, "already new-style (forward without ctx, setup_context): "
                "nothing to migrate"
            )  # fmt: skip
            continue
        try:
            module, migrations[fc.name] = migrate_class(module, fc.name)
        except Refused as e:
            outcomes[fc.name] = ClassOutcome(fc.name, REFUSED, f"refused: {e}")
    samples: dict[str, list[Any]] = {}
    for name in migrations:
        got = _samples(mod, name, settings)
        if got is None:
            outcomes[name] = ClassOutcome(name, REFUSED, f"refused: {name}: {NO_SAMPLES}")
        else:
            samples[name] = got
    todo = [n for n in migrations if n in samples]
    module = start  # only the classes that will be verified are rewritten
    for name in todo:
        module = migrate_class(module, name)[0]
    if todo:
        with rewritten_module(src, module.bytes) as new:
            for name in todo:
                progress(f"verifying {name} against the original")
                verdict = verify(getattr(mod, name), getattr(new, name), samples[name])
                outcomes[name] = _verdict_outcome(name, migrations[name], verdict)
    for name in todo:
        if outcomes[name].status != MIGRATED:
            continue
        fc = next(f for f in found if f.name == name)
        if settings.generate_vmap and not fc.has_vmap:
            module, outcomes[name] = _try_generated_rule(
                src, original, module, outcomes[name], samples[name], settings, progress
            )
        elif settings.generate_vmap:
            kept = "has a vmap staticmethod or generate_vmap_rule already: kept as it is"
            outcomes[name] = replace(outcomes[name], vmap=kept)
    rewritten = module.bytes
    if settings.func_checks != ():
        done = [n for n in todo if outcomes[n].status == MIGRATED]
        if done:
            with rewritten_module(src, rewritten) as new:
                for name in done:
                    progress(f"running the torch.func checks on the migrated {name}")
                    try:
                        result = _func_checks(
                            getattr(new, name), samples[name], outcomes[name], settings
                        )
                    except UsageError as e:  # the checks' own refusal (samples, options)
                        note = f"the torch.func checks did not run: {e}"
                        outcomes[name] = replace(outcomes[name], checks_note=note)
                    else:
                        outcomes[name] = replace(outcomes[name], checks=result)
    order = [f.name for f in found if f.name in outcomes]
    return FileOutcome(src, original, rewritten, tuple(outcomes[n] for n in order))


def _verdict_outcome(name: str, migration: Migration, verdict: Verdict) -> ClassOutcome:
    if verdict.differences:
        first = verdict.differences[0]
        more = f" (and {len(verdict.differences) - 1} more)" if len(verdict.differences) > 1 else ""
        return ClassOutcome(
            name, DIFFERS, f"the migration differs from the original: {first}{more}",
            migration, verdict,
        )  # fmt: skip
    if verdict.compared == 0:
        why = verdict.notes[0] if verdict.notes else "no sample could be run"
        return ClassOutcome(
            name, DIFFERS, f"nothing could be compared ({why}): give samples the original runs on",
            migration, verdict,
        )  # fmt: skip
    double = (
        f", double backward on {verdict.double_backward} leg(s)"
        if verdict.double_backward
        else ", no double backward (the original has none)"
    )
    recomputed = (
        "; recomputed in setup_context: "
        + ", ".join(f"`{n}` (line {ln})" for n, ln in migration.recomputed)
        if migration.recomputed
        else ""
    )
    return ClassOutcome(
        name, MIGRATED, f"migrated and verified: {verdict.compared} comparisons (forward, "
        f"inputs after, gradients{double}) equal to the original's{recomputed}",
        migration, verdict,
    )  # fmt: skip


def _samples(mod: Any, name: str, settings: Settings) -> list[Any] | None:
    """The samples (``Sample`` objects) a class is verified on, or None when there are none."""
    from harness.core.options import Options
    from harness.sources.entries import make_entry, samples_attribute
    from harness.sources.user_samples import base_samples

    cls = getattr(mod, name)
    source: Any = None
    if settings.samples:
        from harness.sources.imports import load_attr

        source = load_attr(settings.samples, "--samples")
    elif settings.recorded:
        source = _recorded(settings.recorded, cls)
        if source is None:
            return None
    else:
        source = samples_attribute(cls)
    if source is None:
        return None
    entry = make_entry(cls, source)
    return base_samples(entry, Options(dtype=None))


def _recorded(folder: str, cls: Any) -> list[tuple[Any, ...]] | None:
    """The recorded calls of ``cls`` (``harness.recording``: targets ``module:QualName``);
    None when the recording has none. The recorder is imported only here."""
    try:
        from harness import recording  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        raise UsageError(
            "--recorded needs harness.recording (the call recorder), which this installation "
            "lacks; pass --samples instead"
        ) from None
    rec = recording.load_recording(folder)
    module = str(cls.__module__)
    calls: list[tuple[Any, ...]] = []
    for fn in rec.functions:
        mod, _, qual = str(fn.target).rpartition(":")
        # a script's classes are recorded under __main__; a file target loads under its stem
        same_module = mod == module or mod.rsplit(".", 1)[-1] == module.rsplit(".", 1)[-1]
        if qual == cls.__qualname__ and (same_module or mod == "__main__"):
            calls += [tuple(c.args) for c in fn.calls if not c.kwargs]
    return calls or None


def _capabilities(outcome: ClassOutcome, settings: Settings) -> dict[str, Any]:
    opts = dict(settings.check_options)
    m = outcome.migration
    if m is not None and m.inplace_args and "inplace_args" not in opts:
        opts["inplace_args"] = m.inplace_args
    if m is not None and m.nondiff_outputs and "nondiff_outputs" not in opts:
        opts["nondiff_outputs"] = m.nondiff_outputs
    return opts


def _func_checks(
    cls: Any, samples: Sequence[Any], outcome: ClassOutcome, settings: Settings, checks: Any = None
) -> Any:
    from harness.api import check

    chosen = checks if checks is not None else settings.func_checks
    return check(
        cls,
        list(samples),
        dtype=None,
        checks=list(chosen) if chosen else None,
        **_capabilities(outcome, settings),
    )


def _try_generated_rule(
    src: SourceFile,
    original: bytes,
    module: cst.Module,
    outcome: ClassOutcome,
    samples: Sequence[Any],
    settings: Settings,
    progress: Callable[[str], None],
) -> tuple[cst.Module, ClassOutcome]:
    """``generate_vmap_rule = True`` added, kept only if the vmap checks pass on it."""
    name = outcome.name
    with_rule = add_generated_rule(module, name)
    progress(f"trying generate_vmap_rule = True on {name} (the vmap checks)")
    try:
        with rewritten_module(src, with_rule.bytes) as new:
            result = _func_checks(getattr(new, name), samples, outcome, settings, VMAP_CHECKS)
    except UsageError as e:
        result, failure = None, str(e)
    else:
        bad = [c for c in result.cases if c.status not in ("pass", "unsupported", "skip", "xfail")]
        passed = [c for c in result.cases if c.status == "pass"]
        failure = "" if passed and not bad else (
            f"{bad[0].id}: {bad[0].status}: {bad[0].message.splitlines()[0][:160]}"
            if bad else "no vmap case could run"
        )  # fmt: skip
    if not failure:
        n = len([c for c in result.cases if c.status == "pass"]) if result else 0
        return with_rule, replace(
            outcome, vmap=f"generate_vmap_rule = True added: the vmap checks pass ({n} cases)"
        )
    found = blockers(original.decode("utf-8", "replace"), name)  # lines of the user's file
    where = "; ".join(str(b) for b in found[:3]) or "no single line found (see the failure)"
    return module, replace(
        outcome,
        vmap=f"generate_vmap_rule = True not kept: the vmap checks fail ({failure}); in forward: "
        f"{where}; a vmap staticmethod is needed",
    )


def _write(f: FileOutcome) -> FileOutcome:
    """Replace the file with its rewritten bytes atomically (a temporary file beside it,
    then ``os.replace``); a file whose bytes did not change is left alone."""
    if f.rewritten == f.original:
        return f
    ok = {MIGRATED, DIFFERS}
    if not any(c.status in ok and c.migration is not None for c in f.classes):
        return f
    path = os.path.realpath(f.source.path)
    folder = os.path.dirname(path)
    tmp = ""
    try:
        mode = os.stat(path).st_mode & 0o7777
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as out:
            out.write(f.rewritten)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = ""
    except OSError as e:
        raise UsageError(f"{f.source.label}: cannot write ({describe_exception(e)})") from None
    finally:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return replace(f, written=True)
