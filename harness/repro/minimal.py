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
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from autograd_function_db.entry import Entry
from harness.checks import finite_diff as fd
from harness.checks.autodiff_refs import eager_outputs
from harness.core.options import Options, sample_dtype
from harness.core.repro_scope import COMPOSITES, MINIMAL_CHECKS, VMAP_FAMILY
from harness.engine.cases import Case, EntryData
from harness.plans.plan import MID, resolve_out_dim
from harness.plans.slices import derive_seed, sample_seed
from harness.repro.literal import literal
from harness.repro.subcheck import SubCheck

#: With ``gradient="custom"`` the suite accepts some results against either of two
#: references; the short form covers the checks with one reference.
CUSTOM_OK = (*VMAP_FAMILY, "vjp", *COMPOSITES)


class NotMinimal(Exception):
    """The case needs the full script (the message says why, in a few words)."""


def _identifier_path(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).replace("torch.", "")
    if not isinstance(getattr(torch, name, None), torch.dtype):
        raise NotMinimal(f"dtype {dtype}")
    return name


# --- what the script imports and how it draws the sample -----------------------------------


class _Source:
    """The import lines, the Function's call and the expression drawing the sample."""

    def __init__(self, entry: Entry, options: Options, case: Case, target: Any, where: str):
        #: The names the script imports from each module, in order.
        self.imports: dict[str, list[str]] = {}
        self.paths: list[str] = []
        self.setup: list[str] = []
        k = case.sample_index or 0  # _Facts refused a case of no one sample
        dtype = "None" if options.dtype is None else f"torch.{_dtype_name(options.dtype)}"
        if target is None:  # a database entry: its Function, its samples from the registry
            self.imports["autograd_function_db"] = ["REGISTRY"]
            cls = entry.function
            if entry.op is None and entry.custom_op is None and _identifier_path(cls.__qualname__):
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
        resolved = getattr(target, "_resolved", lambda spec: spec)  # relative to base_dir
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
            self.imports["harness.recorded.rebuild"] = ["rebuild"]
            # the class's own name (a class made per call is recorded as ``Name[what it holds]``)
            name = qual.partition("[")[0].rpartition(".")[2]
            self.setup += [
                f"{name} = rebuild({literal(spec)}, {literal(kwargs)}, "
                f"{literal(qual)})  # made by its factory, as the program made it",
            ]
            holder, cls_arg = name, name
        else:
            if not (_identifier_path(module) and _identifier_path(qual)):
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
        if not _identifier_path(attr):
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
        elif not _identifier_path(module):
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


#: ``eager_jvp(fn, xs, ts)``: the primals then the tangents of ``fn``'s outputs, by eager
#: forward-mode AD (the reference of the composites with jvp, and the eager_jvp check's call).
EAGER_JVP = [
    "",
    "def eager_jvp(fn, xs, ts):  # eager forward-mode AD, primals then tangents",
    "    with fwAD.dual_level():",
    "        out = [fwAD.unpack_dual(o) for o in fn(*[fwAD.make_dual(x, t) for x, t in "
    "zip(xs, ts)])]",
    "        return tuple(o.primal for o in out) + tuple(o.tangent for o in out)",
    "",
]


#: A script's own failure (a sample that cannot be drawn, a reference that raises, an import
#: that fails) is no reproduction: its traceback and exit 2; exit 1 means reproduced.
OWN_FAILURE = [
    "# exit 1: reproduced; 0: not; 2: this script itself failed (its traceback above)",
    "sys.excepthook = lambda *e: (sys.stdout.flush(), traceback.print_exception(*e), "
    "sys.stderr.flush(), os._exit(2))",
]


# --- what the generator learns from the sample and one call of the Function -----------------


