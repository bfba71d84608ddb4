"""The samples' plain call: each sample through the Function once, with no transform at all.

Samples that cannot call the Function (one tuple returned instead of a list of tuples, an
argument too many, shapes the Function cannot combine) would otherwise fail every case
of every check, blamed on the Function's vmap rule or backward. Before any case runs, the
Function is called once per sample, eagerly. The samples are the user's mistake, one line
naming the sample, the call and the exception (``UsageError``, exit 2), only where the
evidence says samples: a call that fails while taking its arguments (``at_binding``), or
every sample raising. Where some samples run and another raises inside the Function, that
is the Function's bug on that sample: nothing is refused, and that sample's cases report
the exception as the Function's ``error``.

The calls run in a forked child where forking is safe (``forkpool.available``: Linux, no
CUDA context; ``fork_safety``: no thread pool a child cannot do without), so they change nothing the cases then see: a forward that leaks state,
counts its calls or crashes does so in the child, and the cases meet it as they would
have (one fork, about 10 ms: ``benchmarks/test_bench_probe.py``). Elsewhere
they run in this process under the guarantees of a case (``harness.engine.isolation``: a
time limit, output captured, torch's global state put back, processes it started killed).
A call that hangs, crashes, raises a ``BaseException`` (``SystemExit``) or a warning
turned into an error by the user's filters says nothing about the samples: the cases run
and report it themselves.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from autograd_function_db.entry import Entry, Sample
from harness.core.errors import CaseTimeout
from harness.core.locations import describe_exception
from harness.core.textsafe import visible
from harness.engine import children
from harness.engine.isolation import TorchState, capture_output, restore, time_limit

#: How much of the exception the one line keeps (the full text would be a case's message).
EXCEPTION_CHARS = 300


#: Why a refusal blames the samples: the call could not take them (arity, a keyword, a
#: TypeError at the apply boundary, a non-tensor where the Function reads a tensor's
#: attribute or indexes it), or every sample raised.
AT_BINDING = "binding"
EVERY_SAMPLE = "every"


@dataclass(frozen=True)
class Refusal:
    """The sample that shows the samples do not fit: its index and name, the exception, why
    it blames the samples (``AT_BINDING`` or ``EVERY_SAMPLE``) and how many samples raised."""

    index: int
    name: str
    raised: str
    why: str = AT_BINDING
    raised_count: int = 1


def _user_frames(exc: BaseException) -> list[str]:
    """The frames the call entered (the traceback below the frame that caught it) that are
    the user's code (neither torch's, the standard library's nor the suite's)."""
    import traceback

    from harness.engine.blame import is_harness, is_stdlib, is_torch

    return [
        fr.filename
        for fr in traceback.extract_tb(exc.__traceback__)[1:]
        if not (is_torch(fr.filename) or is_stdlib(fr.filename) or is_harness(fr.filename))
    ]


def at_binding(exc: BaseException, args: Sequence[Any]) -> bool:
    """The call failed while taking its arguments, not inside the Function: a ``TypeError``
    raised before any of the user's code ran (Python binding the arguments to ``forward``,
    torch's ``apply`` or a custom op's schema), or a ``TypeError``/``AttributeError`` about
    an argument that is not a tensor (``'list' object has no attribute 'shape'``, ``'int'
    object is not subscriptable``) where the sample passes one of that type."""
    from harness.core.textsafe import safe_str

    if isinstance(exc, TypeError) and not _user_frames(exc):
        return True
    if isinstance(exc, (TypeError, AttributeError)):
        text = safe_str(exc)
        kinds = {type(a).__name__ for a in args if not isinstance(a, torch.Tensor)}
        return any(f"'{k}' object" in text for k in kinds)
    return False


def call_text(entry: Entry) -> str:
    """How the line names the call: ``RotatePoints.apply(*sample)``, ``mylib.op(*sample)``."""
    if entry.custom_op is not None or entry.op is not None:
        op = entry.op if entry.op is not None else entry.custom_op
        name = getattr(op, "__name__", None) or getattr(op, "_qualname", None) or entry.name
        return f"{name}(*sample)"
    return f"{getattr(entry.function, '__name__', entry.name)}.apply(*sample)"


def _fresh(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return a.detach().clone()
    if isinstance(a, (tuple, list)):
        return type(a)(_fresh(v) for v in a)
    if isinstance(a, dict):
        return {k: _fresh(v) for k, v in a.items()}
    return a


def probe_in_process(
    entry: Entry, samples: Sequence[Sample], timeout_s: float | None
) -> Refusal | None:
    """The first sample whose plain call raised an ``Exception`` (None: all called, or the
    call hung, or raised something else; the cases say what then)."""
    state = TorchState.capture()
    processes = children.at_case_start(nothing_ran_since=False)
    raised: list[Refusal] = []
    try:
        with capture_output(), torch.random.fork_rng(devices=[]):
            for i, sample in enumerate(samples):
                limit = time_limit(timeout_s)
                try:
                    with limit:
                        try:
                            entry.call(*[_fresh(a) for a in sample.args])
                        except CaseTimeout:
                            raise
                        except Warning:
                            # a warning the user's filters made an error (``-W error``):
                            # the Function's own behaviour, not samples that do not fit
                            return None
                        except Exception as e:
                            text = describe_exception(e, limit=EXCEPTION_CHARS)
                            if at_binding(e, sample.args):  # the call could not take them
                                return Refusal(i, sample.name, text, AT_BINDING)
                            raised.append(Refusal(i, sample.name, text, EVERY_SAMPLE))
                except CaseTimeout:
                    return None
                except BaseException as e:
                    if isinstance(e, KeyboardInterrupt) and not limit.expired:
                        raise
                    return None
    finally:
        restore(state)
        children.kill_new(processes)
    if raised and len(raised) == len(samples):  # not one sample gets through: the samples
        first = raised[0]
        return Refusal(first.index, first.name, first.raised, EVERY_SAMPLE, len(raised))
    # Some samples run and others raise inside the Function: its bug on those samples,
    # which their cases report as its error (the run goes on).
    return None


def _forked(entry: Entry, samples: Sequence[Sample], timeout_s: float | None) -> Refusal | None:
    """``probe_in_process`` in a forked child: a crash or a hang there is no answer."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer on the pipe, then leave without running any cleanup
        code = 0
        try:
            os.close(read)
            # one intra-op thread, as the fork pool's workers: an OpenMP team inherited
            # from the parent would deadlock the child's first parallel kernel
            torch.set_num_threads(1)
            found = probe_in_process(entry, samples, timeout_s)
            text = json.dumps(found.__dict__ if found else None).encode()
            os.write(write, text)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s * len(samples) + 30
    data = b""
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([read], [], [], wait)
            if not ready:  # past every sample's limit: the child is stuck in native code
                os.kill(pid, signal.SIGKILL)
                break
            chunk = os.read(read, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read)
        # whatever ended the wait (an answer, the deadline, an exception here)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    try:
        found = json.loads(data.decode()) if data else None
    except ValueError:
        return None
    return Refusal(**found) if isinstance(found, dict) else None


