"""What a minimal script imports and how it draws the case's sample.

``ScriptSource`` writes the script's header (its imports, the ``sys.path`` entries that find
the user's files, the setup of a database entry or a recording) and the expression that
draws one sample as the suite draws it; ``slice_lines`` draws every slice of a vmap level
with it. A database entry, a user's ``module:Class`` target and a recorded Function each
get their own header.
"""

from __future__ import annotations

import os
from typing import Any

from autograd_function_db.entry import Entry
from harness.core.options import Options
from harness.engine.cases import Case
from harness.plans.slices import sample_seed
from harness.repro.literal import literal
from harness.repro.minimal_facts import NotMinimal, dtype_name


def identifier_path(text: str) -> bool:
    """Whether ``text`` is a dotted path of identifiers (importable as written)."""
    return bool(text) and all(part.isidentifier() for part in text.split("."))


class ScriptSource:
    """The import lines, the Function's call and the expression drawing the sample."""

    def __init__(self, entry: Entry, options: Options, case: Case, target: Any, where: str):
        #: The names the script imports from each module, in order.
        self.imports: dict[str, list[str]] = {}
        self.paths: list[str] = []
        self.setup: list[str] = []
        k = case.sample_index or 0  # CaseFacts refused a case of no one sample
        dtype = "None" if options.dtype is None else f"torch.{dtype_name(options.dtype)}"
        if target is None:  # a database entry: its Function, its samples from the registry
            self.imports["autograd_function_db"] = ["REGISTRY"]
            cls = entry.function
            if entry.op is None and entry.custom_op is None and identifier_path(cls.__qualname__):
                self.imports.setdefault(cls.__module__, []).append(cls.__qualname__.split(".")[0])
                self.call = f"{cls.__qualname__}.apply"
            else:
                self.call = "ENTRY.call"
            self.setup = [f"ENTRY = REGISTRY.get({literal(entry.name)})"]
            device = literal(str(options.device))
            self.draw = f"ENTRY.make_samples({{seed}}, {dtype}, {device})[{k}].args"
            self.what = f"sample {k} of {entry.name}"
            return
        if getattr(target, "recorded", False):
            self._recorded(entry, options, k, dtype, target, where)
            return
        if not getattr(entry.samples, "user_seeded", False):
            raise NotMinimal("samples without a seed parameter (the suite varies their values)")
        if str(options.device) != "cpu":
            raise NotMinimal(f"device {options.device}")
        function = target.load_function()
        resolved = getattr(target, "resolved", lambda spec: spec)  # relative to base_dir
        holder = self._name(resolved(target.target), where)
        self.call = f"{holder}.apply" if isinstance(function, type) else holder
        samples = (
            self._name(resolved(target.samples), where) if target.samples else f"{holder}.samples"
        )
        raw = target.load_samples(function)
        drawn = raw(sample_seed(options.seed, entry.name, "slice", ()))
        first = list(drawn)[k]
        many = hasattr(first, "args") or isinstance(first, (tuple, list))
        # a generator (``yield``) or other iterable is indexed as a list, as the suite reads it
        listed = (
            f"{samples}({{seed}})"
            if isinstance(drawn, (list, tuple))
            else f"list({samples}({{seed}}))"
        )
        item = f"{listed}[{k}]" + (".args" if hasattr(first, "args") else "")
        if options.dtype is not None:  # the run's dtype, as the suite casts the samples
            cast = f"a.to({dtype}) if torch.is_tensor(a) and a.is_floating_point() else a"
            item = f"tuple({cast} for a in {item if many else f'({item},)'})"
        elif not hasattr(first, "args"):
            item = f"tuple({item})" if many else f"({item},)"
        self.draw = item
        self.what = f"sample {k} of {samples}"

    def _recorded(
        self, entry: Entry, options: Options, k: int, dtype: str, target: Any, where: str
    ) -> None:
        """A recorded Function: its class imported (or rebuilt by its factory), its call
        read from the recording by the suite's own sample building, as the check read it."""
        if str(options.device) != "cpu":
            raise NotMinimal(f"device {options.device}")
        here = os.path.abspath(where)
        rel = lambda p: os.path.relpath(os.path.abspath(p), here).replace(os.sep, "/")  # noqa: E731
        self.paths.append(rel(os.getcwd()))  # the project, as `afdb check --recorded` ran in it
        module, _, qual = entry.name.partition(":")
        rebuild = getattr(target, "rebuild", None)
        decls = tuple(getattr(target, "declarations", ()))
        here_expr = "os.path.dirname(os.path.abspath(__file__))"
        self.setup = [
            f"RECORDING = os.path.join({here_expr}, {literal(rel(target.directory))})",
        ]
        if rebuild is not None:
            spec, kwargs = rebuild
            self.imports["harness.sources.rebuild"] = ["rebuild"]
            # the class's own name (a class made per call is recorded as ``Name[what it holds]``)
            name = qual.partition("[")[0].rpartition(".")[2]
            self.setup += [
                f"{name} = rebuild({literal(spec)}, {literal(kwargs)}, "
                f"{literal(qual)})  # made by its factory, as the program made it",
            ]
            holder, cls_arg = name, name
        else:
            if not (identifier_path(module) and identifier_path(qual)):
                raise NotMinimal(f"the name {entry.name!r}")
            self.imports.setdefault(module, []).append(qual.split(".")[0])
            holder, cls_arg = qual, "None"
        self.imports.setdefault("harness.recorded.repro_call", []).append("recorded_entry")
        self.setup += [
            f"ENTRY = recorded_entry(RECORDING, {literal(entry.name)}, {literal(decls)}, "
            f"{cls_arg})  # the recorded calls, read as the check read them",
        ]
        self.call = f"{holder}.apply"
        self.draw = f"ENTRY.make_samples({{seed}}, {dtype}, 'cpu')[{k}].args"
        self.what = f"recorded call {k} of {entry.name}"

    def _name(self, spec: str, where: str) -> str:
        """Import what ``spec`` names; returns the expression the script refers to it by."""
        module, _, attr = spec.rpartition(":")
        if not identifier_path(attr):
            raise NotMinimal(f"the name {attr!r}")
        if module.endswith(".py") or "/" in module or os.sep in module:
            folder = os.path.dirname(os.path.abspath(module))
            module = os.path.splitext(os.path.basename(module))[0]
            if not module.isidentifier():
                raise NotMinimal(f"the file name {module!r} (not a module name)")
            if folder != os.path.abspath(where):
                rel = os.path.relpath(folder, where).replace(os.sep, "/")
                if rel not in self.paths:
                    self.paths.append(rel)
        elif not identifier_path(module):
            raise NotMinimal(f"the module {module!r}")
        names = self.imports.setdefault(module, [])
        if attr.split(".")[0] not in names:
            names.append(attr.split(".")[0])
        return attr

    def header(self, doc: str) -> list[str]:
        lines = [literal(doc) if '"""' in doc or "\\" in doc else f'"""{doc}"""']
        imports = [f"from {m} import {', '.join(names)}" for m, names in self.imports.items()]
        lines += ["import os", "import sys", "import traceback", "", *OWN_FAILURE, "import torch"]
        if self.paths:
            here = "os.path.dirname(os.path.abspath(__file__))"
            lines += [f"sys.path.insert(0, os.path.join({here}, {literal(p)}))" for p in self.paths]
        lines += [f"{line}  # noqa: E402" for line in imports]
        return [*lines, "", *self.setup]


