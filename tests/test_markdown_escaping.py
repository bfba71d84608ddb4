"""Text from a Function or a report is text in every Markdown construct the reports write.

Each report is rendered twice: once from cases whose entry names, check names, case ids,
messages, expectation reasons and metadata are full of Markdown (headings, quotes, list
markers, emphasis, code, links, images, table pipes, HTML), and once from the same cases
with plain words in their place. A CommonMark parser (with GitHub's tables) must see the
same document in both: the same blocks and the same inline markup, only the words differ;
and every hostile string must read back verbatim. The console's siblings: the terminal
summary and ``afdb diff``'s text show the control characters of such strings as escapes.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from harness.core.results import CaseResult, RunResult
from harness.reports import diff, report

markdown_it = pytest.importorskip(
    "markdown_it",
    reason="markdown-it-py is not installed (optional: it renders the Markdown reports to check their escaping)",
)

#: (hostile, plain) pairs; each plain word stands for its hostile twin in the second run.
ENTRY = ("# E*1* [a](b) <b>x</b> ~~s~~ `t` &amp; #", "Entrya")
CHECK = ("> vmap|`j`*y*", "checkb")
OTHER_CHECK = ("1. jvp [r]: http://x", "checkc")
MESSAGES = [
    ("> quote [link](http://e.x) ![img](y) _em_ <script>s</script> \\ * ~~z~~", "wordsd"),
    ("- item | pipe `code` **strong** &lt; &#35;", "wordse"),
    ("# heading ### #", "wordsf"),
    ('[ref]: http://x.y "title"', "wordsg"),
    ("+ plus <http://auto.link> www.x.y", "wordsh"),
    ("    four spaces then code", "wordsi"),
]
REASON = ("1) reason *not* a [list](u)", "reasonj")
META = {
    "torch_version": ("2.13 *x* [v](u)", "versionk"),
    "device": ("# cpu", "devicel"),
    "batch_size_note": ("> note | `n`", "notem"),
    "expectations": ("[e](f).json", "expn"),
}
AXIS = ("# axis | [x](y)", "axiso")


def _cases(hostile: bool) -> tuple[RunResult, RunResult]:
    pick = 0 if hostile else 1
    entry, check, other = ENTRY[pick], CHECK[pick], OTHER_CHECK[pick]
    msgs = [m[pick] for m in MESSAGES]

    def case(cid: str, ch: str, status: str, message: str = "", **kw: str) -> CaseResult:
        return CaseResult(
            f"{entry}/{ch}/{cid}", entry, ch, 0, "s", None, status, message, 0.01, **kw
        )

    old = [
        case("s0`", check, "pass"),
        case("s1", check, "pass"),
        case("s2", check, "fail", msgs[0]),
        case("s3", other, "error", msgs[1]),
        case("s4", other, "unsupported", msgs[2]),
        case("s7", other, "pass"),
    ]
    new = [
        case("s0`", check, "fail", msgs[0], repro=msgs[5]),  # regressed
        case("s1", check, "fail", msgs[0]),  # one root cause with s0
        case("s2", check, "error", msgs[3]),  # changed
        case("s3", other, "error", msgs[4]),  # changed
        case("s4", other, "unsupported", msgs[2]),
        case("s5", other, "xfail", msgs[1], expectation=REASON[pick]),  # added
        case("s6", check, "unsupported", msgs[5]),  # added
    ]
    md = {k: v[pick] for k, v in META.items()}
    md.update(dtype="float32", command=["afdb", entry], axes={AXIS[pick]: [entry]})
    return RunResult(old, dict(md)), RunResult(new, dict(md))


def _documents(render) -> tuple[str, str]:
    return render(*_cases(True)), render(*_cases(False))


def _shape(text: str) -> list[tuple]:
    """The document as a parser sees it, words left out: blocks and inline markup."""
    md = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])
    shape = []
    for t in md.parse(text):
        kids = [c.type for c in t.children or [] if c.type != "text"]
        shape.append((t.type, t.tag, t.nesting, tuple(kids)))
    return shape


class _Text(HTMLParser):
    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.feed(html)

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def _rendered_text(text: str) -> str:
    md = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])
    return " ".join("".join(_Text(md.render(text)).parts).split())


def _assert_text_everywhere(hostile: str, plain: str, needles: list[str]) -> None:
    hostile_shape, plain_shape = _shape(hostile), _shape(plain)
    for i, (h, p) in enumerate(zip(hostile_shape, plain_shape)):
        assert h == p, f"block {i}: {h} != {p}"
    assert len(hostile_shape) == len(plain_shape)
    shown = _rendered_text(hostile)
    for needle in needles:
        assert " ".join(needle.split()) in shown, needle


NAMES = [ENTRY[0], CHECK[0], OTHER_CHECK[0], f"{ENTRY[0]}/{CHECK[0]}/s0`"]


def test_the_markdown_report_keeps_every_string_text():
    hostile, plain = _documents(lambda old, new: report.to_markdown(new))
    shown = [MESSAGES[i][0] for i in (0, 2, 3, 4)] + [MESSAGES[5][0].strip(), REASON[0]]
    _assert_text_everywhere(hostile, plain, [*NAMES, *shown, *(v[0] for v in META.values())])
    assert "### API axes x checks" in hostile  # the axis table was written, and its name is text
    assert AXIS[0] in _rendered_text(hostile)


def test_the_regression_diff_keeps_every_string_text():
    hostile, plain = _documents(lambda old, new: diff.to_markdown(diff.diff_results(old, new)))
    shown = [MESSAGES[i][0] for i in (0, 1, 3, 4)] + [MESSAGES[5][0].strip()]  # the changes
    _assert_text_everywhere(hostile, plain, [*NAMES, *shown, META["torch_version"][0]])
    assert "## Regressed (2)" in hostile and "## Added (2)" in hostile


def test_the_console_shows_control_characters_of_a_report_as_escapes(capsys):
    from harness.session.progress import print_summary

    bell = "\x1b[31mred\x07"
    old, new = _cases(True)
    for c in new.cases:
        c.check = c.check + bell
        c.id = c.id + bell
        c.message = c.message + bell
    new.metadata["torch_version"] = old.metadata["suite_version"] = bell  # warned about
    print_summary(new)
    text = capsys.readouterr().out + diff.to_text(diff.diff_results(old, new))
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[31mred\\x07" in text
