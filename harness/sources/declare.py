"""Declarations: what a recorded Function's class cannot say, one line per Function.

``mylib.ops:RoundSTE gradient=custom nondiff-args=1`` names a Function by its recorded
target and sets the keywords ``afdb check`` takes as flags for one Function;
``claims=double_backward`` (or ``vmap``, ``jvp``, comma-separated) holds the Function to a
transform it promises, so that a raise under it fails instead of being ``unsupported``;
``perturb-args=1`` (recorded Functions only) lets the batch slices vary argument 1 although
no recorded call differentiated it (``harness.sources.recorded_samples``);
``jvp=true-derivative`` (with ``gradient=custom``) says the jvp is the true derivative while the
backward follows the custom rule, so forward and reverse mode differ by design. The same lines
come from ``afdb check --recorded --declare LINE`` (repeatable) and from the
``afdb_declare`` ini option of ``pytest --afdb``. A wrong line is one ``UsageError``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.core.errors import UsageError

#: key -> what it sets (documented in docs/recording.md).
KEYS = (
    "gradient",
    "nondiff-args",
    "nondiff-outputs",
    "inplace-args",
    "no-double-backward",
    "randomness",
    "dtypes",
    "perturb-args",
    "jvp",
    "claims",
)
#: What ``claims=`` may name: transforms the Function promises, so that torch refusing one
#: is its failure, not ``unsupported`` (``harness.engine.refusals``).
CLAIMABLE = ("double_backward", "vmap", "jvp")
_FLAGS = {"no-double-backward": ("double_backward", False), "randomness": ("randomness", True)}
_POSITIONS = {
    "nondiff-args": "nondiff_args",
    "nondiff-outputs": "nondiff_outputs",
    "inplace-args": "inplace_args",
    "perturb-args": "perturb_args",
}


@dataclass(frozen=True)
class Declaration:
    """The gradient mode and capabilities declared for one recorded target."""

    target: str
    gradient: str = "derivative"
    capabilities: dict[str, Any] = field(default_factory=dict)
    text: str = ""


def _positions(line: str, key: str, value: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(v) for v in value.split(",") if v.strip()}))
    except ValueError:
        values = ()
    if not values or any(v < 0 for v in values):
        raise UsageError(
            f"declaration {line!r}: {key}={value!r} is not a list of argument positions; "
            f"write {key}=1 or {key}=1,2"
        )
    return values


def parse_declaration(line: str) -> Declaration:
    """One ``TARGET key=value ...`` line; UsageError naming the line and the wrong word."""
    words = line.split()
    if not words or ":" not in words[0] or "=" in words[0]:
        raise UsageError(
            f"declaration {line!r}: start with the Function's recorded target "
            "(module:QualName, as the report names it), e.g. 'mylib.ops:RoundSTE gradient=custom'"
        )
    gradient = "derivative"
    caps: dict[str, Any] = {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if key not in KEYS:
            raise UsageError(f"declaration {line!r}: unknown key {key!r}; known: {', '.join(KEYS)}")
        if key in _FLAGS:
            if eq:
                raise UsageError(f"declaration {line!r}: {key} takes no value; write {key}")
            name, flag = _FLAGS[key]
            caps[name] = flag
        elif not eq or not value:
            raise UsageError(f"declaration {line!r}: {key} needs a value ({key}=...)")
        elif key == "gradient":
            if value not in ("derivative", "custom"):
                raise UsageError(
                    f"declaration {line!r}: gradient={value!r}; use gradient=custom (a backward "
                    "that is deliberately not the derivative) or gradient=derivative"
                )
            gradient = value
        elif key == "jvp":
            if value != "true-derivative":
                raise UsageError(
                    f"declaration {line!r}: jvp={value!r}; the one value is jvp=true-derivative "
                    "(with gradient=custom: the jvp is the true derivative, the backward is not)"
                )
            caps["jvp_true_derivative"] = True
        elif key == "dtypes":
            from harness.core.options import DTYPES

            names = tuple(v.strip() for v in value.split(",") if v.strip())
            unknown = [n for n in names if n not in DTYPES]
            if unknown or not names:
                raise UsageError(
                    f"declaration {line!r}: dtypes={value!r}; use names among {', '.join(DTYPES)}"
                )
            caps["dtypes"] = names
        elif key == "claims":
            claimed = tuple(v.strip() for v in value.split(",") if v.strip())
            unknown = [c for c in claimed if c not in CLAIMABLE]
            if unknown or not claimed:
                raise UsageError(
                    f"declaration {line!r}: claims={value!r}; name transforms among "
                    f"{', '.join(CLAIMABLE)} (claims=double_backward or claims=vmap,jvp)"
                )
            caps["claims"] = claimed
        else:
            caps[_POSITIONS[key]] = _positions(line, key, value)
    return Declaration(words[0], gradient, caps, " ".join(words))


def parse_declarations(lines: Iterable[str]) -> dict[str, Declaration]:
    """Declarations by target (blank lines and ``#`` comments skipped); a target declared
    twice is refused, so no line silently overrides another."""
    out: dict[str, Declaration] = {}
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        d = parse_declaration(line)
        if d.target in out:
            raise UsageError(
                f"declaration {line!r}: {d.target} is declared twice; put every key on one line"
            )
        out[d.target] = d
    return out
