"""A user's ``module:Class`` target (``afdb check``) as plain data, and its entry.

``TargetSpec`` is what the command line named: the Function, its samples and the
capabilities it declared; ``make_entry`` imports them (``harness.sources.imports``) and
builds the Entry (``harness.sources.entries``). Reports keep the spec as a dict so a
reproducer names the same target again.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.core.errors import UsageError
from harness.sources.imports import is_path, load_attr, split_spec

CAPABILITY_FLAGS = (
    "inplace_args",
    "nondiff_outputs",
    "nondiff_args",
    "randomness",
    "double_backward",
    "dtypes",
)


@dataclass(frozen=True)
class TargetSpec:
    """A user's Function as plain data: where it lives and what the command line declared."""

    target: str
    samples: str | None = None
    gradient: str = "derivative"
    capabilities: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    #: Batch sizes the user fixed on the command line (so a reproducer fixes them too).
    batch_size: str | None = None
    nested_batch_sizes: str | None = None
    #: The directory relative file paths were given from (reports are read elsewhere).
    base_dir: str | None = None

    def resolved(self, spec: str) -> str:
        """``spec`` with a relative file path made relative to ``base_dir`` when the working
        directory moved (a report read elsewhere); else as it is."""
        module, _, attr = spec.rpartition(":")
        relative = bool(self.base_dir) and is_path(module) and not os.path.isabs(module)
        if relative and not os.path.exists(module):
            moved = os.path.join(self.base_dir or "", module)
            if os.path.exists(moved):
                return f"{moved}:{attr}"
        return spec

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["capabilities"] = {
            k: list(v) if isinstance(v, tuple) else v for k, v in self.capabilities.items()
        }
        if "dtypes" in d["capabilities"]:  # names, not torch.dtype objects (JSON)
            dts = d["capabilities"]["dtypes"]
            dts = dts if isinstance(dts, list) else [dts]
            d["capabilities"]["dtypes"] = [str(t).replace("torch.", "") for t in dts]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TargetSpec:
        caps = {
            k: tuple(v) if isinstance(v, list) else v
            for k, v in (d.get("capabilities") or {}).items()
        }
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and k != "capabilities"}
        return cls(capabilities=caps, **kw)

    def __str__(self) -> str:
        return self.target

    def cli_args(self) -> list[str]:
        """The command-line arguments that name this target again (for repro commands)."""
        args = [self.target]
        if self.samples:
            args += ["--samples", self.samples]
        for i in self.capabilities.get("inplace_args", ()):
            args += ["--inplace-arg", str(i)]
        for i in self.capabilities.get("nondiff_outputs", ()):
            args += ["--nondiff-output", str(i)]
        if self.capabilities.get("nondiff_args"):
            args += ["--nondiff-args", ",".join(str(i) for i in self.capabilities["nondiff_args"])]
        if self.capabilities.get("randomness"):
            args.append("--randomness")
        if self.capabilities.get("double_backward") is False:
            args.append("--no-double-backward")
        if self.capabilities.get("dtypes"):
            args += ["--dtypes", ",".join(map(str, self.capabilities["dtypes"]))]
        if self.gradient != "derivative":
            args += ["--gradient", self.gradient]
        if self.name:
            args += ["--name", self.name]
        if self.batch_size:
            args += ["--batch-size", self.batch_size]
        if self.nested_batch_sizes:
            args += ["--nested-batch-sizes", self.nested_batch_sizes]
        return args

    def load_function(self) -> Any:
        from harness.sources.entries import custom_op_of, function_class

        obj = load_attr(self.resolved(self.target), "TARGET")
        if custom_op_of(obj) is not None:
            return obj
        try:
            function_class(obj)
        except UsageError:
            raise UsageError(
                f"TARGET {self.target}: {type(obj).__name__} {getattr(obj, '__name__', obj)!r} "
                "is not a torch.autograd.Function subclass or a torch.library custom op; name "
                "the class, a callable with an `autograd_function` attribute, or a custom op "
                "(a @torch.library.custom_op function, or torch.ops.NS.NAME)"
            ) from None
        return obj

    def load_samples(self, function: Any) -> Any:
        if self.samples:
            samples = load_attr(self.resolved(self.samples), "--samples")
            if not callable(samples) and not isinstance(samples, (list, tuple)):
                raise UsageError(
                    f"--samples {self.samples}: a {type(samples).__name__} is not callable; name "
                    "a function returning argument tuples or Sample objects"
                )
            return samples
        from harness.sources.entries import samples_attribute

        samples = samples_attribute(function)
        if samples is not None:
            return samples
        module, attr = split_spec(self.target, "TARGET")
        raise UsageError(
            f"TARGET {self.target} has no samples (looked for {attr}.samples and a "
            f"module-level `samples` in {module}); pass --samples {module}:NAME naming a "
            "function that returns argument tuples (e.g. [(torch.randn(4, 5),)])"
        )

    def make_entry(self) -> Any:
        from harness.sources.entries import make_entry

        function = self.load_function()
        samples = self.load_samples(function)
        return make_entry(
            function, samples, name=self.name, gradient=self.gradient, **self.capabilities
        )


class TargetSource:
    """A user's target as a source: one entry, its samples validated (each calls the
    Function once with no transform; a sample that cannot is one ``UsageError``) and batch
    sizes chosen around them unless the command line fixed them."""

    name = "target"

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        self._entries: list[Any] | None = None

    def entries(self) -> list[Any]:
        if self._entries is None:
            self._entries = [self.spec.make_entry()]
        return self._entries

    def expectations(self) -> None:
        """A user's target has no committed known failures (they name their own file)."""
        return None

    def options(self, entries: Sequence[Any], options: Any) -> Any:
        from harness.sources.batch_sizes import fitted_options
        from harness.sources.user_samples import base_samples

        (entry,) = entries
        base_samples(entry, options)  # a samples callable that raises or returns nothing: exit 2
        return fitted_options(
            entry,
            options,
            fixed_single=bool(self.spec.batch_size),
            fixed_nested=bool(self.spec.nested_batch_sizes),
            spec=self.spec,
        )