class _Facts:
    def __init__(self, entry: Entry, options: Options, case: Case) -> None:
        if case.sample_index is None:
            raise NotMinimal("a case of no one sample")
        if entry.caps.randomness:
            raise NotMinimal("a Function that uses randomness")
        if entry.caps.inplace_args:
            raise NotMinimal("arguments modified in place")
        self.args = EntryData(entry, options).slices(case.sample_index).args(())
        for a in self.args:
            if isinstance(a, (tuple, list, dict)):
                raise NotMinimal("container arguments (tuples, lists, dicts of tensors)")
            if isinstance(a, torch.Tensor) and a.is_complex():
                raise NotMinimal("complex arguments")
        dtype = options.dtype or sample_dtype(self.args) or torch.float64
        self.rtol, self.atol = entry.tolerances.for_dtype(dtype)
        self.dtype = _dtype_name(dtype)
        self.diff = tuple(i for i, a in enumerate(self.args) if fd.is_differentiable_dtype(a))
        probe = entry.call(*[a.clone() if isinstance(a, torch.Tensor) else a for a in self.args])
        self.single = isinstance(probe, torch.Tensor)
        if not self.single and not (
            isinstance(probe, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in probe)
        ):
            raise NotMinimal("outputs other than a tensor or a tuple of tensors")

        def flat(*a: Any) -> tuple[Any, ...]:
            out = entry.call(*a)
            return (out,) if isinstance(out, torch.Tensor) else tuple(out)

        outputs, marked = eager_outputs(flat, self.args, self.diff)
        if any(o.is_complex() for o in outputs):
            raise NotMinimal("complex outputs")
        self.outputs = outputs
        self.outs = tuple(
            j
            for j, o in enumerate(outputs)
            if fd.is_differentiable_dtype(o) and j not in entry.caps.nondiff_outputs
            and j not in marked
        )  # fmt: skip

    def level(self, case: Case) -> Any:
        if case.plan is None or len(case.plan.levels) != 1:
            raise NotMinimal("nested vmap levels")
        return case.plan.levels[0]

    def out_dims(self, lv: Any) -> list[int]:
        """The level's out_dims per output ("mid": the interior position of each)."""
        return [
            resolve_out_dim(MID, o.dim()) if lv.out_dims == MID else lv.out_dims
            for o in self.outputs
        ]


def _h(
    entry: Entry,
    primals: Sequence[torch.Tensor],
    tangents: Sequence[torch.Tensor],
    outs64: Sequence[Any],
) -> float:
    """The step ``harness.checks.finite_diff.directional`` takes for these tangents."""
    scale = max(1.0, max((float(x.abs().max()) for x in primals if x.numel()), default=0.0))
    tmax = max((float(t.abs().max()) for t in tangents if t.numel()), default=1.0) or 1.0
    return fd.base_step(outs64, entry.tolerances.fd_step) * scale / tmax


def _randn_like(seed: int, likes: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in likes]


# --- the scripts ----------------------------------------------------------------------------


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
    facts = _Facts(entry, options, case)
    sub = SubCheck(sub_check) if sub_check else None
    if sub is not None:
        if check not in ("vjp", "jvp", "eager_vjp", "eager_jvp"):
            raise NotMinimal(f"the sub-checks of {check}")
        sub.restrict(facts)
    src = _Source(entry, options, case, target, script_dir or os.getcwd())
    full = f"{command or 'afdb repro ' + case.id} --full"
    doc = (
        f"afdb case {case.id}: a minimal repro. Exit status 1: it reproduced; 0: it did not.\n"
        f"The self-checking script: `{full}`."
    )
    call = f"({src.call}(*a),)" if facts.single else f"tuple({src.call}(*a))"
    lines = [
        *src.header(doc),
        f"RTOL, ATOL = {facts.rtol!r}, {facts.atol!r}  # the suite's tolerances at {facts.dtype}",
        f"call = lambda *a: {call}  # noqa: E731 (the Function's outputs, a tuple)",
    ]
    if check in VMAP_FAMILY:
        body, transform = _vmap(entry, options, facts, src, facts.level(case)), "torch.func.vmap"
    else:
        if not facts.diff or not facts.outs:
            raise NotMinimal("nothing differentiable")
        diff = _Diff(facts)
        if check in COMPOSITES:
            from harness.repro.minimal_composite import composite_body

            body, transform = composite_body(entry, options, case, facts, src, diff)
        else:
            body, transform = _autodiff(entry, options, case, facts, src, diff, sub)
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
    return "\n".join([*lines, *_raising_reproduces(body, transform), *tail]) + "\n"


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


def _slices(options: Options, entry: Entry, src: _Source, lv: Any, n: int) -> list[str]:
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


def _vmap(entry: Entry, options: Options, facts: _Facts, src: _Source, lv: Any) -> list[str]:
    dims = facts.out_dims(lv)
    out_dims = dims[0] if lv.out_dims != MID else tuple(dims)
    chunk = f", chunk_size={lv.chunk_size}" if lv.chunk_size else ""
    return [
        *_slices(options, entry, src, lv, len(facts.args)),
        f"actual = torch.func.vmap(call, in_dims=in_dims, out_dims={out_dims!r}{chunk})(*batched)",
        "loop = [call(*a) for a in per_slice]  # the reference: one call per slice, stacked",
        f"expected = [torch.stack([p[k] for p in loop], d) for k, d in enumerate({dims!r})]",
    ]


