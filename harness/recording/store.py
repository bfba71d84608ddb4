"""A recording on disk: ``DIR/recording.json`` (schema ``afdb-recording/1``) and one
safetensors file per Function under ``DIR/tensors/``.

Writing is deterministic (no times, no absolute paths, no process ids; Functions sorted
by target, calls by the order they were made, file names from the target), so the same
program recorded twice gives the same bytes. Reading executes nothing: the JSON is
validated against ``harness/schemas/recording.json`` and every tensor against the JSON
and its file, and any problem is one ``UsageError`` line naming the file and the place.
File names in a recording are plain names inside ``DIR/tensors``; a name that could lead
elsewhere (a path) and a link anywhere under DIR are refused. The rules every reader
shares (names, links) are ``rules``'.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import torch

from harness.core.errors import UsageError
from harness.core.locations import portable_path
from harness.core.safe_io import parse_json, read_text
from harness.core.schema import errors, one_line
from harness.recording import live, rules, selection, tensorfile
from harness.recording.data_errors import BadNode
from harness.recording.model import (
    NotKept,
    RecordedCall,
    RecordedFunction,
    Recording,
    SkippedCall,
)
from harness.recording.refs import RefError, packages_of

SCHEMA = "afdb-recording/1"
INDEX = "recording.json"
TENSOR_DIR = "tensors"
#: The largest recording.json read back, and the largest tensor file.
MAX_INDEX = 256 << 20
MAX_TENSOR_FILE = 4 << 30
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,150}\.safetensors")


class RecordingError(UsageError):
    """A recording that cannot be read back as one: damaged, hostile or of another version."""


def file_name(target: str) -> str:
    """The tensor file of ``target``: readable, stable, unique (a hash of the target)."""
    plain = re.sub(r"[^A-Za-z0-9_.-]", "_", target.replace(":", "."))[:80].lstrip(".-")
    digest = hashlib.sha256(target.encode("utf-8")).hexdigest()[:10]
    return f"{plain or 'f'}-{digest}.safetensors"


def _label(out_dir: Path, *parts: str) -> str:
    return "/".join([portable_path(str(out_dir)), *parts])


# --- writing -------------------------------------------------------------------------------


def tensor_nodes(node: Any) -> list[dict[str, Any]]:
    """The tensor nodes of a node tree, in order."""
    out: list[dict[str, Any]] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            if "tensor" in n and len(n) == 1 and isinstance(n["tensor"], dict):
                out.append(n["tensor"])
            else:
                stack.extend(reversed(list(n.values())))
        elif isinstance(n, list):
            stack.extend(reversed(n))
    return out


def call_key(call: dict[str, Any]) -> str:
    """What makes two calls the same call: their nodes without the tensors' names."""
    nodes = copy.deepcopy([call["args"], call["kwargs"]])
    for t in tensor_nodes(nodes):
        t.pop("name", None)
        t.pop("index", None)
    return json.dumps(nodes, separators=(",", ":"), sort_keys=True)


def check_target(out_dir: Path) -> None:
    """Refuse (UsageError) a place a recording must not be written: a file (there or in
    the way of a folder above it), a folder that holds other things than a recording (a
    mistyped ``-o src``, or ``--afdb-record tests/`` meant as the tests to run), a link
    inside the folder. Called before the program or the tests run."""
    shown = portable_path(str(out_dir))
    for above in [out_dir, *out_dir.parents]:
        if os.path.lexists(above) and not above.is_dir():
            where = "" if above == out_dir else f" (in the way of {shown})"
            raise UsageError(
                f"{portable_path(str(above))}: exists and is not a folder{where}; give a folder "
                "for the recording, or remove or rename the file"
            )
    if not out_dir.is_dir():
        return
    if not os.path.lexists(out_dir / INDEX):
        other = sorted(p.name for p in out_dir.iterdir() if p.name not in (".parts", TENSOR_DIR))
        if other:
            raise UsageError(
                f"{shown}: a folder that is not a recording (it holds {other[0]!r}); give a "
                "new or empty folder (with pytest: --afdb-record=DIR, the = is needed)"
            )
    _refuse_links(out_dir)  # a recording is written only inside its folder
    for name, folder in ((INDEX, False), (TENSOR_DIR, True)):
        path = out_dir / name
        if path.exists() and path.is_dir() != folder:
            raise UsageError(
                f"{_label(out_dir, name)}: is {'not ' if folder else ''}a folder; a "
                "recording's own: remove it"
            )