def probe_samples(
    entry: Entry, samples: Sequence[Sample], timeout_s: float | None, *, isolate: bool = True
) -> Refusal | None:
    """The first sample that cannot call the Function (see the module docstring); in a
    forked child unless ``isolate`` is False or forking is not safe here."""
    from harness.engine.fork_safety import unsafe_reason
    from harness.engine.forkpool import available

    if isolate and available() and not unsafe_reason():  # a thread pool: no fork
        return _forked(entry, samples, timeout_s)
    return probe_in_process(entry, samples, timeout_s)


def refusal_line(entry: Entry, refusal: Refusal, hint: str = "") -> str:
    """``sample 0: RotatePoints.apply(*sample) raises TypeError: ... with no transform at
    all: the samples do not fit the Function`` (and the hint, when there is one)."""
    name = "" if refusal.name in ("", f"sample{refusal.index}") else f" ({refusal.name})"
    every = (
        f", as every one of the {refusal.raised_count} samples does"
        if refusal.why == EVERY_SAMPLE and refusal.raised_count > 1
        else ""
    )
    line = (
        f"sample {refusal.index}{name}: {call_text(entry)} raises {refusal.raised} with no "
        f"transform at all{every}: the samples do not fit the Function"
    )
    line += f"; {hint}" if hint else "; fix the samples (or the Function's forward)"
    return visible(line, keep_newlines=False)