class _Diff:
    """How a script names the Function of its differentiable arguments: ``call`` itself when
    every argument and output is differentiable, else ``f`` (the others fixed to ``base``)."""

    def __init__(self, facts: _Facts) -> None:
        self.diff, self.outs = facts.diff, facts.outs
        self.simple = self.diff == tuple(range(len(facts.args))) and self.outs == tuple(
            range(len(facts.outputs))
        )

    def defs(self, base: str = "") -> list[str]:
        """DIFF, OUTS and ``f`` (``base``: the default of its fixed arguments)."""
        if self.simple:
            return []
        self.base = base
        return [
            f"DIFF, OUTS = {self.diff!r}, {self.outs!r}  # the differentiable arguments, outputs",
            "",
            f"def f(*xs, base{'=' + base if base else ''}, fn=call):  # fn of the arguments at "
            "DIFF (the others from base)",
            "    a = [xs[DIFF.index(i)] if i in DIFF else v for i, v in enumerate(base)]",
            "    return tuple(fn(*a)[j] for j in OUTS)",
            "",
        ]

    base = ""

    def of(self, base: str, fn: str = "call") -> str:
        """A callable of the differentiable arguments, the others from ``base``."""
        if self.simple:
            return fn
        if base == self.base and fn == "call":
            return "f"
        return f"lambda *x: f(*x, base={base}{'' if fn == 'call' else ', fn=' + fn})"

    def apply(self, base: str, args: str) -> str:
        """The call of that callable on the list ``args``."""
        return f"call(*{args})" if self.simple else f"f(*{args}, base={base})"

    def pick(self, args: str) -> str:
        """The differentiable ones of the arguments ``args``."""
        if self.simple:
            return args if args.endswith("]") else f"list({args})"
        return f"[{args}[i] for i in DIFF]"


def _fd(h: float, diff: _Diff) -> list[str]:
    """``fd(ts)``: ``J t`` as ``harness.checks.finite_diff.directional`` computes it (float64
    central differences, one Richardson step, its step for these tangents)."""
    g = "call(*" if diff.simple else "f(*"
    end = ")" if diff.simple else ", base=a64)"
    plus = f"{g}[x + h * t.double() for x, t in zip(x64, ts)]{end}"
    minus = f"{g}[x - h * t.double() for x, t in zip(x64, ts)]{end}"
    return [
        "",
        f"def fd(ts, h={h!r}):  # J t: central differences in float64, the suite's step",
        f"    d = lambda h: [(p - m) / (2 * h) for p, m in zip({plus}, {minus})]  # noqa: E731",
        "    return [(4 * u - v) / 3 for u, v in zip(d(h / 2), d(h))]",
        "",
    ]


def _draw(seed: int, what: str, likes: str) -> list[str]:
    return [
        f"gen = torch.Generator().manual_seed({seed})  # the suite's {what}",
        f"{what[0]}s = [torch.randn(v.shape, generator=gen, dtype=torch.float64).to(v.dtype) "
        f"for v in {likes}]",
    ]