def _refuse_links(out_dir: Path) -> None:
    """RecordingError for the first link under ``out_dir``: a recording is read and written
    only inside its folder, so it holds no link (to a file or a folder) anywhere."""
    try:
        for link in rules.links_under(out_dir):
            raise RecordingError(
                f"{_label(out_dir, *link.relative_to(out_dir).parts)}: is a link; a recording "
                "holds no links (it is read and written only inside its folder): remove it"
            )
    except RefError as e:
        raise RecordingError(f"{portable_path(str(out_dir))}: {e}") from None
    except OSError as e:
        raise RecordingError(
            f"{portable_path(str(out_dir))}: cannot be read ({e.strerror or e})"
        ) from None


def _prepare_dir(out_dir: Path) -> Path:
    check_target(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tdir = out_dir / TENSOR_DIR
    if tdir.is_symlink() or (tdir.exists() and not tdir.is_dir()):
        raise UsageError(
            f"{_label(out_dir, TENSOR_DIR)}: is a link or not a folder; a recording writes only "
            "inside its folder: remove it"
        )
    tdir.mkdir(exist_ok=True)
    return tdir


def _write_file(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)  # a link planted there is removed, never written through
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(tmp, flags, 0o644), "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write(out_dir: Path, doc: dict[str, Any], files: dict[str, dict[str, torch.Tensor]]) -> None:
    """Write ``doc`` (a valid recording document) and its tensor files into ``out_dir``,
    replacing a recording already there (its stale tensor files removed)."""
    tdir = _prepare_dir(out_dir)
    for name, tensors in sorted(files.items()):
        _write_file(tdir / name, tensorfile.encode(tensors))
    for old in tdir.iterdir():
        if _FILE_NAME.fullmatch(old.name) and old.name not in files and old.is_file():
            old.unlink()
    _write_file(out_dir / INDEX, render(doc).encode("ascii"))


def render(doc: dict[str, Any]) -> str:
    """The document as text: indented, with each call and skip reason on one line (a diff
    of two recordings then shows the calls that changed)."""
    lines: dict[str, str] = {}
    outer = copy.copy(doc)
    outer["functions"] = []
    for i, fn in enumerate(doc["functions"]):
        fn = dict(fn)
        for field in ("calls", "skipped"):
            tokens = []
            for j, item in enumerate(fn[field]):
                token = f"\x00{field} {i} {j}"
                lines[json.dumps(token)] = json.dumps(
                    item, ensure_ascii=True, separators=(",", ":")
                )
                tokens.append(token)
            fn[field] = tokens
        outer["functions"].append(fn)
    text = json.dumps(outer, indent=1, ensure_ascii=True)
    if lines:
        text = re.sub(r'"\\u0000[a-z]+ \d+ \d+"', lambda m: lines[m.group(0)], text)
    return text + "\n"


def function_doc(
    target: str,
    kind: str,
    legacy: bool,
    importable: bool,
    *,
    call_count: int,
    under_transform: int,
    nested_in: list[str],
    skipped: list[dict[str, Any]],
    calls: list[tuple[dict[str, Any], list[torch.Tensor]]],
    not_kept: list[dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """One Function's entry of the document and its tensors by name; ``calls`` are
    (call dict with ``where``, ``order``, ``args``, ``kwargs``; the stored tensors in the
    order of its tensor nodes), already in order. Tensor names are ``c<call>.<tensor>``."""
    out_calls = []
    tensors: dict[str, torch.Tensor] = {}
    for i, (call, stored) in enumerate(calls):
        call = copy.deepcopy(call)
        nodes = tensor_nodes([call["args"], call["kwargs"]])
        for j, (node, t) in enumerate(zip(nodes, stored, strict=True)):
            node.pop("index", None)
            node["name"] = f"c{i}.{j}"
            tensors[node["name"]] = t
        out_calls.append(
            {
                "where": call["where"],
                "order": call["order"],
                "args": call["args"],
                "kwargs": call["kwargs"],
            }
        )
    doc = {
        "target": target,
        "kind": kind,
        "legacy": legacy,
        "importable": importable,
        "call_count": call_count,
        "under_transform": under_transform,
        "nested_in": sorted(nested_in),
        "not_kept": list(not_kept or []),
        "skipped": sorted(skipped, key=lambda s: (s["order"], s["reason"])),
        "tensors": file_name(target) if tensors else None,
        "calls": out_calls,
    }
    return doc, tensors


def document(
    program: str, limits: dict[str, int], never_called: list[str], functions: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "program": program,
        "limits": limits,
        "never_called": sorted(never_called),
        "functions": sorted(functions, key=lambda f: f["target"]),
    }


# --- reading -------------------------------------------------------------------------------


def _read_index(out_dir: Path) -> dict[str, Any]:
    label = _label(out_dir, INDEX)
    if not out_dir.is_dir():
        raise RecordingError(
            f"{portable_path(str(out_dir))}: no recording there (not a folder); record one with "
            "`afdb record` or `pytest --afdb-record`"
        )
    _refuse_links(out_dir)
    path = out_dir / INDEX
    if not path.exists():
        raise RecordingError(
            f"{label}: missing; not a recording folder (record one with `afdb record`)"
        )
    try:
        size = path.stat().st_size
    except OSError as e:
        raise RecordingError(f"{label}: cannot read ({e.strerror or e})") from None
    if size > MAX_INDEX:
        raise RecordingError(f"{label}: {size} bytes, over the {MAX_INDEX}-byte limit")
    data = parse_json(read_text(path), label)
    version = data.get("schema") if isinstance(data, dict) else None
    if version != SCHEMA:
        raise RecordingError(
            f'{label}: schema {version!r}, but this afdb reads "{SCHEMA}"; record again with '
            "this afdb"
        )
    found = errors("recording", data)
    if found:
        raise RecordingError(one_line(label, "recording", found))
    result: dict[str, Any] = data
    return result


def _tensor_path(out_dir: Path, name: str, label: str) -> Path:
    """``DIR/tensors/NAME``, refusing a name or a link that leads anywhere else."""
    if not _FILE_NAME.fullmatch(name):
        raise RecordingError(f"{label}: {name!r} is not a tensor file name of a recording")
    tdir = out_dir / TENSOR_DIR
    path = tdir / name
    if os.path.lexists(tdir) and not tdir.is_dir():
        raise RecordingError(
            f"{label}: {_label(out_dir, TENSOR_DIR)} is not a folder; a recording's tensor files "
            "are plain files in its folder tensors"
        )
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise RecordingError(f"{label}: {_label(out_dir, TENSOR_DIR, name)} is missing") from None
    except OSError as e:
        raise RecordingError(
            f"{label}: {_label(out_dir, TENSOR_DIR, name)} cannot be read ({e.strerror or e})"
        ) from None
    if not stat.S_ISREG(mode) or os.path.realpath(path) != os.path.join(
        os.path.realpath(tdir), name
    ):
        raise RecordingError(
            f"{label}: {_label(out_dir, TENSOR_DIR, name)} is a link or not a file; a "
            "recording's tensor files are plain files in its folder"
        )
    return path


def read_raw(out_dir: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, torch.Tensor]]]:
    """The validated document of a recording and its tensor files' tensors by file name."""
    out_dir = Path(out_dir)
    doc = _read_index(out_dir)
    label = _label(out_dir, INDEX)
    files: dict[str, dict[str, torch.Tensor]] = {}
    seen: dict[str, int] = {}
    for i, fn in enumerate(doc["functions"]):
        where = f"{label}: functions[{i}]"
        if fn["target"] in seen:
            raise RecordingError(
                f"{where}.target: {fn['target']!r} repeats functions[{seen[fn['target']]}]"
            )
        seen[fn["target"]] = i
        names = [t["name"] for c in fn["calls"] for t in tensor_nodes([c["args"], c["kwargs"]])]
        if len(set(names)) != len(names):
            raise RecordingError(f"{where}: a tensor name is used twice")
        if fn["tensors"] is None:
            if names:
                raise RecordingError(f"{where}.tensors: null but its calls have tensors")
            continue
        if fn["tensors"] in files:
            raise RecordingError(f"{where}.tensors: {fn['tensors']!r} is another Function's file")
        path = _tensor_path(out_dir, fn["tensors"], f"{where}.tensors")
        tensors = tensorfile.read(path, _label(out_dir, TENSOR_DIR, fn["tensors"]), MAX_TENSOR_FILE)
        extra = sorted(set(tensors) - set(names))
        missing = sorted(set(names) - set(tensors))
        if missing or extra:
            problem = (
                f"has no tensor {missing[0]!r}"
                if missing
                else f"holds {extra[0]!r}, which no call uses"
            )
            raise RecordingError(f"{_label(out_dir, TENSOR_DIR, fn['tensors'])}: {problem}")
        files[fn["tensors"]] = tensors
    return doc, files


def build(doc: dict[str, Any], files: dict[str, dict[str, torch.Tensor]], label: str) -> Recording:
    # the types a value names resolve only inside the packages whose Functions it holds
    targets = [fn["target"] for fn in doc["functions"] if fn["kind"] == "function"]
    allowed = packages_of(targets)
    own = rules.own_packages(targets)  # what a reference may name (rules.check_names)
    functions = []
    for i, fn in enumerate(doc["functions"]):
        tensors = files.get(fn["tensors"] or "", {})
        calls = []
        for j, call in enumerate(fn["calls"]):
            at = f"{label}: functions[{i}].calls[{j}]"
            try:
                args = tuple(live.restore(a, tensors, allowed) for a in call["args"])
                kwargs = {k: live.restore(v, tensors, allowed) for k, v in call["kwargs"].items()}
                rules.check_names((args, kwargs), own)
            except (BadNode, RefError) as e:
                raise RecordingError(f"{at}: {e}") from None
            calls.append(RecordedCall(args, kwargs, call["where"]))
        functions.append(
            RecordedFunction(
                target=fn["target"],
                kind=fn["kind"],
                legacy=fn["legacy"],
                importable=fn["importable"],
                calls=tuple(calls),
                call_count=fn["call_count"],
                skipped=tuple(
                    SkippedCall(s["reason"], s["where"], s["count"], s.get("kind", ""))
                    for s in fn["skipped"]
                ),
                nested_in=tuple(fn["nested_in"]),
                under_transform=fn["under_transform"],
                not_kept=tuple(
                    NotKept(n["combination"], n["where"], n["count"])
                    for n in fn.get("not_kept", ())
                ),
            )
        )
    functions.sort(key=lambda f: f.target)
    return Recording(tuple(functions), tuple(doc["never_called"]), doc["program"])


def load_recording(out_dir: str | Path) -> Recording:
    """The recording in ``out_dir``, validated; RecordingError (a UsageError, one line
    naming the file and the place) for anything damaged, hostile or of another version."""
    doc, files = read_raw(out_dir)
    return build(doc, files, _label(Path(out_dir), INDEX))


# --- merging the parts of one run ----------------------------------------------------------


def merge(parts: list[Path], out_dir: Path, program: str, limits: dict[str, int]) -> Recording:
    """Write into ``out_dir`` the recording of one run whose parts (one per pytest-xdist
    worker) are ``parts``: calls ordered by where they were made in the run (the test's
    collection index, then the call's place in it), never by which worker ran first, so the
    result is the one a serial run writes."""
    by_target: dict[str, list[tuple[dict[str, Any], dict[str, torch.Tensor]]]] = {}
    never: set[str] = set()
    for part in sorted(parts):
        doc, files = read_raw(part)
        never.update(doc["never_called"])
        for fn in doc["functions"]:
            by_target.setdefault(fn["target"], []).append((fn, files.get(fn["tensors"] or "", {})))
    functions = []
    for target, found in sorted(by_target.items()):
        first = found[0][0]
        candidates = []
        skipped: dict[str, dict[str, Any]] = {}
        for fn, tensors in found:
            for call in fn["calls"]:
                stored = [tensors[t["name"]] for t in tensor_nodes([call["args"], call["kwargs"]])]
                candidates.append((call["order"], call, stored))
            for s in fn["skipped"]:
                have = skipped.get(s["reason"])
                if have is None:
                    skipped[s["reason"]] = dict(s)
                else:
                    have["count"] += s["count"]
                    if s["order"] < have["order"]:
                        have["order"], have["where"] = s["order"], s["where"]
        candidates.sort(key=lambda c: c[0])
        kept, not_kept = selection.select(
            (
                (call_key(call), selection.combination(call["args"], call["kwargs"]), call["where"])
                for _, call, _ in candidates
            ),
            limits["max_calls"],
        )
        calls = [(candidates[i][1], candidates[i][2]) for i in kept]
        # the parts' own combinations not kept, where no kept call has them
        named = {n["combination"] for n in not_kept}
        kept_combos = {
            selection.describe(selection.combination(c["args"], c["kwargs"])) for c, _ in calls
        }
        for fn, _ in found:
            for n in fn.get("not_kept", ()):
                if n["combination"] not in named | kept_combos:
                    not_kept.append(dict(n))
                    named.add(n["combination"])
        doc, tensors = function_doc(
            target,
            first["kind"],
            first["legacy"],
            first["importable"],
            call_count=sum(fn["call_count"] for fn, _ in found),
            under_transform=sum(fn["under_transform"] for fn, _ in found),
            nested_in=sorted({n for fn, _ in found for n in fn["nested_in"]}),
            skipped=list(skipped.values()),
            calls=calls,
            not_kept=not_kept,
        )
        functions.append((doc, tensors))
    called = {d["target"] for d, _ in functions if d["call_count"]}
    doc = document(program, limits, sorted(never - called), [d for d, _ in functions])
    files = {d["tensors"]: t for d, t in functions if d["tensors"]}
    write(out_dir, doc, files)
    return build(doc, files, _label(out_dir, INDEX))
