"""The observer: every ``torch.autograd.Function.apply`` (and, for named namespaces, every
``torch.library`` custom op) seen while a ``Recorder`` is active, kept as data.

It wraps ``Function.apply`` (and ``OpOverload.__call__`` / ``OpOverloadPacket.__call__``
when ops are named) for as long as the recorder is active and puts the originals back
afterwards, also on an exception. The wrapper calls the original with the same arguments
and returns what it returns (or lets its exception through): the program's results,
exceptions and autograd graph are those of an unobserved run. Observing itself never
raises into the program: a failure of the observer is named as the call's skip reason.

Not recorded as samples: calls while a torch.func transform is active (their arguments
are wrapped tensors; counted in ``under_transform``), calls made inside another observed
Function's staticmethod or custom op (counted, and named in ``nested_in``), and calls made
while the suite itself runs a check (frames of ``harness`` other than the CLI and this
wing: not counted at all). torch's own Functions (``torch.*``) are not observed, nor
calls traced by ``torch.compile`` (the wrapper then steps aside, so dynamo traces the
original ``apply`` without a graph break; record the eager run).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import CodeType
from typing import Any

import torch

from harness.core.errors import UsageError
from harness.recording import frames, store
from harness.recording import live as live_values
from harness.recording.data_errors import NotRecordable
from harness.recording.live import class_suffix
from harness.recording.packages import functions_in
from harness.recording.refs import packages_of, top_package
from harness.recording.seen import Seen, default_program, is_legacy, mib, op_target
from harness.recording.selection import Selector, combination
from harness.recording.values import fast_key, snapshot, stored

_METHODS = ("forward", "backward", "vjp", "jvp", "vmap", "setup_context")
#: Distinct calls per Function whose repeats are recognised without a snapshot.
_MAX_FAST = 10_000

_active_lock = threading.Lock()
_UNSEEN: Any = object()  # a class not looked at yet
_active: list[Recorder] = []


class Recorder:
    """Observes calls while active (``recording()`` enters and leaves it) and writes them.

    ``classes`` maps each recorded target to the live class (for classes that cannot be
    imported again, to be checked in this process). ``set_test`` tells it which pytest
    item runs (its node id is then the calls' ``where``, its collection index their order).
    """

    def __init__(
        self,
        out_dir: str | Path,
        *,
        sources: tuple[str, ...] = (),
        ops: tuple[str, ...] = (),
        max_calls: int = 8,
        tensor_limit: int = 16 << 20,
        total_limit: int = 256 << 20,
        program: str | None = None,
    ) -> None:
        if type(max_calls) is not int or max_calls < 1:
            raise UsageError(f"max_calls {max_calls!r}: give a whole number >= 1")
        for name, value in (("tensor_limit", tensor_limit), ("total_limit", total_limit)):
            if type(value) is not int or value < 0:
                raise UsageError(f"{name} {value!r}: give a number of bytes >= 0")
        for ns in ops:
            if not isinstance(ns, str) or not ns.isidentifier():
                raise UsageError(f"ops {ns!r}: give a custom op namespace such as mylib")
        for pkg in sources:
            if not isinstance(pkg, str) or not all(p.isidentifier() for p in pkg.split(".")):
                raise UsageError(f"sources {pkg!r}: give an importable package name such as mylib")
        self.out_dir = Path(out_dir)
        self.sources = tuple(sources)
        self.ops = frozenset(ops)
        self.max_calls = max_calls
        self.tensor_limit = tensor_limit
        self.total_limit = total_limit
        #: How long copying one call's live values may take before it is given up.
        self.snapshot_seconds = live_values.SNAPSHOT_SECONDS
        self.program = program if program is not None else default_program()
        self.classes: dict[str, type] = {}
        self._suffixes: dict[str, dict[str, str]] = {}
        self._seen: dict[str, Seen] = {}
        self._by_class: dict[Any, Seen | None] = {}
        self._codes: dict[CodeType, str] = {}
        self._lock = threading.RLock()
        self._local = threading.local()
        self._stored = 0
        self._test: tuple[str, int] | None = None
        self._seq = 0
        self._saved: list[tuple[Any, str, Any]] = []
        self._result: Any = None

    # --- the pytest item -----------------------------------------------------------------

    def set_test(self, nodeid: str | None, index: int = 0) -> None:
        with self._lock:
            self._test = (nodeid, index) if nodeid is not None else None
            self._seq = 0

    def _place(self, frame_where: str) -> str:
        """Where a call was made: the pytest item, else the line (no sequence taken)."""
        if self._test is not None:
            return self._test[0]
        current = os.environ.get("PYTEST_CURRENT_TEST")
        return current.rsplit(" (", 1)[0] if current else frame_where

    def _where_and_order(self, frame_where: str) -> tuple[str, list[int]]:
        self._seq += 1
        if self._test is not None:
            return self._test[0], [self._test[1], self._seq]
        current = os.environ.get("PYTEST_CURRENT_TEST")
        if current:
            return current.rsplit(" (", 1)[0], [0, self._seq]
        return frame_where, [0, self._seq]

    # --- installing ----------------------------------------------------------------------

    def start(self) -> None:
        with _active_lock:
            if _active:
                raise UsageError(
                    "a recording is already active in this process; finish it before starting another"
                )
            _active.append(self)
        from torch.autograd.function import Function

        self._patch(
            Function, "apply", classmethod(self._wrap_apply(Function.__dict__["apply"].__func__))
        )
        if self.ops:
            from torch._ops import OpOverload, OpOverloadPacket

            for cls in (OpOverload, OpOverloadPacket):
                self._patch(cls, "__call__", self._wrap_op(cls.__dict__["__call__"]))

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, value)

    def stop(self) -> None:
        """Put every original back (in reverse order); safe to call twice."""
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)
        with _active_lock:
            if self in _active:
                _active.remove(self)

    def _wrap_apply(self, original: Any) -> Any:
        recorder = self

        def apply(cls: Any, *args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling():  # traced by dynamo: as if not observed
                return original(cls, *args, **kwargs)
            local = recorder._local
            if getattr(local, "busy", False):
                return original(cls, *args, **kwargs)
            local.busy = True
            after = None
            try:  # subclasses' __torch_function__ is the program's: observing runs none
                with torch._C.DisableTorchFunctionSubclass():
                    after = recorder._observe_function(cls, args, kwargs)
            except Exception as e:  # the observer never breaks the program
                recorder._failed(cls, e)
            finally:
                local.busy = False
            try:
                if not torch._C._are_functorch_transforms_active():
                    return original(cls, *args, **kwargs)
                # Under a transform torch calls apply again at the level below, on unwrapped
                # tensors: that is this call, already counted, not another one.
                local.busy = True
                try:
                    return original(cls, *args, **kwargs)
                finally:
                    local.busy = False
            finally:
                if after is not None:
                    recorder._after(cls, after)

        apply.__wrapped__ = original  # type: ignore[attr-defined]
        return apply

    def _wrap_op(self, original: Any) -> Any:
        recorder = self

        def __call__(op: Any, /, *args: Any, **kwargs: Any) -> Any:
            local = recorder._local
            if getattr(local, "busy", False) or torch.compiler.is_compiling():
                return original(op, *args, **kwargs)
            try:
                ns, target = op_target(op)
            except Exception:
                return original(op, *args, **kwargs)
            if ns not in recorder.ops:
                return original(op, *args, **kwargs)
            local.busy = True
            after = None
            try:
                with torch._C.DisableTorchFunctionSubclass():
                    after = recorder._observe_op(target, args, kwargs)
            except Exception as e:
                recorder._failed(target, e)
            finally:
                local.busy = False
            stack = getattr(local, "ops", None)
            if stack is None:
                stack = local.ops = []
            stack.append(target)
            try:
                return original(op, *args, **kwargs)
            finally:
                stack.pop()
                if after is not None:
                    recorder._after(target, after)

        __call__.__wrapped__ = original  # type: ignore[attr-defined]
        return __call__

    # --- observing -----------------------------------------------------------------------

    def _register(self, cls: Any) -> Seen | None:
        module = getattr(cls, "__module__", "") or ""
        if module == "torch" or module.startswith("torch."):
            self._by_class[cls] = None
            return None
        qual = getattr(cls, "__qualname__", cls.__name__)
        target = f"{module}:{qual}"
        if "<locals>" in qual:  # made per call: named apart by what its closures hold
            with contextlib.suppress(Exception):
                target += class_suffix(cls)
        seen = self._seen.get(target)
        if seen is None:
            seen = self._seen[target] = Seen(
                target,
                "function",
                is_legacy(cls),
                module != "__main__" and "<locals>" not in qual,
            )
            self._prepare(seen)
            self.classes[target] = cls
        for name in _METHODS:
            code = getattr(getattr(cls, name, None), "__code__", None)
            if code is not None and not code.co_filename.startswith(frames.TORCH):
                self._codes.setdefault(code, f"{target}.{name}")
        self._by_class[cls] = seen
        return seen

    def _scan(self) -> tuple[bool, str | None, str]:
        """Walk the caller's stack: (a suite check is running, the observed staticmethod
        this call is inside, the ``file:line`` it was called from)."""
        f = sys._getframe(3)
        nested = None
        caller = main = None
        codes = self._codes
        kinds = frames.KINDS
        while f is not None:
            code = f.f_code
            kind = kinds.get(code)
            if kind is None:
                kind = kinds[code] = frames.frame_kind(code.co_filename)
            if kind == frames.SUITE:
                return True, None, ""
            if kind == frames.BOTTOM_KIND:
                break
            if kind == frames.USER:
                caller = caller or f
                if main is None and f.f_globals.get("__name__") == "__main__":
                    main = f
            if nested is None:
                nested = codes.get(code)
            f = f.f_back  # type: ignore[assignment]
        # the line of the program's own script when it is on the stack (a library's
        # public function called from it: the script's line), else the direct caller
        at = main or caller
        return (
            False,
            nested,
            frames.frame_location(at.f_code.co_filename, at.f_lineno) if at else "",
        )

    def _observe_function(
        self, cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Callable[[], None] | None:
        self._local.where = ""  # until the scan below finds it
        found: Seen | None = self._by_class.get(cls, _UNSEEN)
        if found is None:
            return None
        suite, nested, frame_where = self._scan()
        self._local.where = frame_where
        if suite:
            return None
        with self._lock:
            seen = self._register(cls) if found is _UNSEEN else found
            if seen is None:
                return None
            stack = getattr(self._local, "ops", None)
            if nested is None and stack:
                nested = stack[-1]
            return self._observe(seen, nested, frame_where, args, kwargs)

    def _observe_op(
        self, target: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Callable[[], None] | None:
        self._local.where = ""
        suite, nested, frame_where = self._scan()
        self._local.where = frame_where
        if suite:
            return None
        with self._lock:
            seen = self._seen.get(target)
            if seen is None:
                seen = self._seen[target] = Seen(target, "custom_op", False, True)
                self._prepare(seen)
            stack = getattr(self._local, "ops", None)
            if nested is None and stack:
                nested = stack[-1]
            return self._observe(seen, nested, frame_where, args, kwargs)

    def _prepare(self, seen: Seen) -> None:
        seen.selector = Selector(self.max_calls)
        seen.allowed = packages_of([seen.target])

    def _observe(
        self,
        seen: Seen,
        nested: str | None,
        frame_where: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Callable[[], None] | None:
        """Count the call and keep it as data or a snapshot; a callable when the keeping
        must wait for the call to return (parts kept by reference, checked unchanged)."""
        seen.call_count += 1
        where, order = self._where_and_order(frame_where)
        if torch._C._are_functorch_transforms_active():
            seen.under_transform += 1
            return None
        calls, keys, lives = seen.calls, seen.keys, seen.live
        inner = nested is not None
        if nested is not None:
            seen.nested_in.add(nested)
            if seen.calls or len(seen.inner_calls) >= self.max_calls:
                return None
            # recorded from these calls only while no top-level call is (the first K)
            calls, keys, lives = seen.inner_calls, seen.inner_keys, seen.inner_live
            where = f"{where} (inside {nested})"
        fast = None if inner else fast_key(args, kwargs)
        known = seen.fast.get(fast) if fast is not None else None
        if known is not None:  # a repeat of a distinct call already seen
            seen.selector.seen(known, where)
            return None
        snap: Any
        try:
            snap = snapshot(args, kwargs, seen.allowed)
        except NotRecordable as e:
            try:  # live values: kept as a snapshot, checked in this process
                package = top_package(seen.target.partition(":")[0])
                room = self.total_limit - self._stored
                snap = live_values.snapshot(
                    args,
                    kwargs,
                    package,
                    keys,
                    (self.tensor_limit, room),
                    seen.allowed,
                    self.snapshot_seconds,
                    self._enter_copy,
                )
            except live_values.NotCopied as e2:
                seen.skip(str(e2), where, order, e2.kind)
                return None
            except NotRecordable:
                seen.skip(str(e), where, order)
                return None
            if snap is None:  # a repeat of a live call already kept
                return None
            if snap.copied is not None and snap.copied.shared:
                # parts kept by reference: kept only if the call leaves them as they were
                def after() -> None:
                    changed = snap.copied.changed()
                    if changed:
                        seen.skip(
                            f"an argument ({', '.join(f'`{n}`' for n in snap.copied.shared)}) "
                            f"cannot be copied and {changed}",
                            where,
                            order,
                            "not copyable",
                        )
                        return None
                    self._keep(seen, snap, inner, fast, where, order, calls, keys, lives)

                return after
        self._keep(seen, snap, inner, fast, where, order, calls, keys, lives)
        return None

    def _enter_copy(self) -> None:
        """In the thread that copies live values: the program's calls there are not observed."""
        self._local.busy = True

    def _keep(
        self,
        seen: Seen,
        snap: Any,
        inner: bool,
        fast: Any,
        where: str,
        order: list[int],
        calls: list[Any],
        keys: set[str],
        lives: dict[int, Any],
    ) -> None:
        """Keep the call (or count it) by its combination, the cap and the size limits."""
        combo = combination(snap.args, snap.kwargs)
        if not inner and seen.selector.seen(combo, where) is None:
            return
        if snap.key in keys:
            if fast is not None and len(seen.fast) < _MAX_FAST:
                seen.fast[fast] = combo
            return
        sizes = [t.numel() * t.element_size() for t in snap.tensors]
        if isinstance(snap, live_values.LiveSnapshot):
            sizes.append(snap.biggest)
        for size in sizes:
            if size > self.tensor_limit:
                seen.skip(
                    f"a tensor argument of {mib(size)} is over the per-tensor limit of "
                    f"{mib(self.tensor_limit)} (--tensor-limit)",
                    where,
                    order,
                    "limit",
                )
                return
        if inner:  # the first K distinct calls inside other Functions
            keep, replaced, priority = True, None, (0, 0)
        else:
            keep, replaced, priority = seen.selector.offer(combo)
        keys.add(snap.key)
        if fast is not None and len(seen.fast) < _MAX_FAST:
            seen.fast[fast] = combo
        if not keep:
            return
        freed = seen.sizes[seen.selector.worst()] if replaced is not None else 0
        if self._stored - freed + snap.nbytes > self.total_limit:
            keys.discard(snap.key)
            seen.fast.pop(fast, None)
            seen.skip(
                f"its tensors ({mib(snap.nbytes)}) would take the recording over its total "
                f"limit of {mib(self.total_limit)} (--total-limit)",
                where,
                order,
                "limit",
            )
            return
        if replaced is not None:  # a call of a combination kept more often makes room
            position = seen.selector.worst()
            seen.selector.drop(position)
            seen.calls.pop(position)
            self._stored -= seen.sizes.pop(position)
            # the live snapshots follow their calls' places
            seen.live = {
                (i if i < position else i - 1): v for i, v in seen.live.items() if i != position
            }
            lives = seen.live
        nodes = store.tensor_nodes([snap.args, snap.kwargs])
        copies = [stored(t, node) for t, node in zip(snap.tensors, nodes, strict=True)]
        self._stored += snap.nbytes
        call = {"where": where, "order": order, "args": snap.args, "kwargs": snap.kwargs}
        if isinstance(snap, live_values.LiveSnapshot):
            lives[len(calls)] = (snap.live_args, snap.live_kwargs, where)
        calls.append((call, copies))
        if not inner:
            seen.selector.keep(combo, priority)
            seen.sizes.append(snap.nbytes)

    def _after(self, what: Any, keep: Callable[[], None]) -> None:
        """After the call returned (or raised): keep what had to wait for it."""
        local = self._local
        local.busy = True
        try:
            with self._lock, torch._C.DisableTorchFunctionSubclass():
                keep()
        except Exception as e:  # the observer never breaks the program
            self._failed(what, e)
        finally:
            local.busy = False

    def _failed(self, what: Any, error: Exception) -> None:
        """The observer itself failed on a call: named as that call's skip reason, with
        the place of the call (the test, else the line: known without the arguments)."""
        with self._lock:
            target = what if isinstance(what, str) else None
            seen = self._seen.get(target) if target else self._by_class.get(what)
            if seen:
                where = ""
                with contextlib.suppress(Exception):
                    where = self._place(getattr(self._local, "where", ""))
                try:
                    text = str(error)[:300]
                except Exception:
                    text = "(its message cannot be read)"
                seen.skip(
                    f"the recorder failed on this call ({type(error).__name__}: {text})",
                    where,
                    [0, 0],
                    "recorder",
                )

    # --- writing -------------------------------------------------------------------------

    def limits(self) -> dict[str, int]:
        return {
            "max_calls": self.max_calls,
            "tensor_limit": self.tensor_limit,
            "total_limit": self.total_limit,
        }

    def document(self) -> tuple[dict[str, Any], dict[str, dict[str, torch.Tensor]]]:
        """The recording so far, as the document and tensor files ``store.write`` writes."""
        with self._lock:
            docs = []
            files = {}
            for seen in self._seen.values():
                doc, tensors = store.function_doc(
                    seen.target,
                    seen.kind,
                    seen.legacy,
                    seen.importable,
                    call_count=seen.call_count,
                    under_transform=seen.under_transform,
                    nested_in=sorted(seen.nested_in),
                    skipped=list(seen.skipped.values()),
                    calls=seen.calls or seen.inner_calls,
                    not_kept=seen.selector.not_kept(),
                )
                docs.append(doc)
                if doc["tensors"]:
                    files[doc["tensors"]] = tensors
            called = set(self._seen)
        never = [t for t in functions_in(self.sources) if t not in called]
        return store.document(self.program, self.limits(), never, docs), files

    def live_calls(self) -> dict[str, dict[int, tuple[tuple[Any, ...], dict[str, Any], str]]]:
        """The live snapshots by target and place among the written calls: what a check in
        this process uses for the calls whose arguments are not data."""
        with self._lock:
            return {
                t: dict(s.live if s.calls else s.inner_live)
                for t, s in self._seen.items()
                if (s.live if s.calls else s.inner_live)
            }

    def write(self) -> None:
        doc, files = self.document()
        store.write(self.out_dir, doc, files)
        self._result = store.build(doc, files, f"{self.out_dir}/{store.INDEX}")

    def written_to(self, out_dir: Path, result: Any) -> None:
        """The recording was written for this recorder elsewhere (the merge of a pytest-xdist
        run's parts): where, and what."""
        self.out_dir, self._result = out_dir, result

    def result(self) -> Any:
        """The Recording written (what ``load_recording`` reads back from it)."""
        if self._result is None:
            self._result = store.load_recording(self.out_dir)
        return self._result
