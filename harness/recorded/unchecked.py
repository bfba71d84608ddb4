"""For each Function reached but not checked: the class of the reason, and what the user
can do about it, said once at the end of its verdict line.

The class comes from where the recording stopped (the observer's kind of skip, the
state of the recorded entry), never from the wording of a message.
"""

from __future__ import annotations

from harness.sources.recorded import (
    NESTED_ONLY,
    NOT_CHECKABLE,
    NOT_IMPORTABLE,
    NOT_RECORDABLE,
    RecordedEntry,
)

#: What to do, by the class of a call not recorded (``harness.recording.seen.SKIP_KINDS``).
_SKIPS = {
    "limit": (
        "over a size limit",
        "raise --afdb-tensor-limit / --afdb-total-limit (afdb record: --tensor-limit / "
        "--total-limit), or call it with smaller tensors in one test",
    ),
    "not copyable": (
        "not copyable",
        "give the argument's class a __deepcopy__ that returns a faithful copy, or call "
        "the Function in one test with arguments it does not change during the call",
    ),
    "slow copy": (
        "copying took too long",
        "call it in one test with a smaller object, or give its class a faster __deepcopy__",
    ),
    "not data": (
        "an argument is not data",
        "call it in one test with arguments that are data or objects (tensors with data, "
        "numbers, modules): see docs/recording.md, What is recorded",
    ),
    "recorder": (
        "the recorder failed",
        "please report it (the reason names the failure)",
    ),
}


def reason_class(r: RecordedEntry) -> tuple[str, str]:
    """(the class of why ``r`` was not checked, what to do); ('', '') when checked."""
    if r.state == NOT_RECORDABLE:
        if r.only_under_transform:
            return (
                "only under a transform",
                "call it once outside torch.func (eagerly) in one test",
            )
        if r.skip_kinds:
            return _SKIPS.get(r.skip_kinds[0], _SKIPS["not data"])
        return (
            "keyword arguments",
            "call it in one test with arguments that bind to its forward",
        )
    if r.state == NESTED_ONLY:
        return ("only inside another Function", "call it directly in one test")
    if r.state == NOT_IMPORTABLE:
        return (
            "only in a local scope",
            "define the class at module level, or check it where it was recorded "
            "(`pytest --afdb`, `afdb record --check`)",
        )
    if r.state == NOT_CHECKABLE:
        return (
            "layout",
            "call it in one test with that argument dense (the checks differentiate "
            "strided tensors only), or without requires_grad on it if it is data",
        )
    return "", ""  # live only: its line already says where it is checked


def with_reason(text: str, r: RecordedEntry) -> str:
    """``text`` with ``[class: what to do]`` at its end, for a Function not checked."""
    why, todo = reason_class(r)
    return f"{text} [{why}: {todo}]" if why else text