def _autodiff(
    entry: Entry,
    options: Options,
    case: Case,
    facts: _Facts,
    src: _Source,
    diff: _Diff,
    sub: SubCheck | None = None,
) -> tuple[list[str], str]:
    check = case.check
    seed = sample_seed(options.seed, entry.name, "slice", ())
    a64 = [fd.upcast(a) for a in facts.args]
    x64 = [a64[i] for i in facts.diff]
    outs64 = [o for j, o in enumerate(_flat(entry, *a64)) if j in facts.outs]
    xs = [facts.args[i] for i in facts.diff]
    lines = [f"args = {src.draw.format(seed=seed)}  # {src.what}, as the suite draws it"]
    if diff.simple:
        lines += ["xs, x64 = list(args), [x.double() for x in args]  # float64: for the reference"]
    else:
        lines += [
            "a64 = [a.double() if torch.is_tensor(a) and a.is_floating_point() else a for a in "
            "args]",
            *diff.defs("args"),
            "xs, x64 = [args[i] for i in DIFF], [a64[i] for i in DIFF]",
        ]
    if sub is not None:
        lines.append(f"# the sub-check the case failed: {sub.text}")
    strided = sub is not None and sub.strided
    if strided:  # the suite's non-contiguous layout: the same values at stride 2
        lines += [
            "strided = lambda v: torch.stack([v, torch.zeros_like(v)], -1).select(-1, 0)  # noqa: E731",
            "xs = [strided(x) for x in xs]",
        ]

    def draw(seed: int, what: str, likes: str) -> list[str]:
        out = _draw(seed, what, likes)
        return out + [f"{what[0]}s = [strided(v) for v in {what[0]}s]"] if strided else out

    seeds = {name: derive_seed(options.seed, case.id, name) for name in ("tangents", "cotangents")}
    fx = diff.of("args")
    h = _h(entry, x64, _randn_like(seeds["tangents"], xs), outs64)
    if check == "jvp":
        return [
            *lines,
            *_fd(h, diff),
            *draw(seeds["tangents"], "tangents", "xs"),
            f"actual = torch.func.jvp({fx}, tuple(xs), tuple(ts))[1]",
            "expected = fd(ts)",
        ], "torch.func.jvp"
    if check == "eager_jvp":  # a Function torch.func cannot differentiate: eager forward AD
        return [
            *lines,
            *_fd(h, diff),
            *EAGER_JVP,
            *draw(seeds["tangents"], "tangents", "xs"),
            f"actual = eager_jvp({fx}, xs, ts)[{len(facts.outs)}:]  # the tangents of the outputs",
            "expected = fd(ts)",
        ], "eager forward-mode AD (the Function's jvp)"
    cotangents = draw(seeds["cotangents"], "cotangents", f"{fx}(*xs)")
    names = f"NAMES = [f'grad of input {{i}}' for i in {facts.diff!r}]  # as the suite names them"
    if check == "vjp" and entry.gradient == "custom":
        return [
            *lines,
            *cotangents,
            f"actual = torch.func.vjp({fx}, *xs)[1](tuple(cs))",
            "leaves = [x.detach().requires_grad_() for x in xs]  # the reference: eager backward",
            f"expected = torch.autograd.grad({fx}(*leaves), leaves, cs, allow_unused=True, "
            "materialize_grads=True)",
            names,
            "ATOLS = [ATOL] * len(xs)",
        ], "torch.func.vjp"
    if check in ("vjp", "eager_vjp"):  # <vjp(cs)_i, t_i> against <cs, J_i t_i>, input by input
        # a Function torch.func cannot differentiate, or a sub-check only autograd.grad failed
        eager = check == "eager_vjp" or (sub is not None and sub.eager)
        grads = (
            f"grads = torch.autograd.grad({fx}(*leaves), leaves, cs, allow_unused=True, "
            "materialize_grads=True)"
            if eager
            else f"grads = torch.func.vjp({fx}, *xs)[1](tuple(cs))"
        )
        leaves = ["leaves = [x.detach().requires_grad_() for x in xs]"] if eager else []
        return [
            *lines,
            *_fd(h, diff),
            *draw(seeds["tangents"], "tangents", "xs"),
            *cotangents,
            *leaves,
            grads,
            "alone = lambda i: [t if k == i else 0 * t for k, t in enumerate(ts)]  # noqa: E731",
            "actual = [(g.double() * t.double()).sum() for g, t in zip(grads, ts)]  # <grad_i, t_i>",
            "expected = [sum((c.double() * j).sum() for c, j in zip(cs, fd(alone(i)))) for i in "
            "range(len(ts))]  # <c, J_i t_i>",
            names,
            "ATOLS = [ATOL * float(t.abs().sum()) for t in ts]  # a sum of products: its tolerance",
        ], "<torch.autograd.grad(cotangents), tangents> (the eager backward)" if eager else (
            "<torch.func.vjp(cotangents), tangents>"
        )
    jac = f"torch.func.{check}"
    return [
        *lines,
        *_fd(h, diff),
        *draw(seeds["tangents"], "tangents", "xs"),
        f"jac = {jac}({fx}, argnums=tuple(range(len(xs))))(*xs)  # [output][input]",
        "actual = [sum(j.reshape(o.numel(), -1) @ t.reshape(-1) for j, t in zip(row, ts))"
        f".reshape(o.shape) for row, o in zip(jac, {fx}(*xs))]  # J t",
        "expected = fd(ts)",
    ], f"{jac} times the tangents"


def _flat(entry: Entry, *a: Any) -> tuple[Any, ...]:
    with torch.no_grad():
        out = entry.call(*a)
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)