#: A script's own failure (a sample that cannot be drawn, a reference that raises, an import
#: that fails) is no reproduction: its traceback and exit 2; exit 1 means reproduced.
OWN_FAILURE = [
    "# exit 1: reproduced; 0: not; 2: this script itself failed (its traceback above)",
    "sys.excepthook = lambda *e: (sys.stdout.flush(), traceback.print_exception(*e), "
    "sys.stderr.flush(), os._exit(2))",
]


def slice_lines(options: Options, entry: Entry, src: ScriptSource, lv: Any, n: int) -> list[str]:
    """``per_slice`` (each slice's call arguments) and ``batched`` (them stacked)."""
    seeds = [sample_seed(options.seed, entry.name, "slice", (b,) if b else ()) for b in
             range(lv.batch_size)]  # fmt: skip
    return [
        f"slices = [{src.draw.format(seed='seed')} for seed in {literal(seeds)}]  # the suite's",
        f"in_dims = {literal(tuple(lv.in_dims[:n]))}  # an unbatched argument: the first slice's",
        "per_slice = [[s[i] if d is not None else slices[0][i] for i, d in enumerate(in_dims)] "
        "for s in slices]",
        "batched = [torch.stack([a[i] for a in per_slice], d) if d is not None else "
        "per_slice[0][i] for i, d in enumerate(in_dims)]",
    ]
