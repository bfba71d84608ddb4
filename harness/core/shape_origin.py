"""Where a vmap rule built the operands numpy could not broadcast.

numpy's "operands could not be broadcast together with shapes (2,) (2,4)" is raised in
the Function's forward, after the rule handed its batched tensors to ``apply``: the frame
in the rule is the ``apply`` call, while the mistake is the line that moved (or failed to
pad) a batch dim. The rule's frame is still held by the exception's traceback, so its
local tensors are read (never called, never printed beyond their shapes): each local whose
shape is one of the shapes numpy names is traced to the last assignment to it before the
failing line, read from the rule's source with ``ast``. Nothing is found (and nothing is
said) when the rule's source cannot be read, or no local has those shapes (the forward
reshaped them first).

The added text is the same bug told at one plan: which locals match numpy's shapes differs
from plan to plan (a nested plan's outer rule holds other shapes), so the root-cause
grouping takes it out of its key (``without_rule_lines``) and one bug stays one group.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from types import FrameType, TracebackType

#: numpy's words; each shape follows as ``(2,4)`` or ``(2,)``, with ``()`` for a scalar.
_NUMPY_BROADCAST = re.compile(r"operands could not be broadcast together with (?:remapped )?shapes")
_SHAPE = re.compile(r"\(([\d,\s]*)\)")
#: The user's staticmethod whose frame is searched.
RULE = "vmap"
#: How ``built_at``'s text begins, and the advice it ends with when a batch dim met a data dim.
BUILT = "the rule built "
PAD_ADVICE = (
    " -- numpy lines up trailing dims, so the batch dim at the front of the operand "
    "with fewer dims meets another dim: pad it with size-1 dims after its batch dim"
)
#: One ``name (shape (2, 4)) at file:line: `statement``` of ``built_at`` (no backtick in
#: the statement: ``built_at`` writes its backticks as quotes).
_PART = r"\w+ \(shape \([\d, ]*\)\) at [^`]*?: `[^`]*`"
_BUILT_TEXT = re.compile(
    rf"(?:; )?{re.escape(BUILT)}{_PART}(?:; {_PART})*(?:{re.escape(PAD_ADVICE)})?"
)


def broadcast_shapes(message: str) -> list[tuple[int, ...]]:
    """The operand shapes in numpy's broadcast error (an empty list for other messages)."""
    m = _NUMPY_BROADCAST.search(message)
    if not m:
        return []
    shapes = []
    for s in _SHAPE.finditer(message[m.end() :].split("\n", 1)[0]):
        dims = [d for d in s.group(1).replace(" ", "").split(",") if d]
        shapes.append(tuple(int(d) for d in dims))
    return shapes


def _rule_frame(tb: TracebackType | None, internal: object) -> tuple[FrameType, int] | None:
    """The outermost frame of a ``vmap`` staticmethod outside torch and the suite, and its line."""
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == RULE and not internal(code.co_filename):  # type: ignore[operator]
            return tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next
    return None


def _assignments(frame: FrameType) -> dict[str, list[tuple[int, str]]]:
    """Each name assigned in the frame's function: (line, source text of the statement)."""
    try:
        lines, start = inspect.getsourcelines(frame.f_code)
    except (OSError, TypeError):
        return {}
    source = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    text = source.splitlines()
    found: dict[str, list[tuple[int, str]]] = {}
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        names: list[str] = []
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Name):
                    names.append(sub.id)
        if names:
            lineno = int(getattr(node, "lineno", 1))
            statement = text[lineno - 1].strip()
            for name in names:
                found.setdefault(name, []).append((lineno + start - 1, statement))
    return found


def _plain_shape(value: object) -> tuple[int, ...] | None:
    """The shape of a plain torch tensor or numpy array (no subclass: nothing of the user's
    code runs to read it), else None."""
    kind = type(value)
    torch = sys.modules.get("torch")  # a broadcast error under a rule means torch is loaded;
    # never imported here: core.locations (and so the CLI's --help) imports this module
    if torch is not None and (kind is torch.Tensor or kind is torch.nn.Parameter):
        return tuple(torch.Tensor.size(value))  # type: ignore[call-overload]
    if kind.__module__ == "numpy" and kind.__name__ == "ndarray":
        return tuple(value.shape)  # type: ignore[attr-defined]
    return None


def without_rule_lines(message: str) -> str:
    """``message`` without the text ``built_at`` added to it (and the "; " before it)."""
    return _BUILT_TEXT.sub("", message)


def built_at(exc: BaseException, text: str, internal: object, where: object) -> str:
    """``the rule built x (shape (2,)) at f.py:17: `x = ...`; ...`` for numpy's broadcast error
    raised under a vmap rule, else "". ``text`` is the exception's message as the suite
    read it (``textsafe.safe_str``: its ``__str__`` is the Function's and may raise, so it
    is never called here); ``where(filename, line)`` writes a portable location;
    ``internal(filename)`` says whether a file is torch's or the suite's. Nothing is said
    when reading the rule's frame fails: the text only adds to a message already written.
    """
    shapes = broadcast_shapes(text)
    if not shapes:
        return ""
    try:
        return _built_at(exc, shapes, internal, where)
    except Exception:  # noqa: BLE001 (a CaseTimeout or a KeyboardInterrupt goes on)
        return ""


def _built_at(
    exc: BaseException, shapes: list[tuple[int, ...]], internal: object, where: object
) -> str:
    found = _rule_frame(exc.__traceback__, internal)
    if found is None:
        return ""
    frame, failing = found
    assigned = _assignments(frame)
    parts = []
    for name, value in frame.f_locals.items():
        shape = _plain_shape(value)
        if shape is None:
            continue
        if shape not in shapes:
            continue
        lines = [(n, s) for n, s in assigned.get(name, []) if n <= failing]
        if not lines:
            continue
        line, statement = max(lines)
        statement = statement.replace("`", "'")  # the text's own quotes stay unambiguous
        snippet = statement if len(statement) <= 80 else statement[:77] + "..."
        here = where(frame.f_code.co_filename, line)  # type: ignore[operator]
        parts.append((line, f"{name} (shape {shape}) at {here}: `{snippet}`"))
    if not parts:
        return ""
    text = BUILT + "; ".join(p for _, p in sorted(parts))
    ranks = {len(sh) for sh in shapes}
    leading = {sh[0] for sh in shapes if sh}
    if len(ranks) > 1 and len(leading) == 1 and all(shapes):
        text += PAD_ADVICE
    return text
