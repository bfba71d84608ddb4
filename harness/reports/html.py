"""The HTML report: one self-contained file (no network), a sortable, filterable case table.

At the top, the entry x check grid: one coloured cell per entry and check (red: some case
does not conform; amber: expected failures; green: passes; grey: unsupported or skipped;
blank: not run), the counts on hover, and a click that filters the case table to that
entry and check. Entries are sorted worst first. The case table groups cases by root
cause (``harness.reports.grouping``), groups collapsed; ``view=flat`` lists every case.

Everything that comes from a Function or an error message is data, never markup: the
server-side parts go through ``html.escape`` and the cases travel as JSON inside a
``<script type="application/json">`` block (with ``<``, ``>`` and ``&`` written as
``\\u003c`` etc., so no string can close it), and the page's script puts them into the
DOM with ``textContent`` only. A Content-Security-Policy forbids every load from outside.

The view state (filters and sort) lives in the URL hash, read at load, so a link can
point at "the failures of NumpyMul": ``report.html#status=bad&entry=NumpyMul``.
Keys: ``q`` (text in id, entry, check or message), ``status`` (a status, ``bad`` or
``notpass``), ``entry``, ``check``, ``sort`` (a column), ``dir`` (``asc``/``desc``) and
``view`` (``flat`` for one row per case instead of root-cause groups).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from harness.core.results import BAD_STATUSES, STATUSES, RunResult, internal_first
from harness.reports.grouping import group_cases
from harness.reports.report import write_atomic

#: Worst first: the default order of the case table.
SEVERITY = (
    "internal",
    "crash",
    "timeout",
    "error",
    "fail",
    "xpass",
    "xfail",
    "unsupported",
    "skip",
    "pass",
)
assert set(SEVERITY) == set(STATUSES)

CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)

STYLE = """
:root { --bad: #b3261e; --warn: #8a5a00; --ok: #1b6e20; --muted: #5f6368; --line: #dadce0; }
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 1.5em 2em; color: #202124; }
h1 { font-size: 1.4em; margin: .8em 0 .2em; } h2 { font-size: 1.15em; margin: 1.2em 0 .4em; }
.verdict { font-size: 1.1em; margin: .2em 0 .6em; } .verdict b.PASS { color: var(--ok); } .verdict b.FAIL { color: var(--bad); } .verdict b.PARTIAL, .verdict b.INTERRUPTED { color: #9a6700; }
.interrupted { background: #fff4e5; border: 1px solid #f0c36d; padding: .4em .8em; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: .1em 1em; margin: 0; color: var(--muted); font-size: .92em; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; word-break: break-all; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f8f9fa; position: sticky; top: 0; z-index: 1; }
th button { all: unset; cursor: pointer; font-weight: 600; }
th[aria-sort="ascending"] button::after { content: " \\25B2"; } th[aria-sort="descending"] button::after { content: " \\25BC"; }
td.id, td.mono, pre, code { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: .9em; }
td.id { word-break: break-all; max-width: 32em; } td.msg { max-width: 48em; word-break: break-word; }
td.num { text-align: right; white-space: nowrap; }
.st { display: inline-block; padding: 0 .45em; border-radius: .6em; font-size: .85em; font-weight: 600; color: #fff; background: var(--muted); }
.st.pass { background: var(--ok); } .st.fail, .st.error, .st.crash, .st.timeout, .st.xpass { background: var(--bad); }
.st.xfail, .st.skip { background: var(--warn); } .st.unsupported { background: #777; }
tr.case { cursor: pointer; } tr.case:hover { background: #f1f3f4; }
tr.detail td { background: #fafafa; } pre { white-space: pre-wrap; word-break: break-word; margin: .2em 0; }
.controls { display: flex; flex-wrap: wrap; gap: .6em; align-items: center; margin: .4em 0 .6em; position: sticky; top: 0; }
.controls input[type=search] { min-width: 22em; padding: .25em; } .count { color: var(--muted); }
button.link { all: unset; cursor: pointer; color: #1a0dab; text-decoration: underline; }
#entry-panel { border: 1px solid var(--line); padding: .4em .8em; margin: .6em 0; }
#entry-panel[hidden] { display: none; }
td.bad { color: var(--bad); font-weight: 600; }
#grid { width: auto; border-collapse: separate; border-spacing: 2px; }
#grid th, #grid td { border: 0; padding: 0; }
#grid th.check { writing-mode: vertical-rl; transform: rotate(180deg); font-weight: 500; font-size: .8em; padding: .2em 0; background: none; position: static; }
#grid th.entry { text-align: right; padding-right: .5em; font-weight: 500; font-size: .85em; white-space: nowrap; background: none; position: static; }
#grid button.cell { all: unset; display: block; width: 1.5em; height: 1.15em; border-radius: 2px; cursor: pointer; }
#grid button.cell:hover, #grid button.cell:focus { outline: 2px solid #202124; }
#grid button.cell.sel { outline: 3px solid #1a0dab; }
#grid th { background: none; position: static; }
.c-bad, #grid button.cell.c-bad { background: var(--bad); }
.c-xfail, #grid button.cell.c-xfail { background: #e0a800; }
.c-pass, #grid button.cell.c-pass { background: #34a853; }
.c-unsupported, #grid button.cell.c-unsupported { background: #bdc1c6; }
.c-notrun, #grid button.cell.c-notrun { background: #f1f3f4; cursor: default; }
.legend { display: flex; gap: 1em; font-size: .85em; color: var(--muted); margin: .3em 0; }
.legend i { display: inline-block; width: 1em; height: 1em; border-radius: 2px; vertical-align: -.15em; margin-right: .3em; }
tr.group { cursor: pointer; background: #f8f9fa; } tr.group:hover { background: #eef0f2; }
tr.group td { border-top: 1px solid var(--line); } tr.group .tog { display: inline-block; width: 1em; color: var(--muted); }
tr.group .n { font-weight: 600; margin: 0 .4em; } tr.group .checks { color: var(--muted); margin-right: .4em; }
tr.group .gmsg { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: .85em; color: #3c4043; }
tr.case.in-group td:first-child { padding-left: 1.6em; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("afdb-data").textContent);
  var SEVERITY = DATA.severity, BAD = DATA.bad, STATUSES = DATA.statuses;
  var rank = {}; SEVERITY.forEach(function (s, i) { rank[s] = i; });
  var cases = DATA.cases.map(function (a, i) {
    return {i: i, id: a[0], entry: a[1], check: a[2], sample: a[3], status: a[4],
            message: a[5], duration_s: a[6], repro: a[7], reference: a[8], plan: a[9], group: a[10]};
  });
  var KEYS = ["q", "status", "entry", "check", "sort", "dir", "view"];
  var state = {q: "", status: "", entry: "", check: "", sort: "status", dir: "asc", view: ""};
  var limit = 1000, open = {}, openGroups = {};

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function readHash() {
    var h = location.hash.replace(/^#/, "");
    if (!h) return;
    h.split("&").forEach(function (kv) {
      var i = kv.indexOf("="), k = i < 0 ? kv : kv.slice(0, i), v = i < 0 ? "" : kv.slice(i + 1);
      try { v = decodeURIComponent(v.replace(/\+/g, " ")); } catch (e) { return; }
      if (KEYS.indexOf(k) >= 0) state[k] = v;
    });
  }
  function writeHash() {
    var parts = [];
    KEYS.forEach(function (k) {
      var dflt = k === "sort" ? "status" : k === "dir" ? "asc" : "";
      if (state[k] !== dflt) parts.push(k + "=" + encodeURIComponent(state[k]));
    });
    try { history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname); }
    catch (e) { /* some file:// contexts refuse; the view still works */ }
  }
  function statusMatches(s) {
    if (!state.status) return true;
    if (state.status === "bad") return BAD.indexOf(s) >= 0;
    if (state.status === "notpass") return s !== "pass";
    return s === state.status;
  }
  function matches(c) {
    if (!statusMatches(c.status)) return false;
    if (state.entry && c.entry !== state.entry) return false;
    if (state.check && c.check !== state.check) return false;
    if (state.q) {
      var q = state.q.toLowerCase();
      if ((c.id + "\n" + c.entry + "\n" + c.check + "\n" + c.message).toLowerCase().indexOf(q) < 0) return false;
    }
    return true;
  }
  function compare(a, b) {
    var k = state.sort, x, y;
    if (k === "status") { x = rank[a.status]; y = rank[b.status]; }
    else if (k === "duration_s") { x = a.duration_s; y = b.duration_s; }
    else { x = String(a[k]); y = String(b[k]); }
    var r = x < y ? -1 : x > y ? 1 : 0;
    if (state.dir === "desc") r = -r;
    return r || a.i - b.i;
  }

  // --- controls ---------------------------------------------------------------------
  function fillSelect(sel, values, labels) {
    values.forEach(function (v, i) { var o = el("option", labels ? labels[i] : v); o.value = v; sel.appendChild(o); });
  }
  var qIn = document.getElementById("q"), stSel = document.getElementById("status"),
      enSel = document.getElementById("entry"), chSel = document.getElementById("check");
  fillSelect(stSel, ["", "bad", "notpass"].concat(STATUSES),
             ["all statuses", "not conforming", "not pass"].concat(STATUSES));
  var entries = [], checks = [];
  cases.forEach(function (c) {
    if (entries.indexOf(c.entry) < 0) entries.push(c.entry);
    if (checks.indexOf(c.check) < 0) checks.push(c.check);
  });
  fillSelect(enSel, [""].concat(entries), ["all entries"].concat(entries));
  fillSelect(chSel, [""].concat(checks), ["all checks"].concat(checks));
  function syncControls() {
    qIn.value = state.q; stSel.value = state.status; enSel.value = state.entry; chSel.value = state.check;
    grouped.checked = state.view !== "flat";
  }
  qIn.addEventListener("input", function () { state.q = qIn.value; update(); });
  stSel.addEventListener("change", function () { state.status = stSel.value; update(); });
  enSel.addEventListener("change", function () { state.entry = enSel.value; update(); });
  chSel.addEventListener("change", function () { state.check = chSel.value; update(); });
  document.getElementById("clear").addEventListener("click", function () {
    state.q = state.status = state.entry = state.check = ""; update();
  });
  var grouped = document.getElementById("grouped");
  grouped.addEventListener("change", function () { state.view = grouped.checked ? "" : "flat"; update(); });
  document.querySelectorAll("#cases th[data-key]").forEach(function (th) {
    th.querySelector("button").addEventListener("click", function () {
      var k = th.getAttribute("data-key");
      if (state.sort === k) state.dir = state.dir === "asc" ? "desc" : "asc";
      else { state.sort = k; state.dir = k === "duration_s" ? "desc" : "asc"; }
      update();
    });
  });
  document.getElementById("more").addEventListener("click", function () { limit += 1000; render(); });

  // --- per-entry summary and drill-down ------------------------------------------------
  var perEntry = {};
  cases.forEach(function (c) {
    var e = perEntry[c.entry] || (perEntry[c.entry] = {total: 0, bad: 0, counts: {}, checks: {}});
    e.total++; if (BAD.indexOf(c.status) >= 0) e.bad++;
    e.counts[c.status] = (e.counts[c.status] || 0) + 1;
    var ch = e.checks[c.check] || (e.checks[c.check] = {});
    ch[c.status] = (ch[c.status] || 0) + 1;
  });
  function countsText(counts) {
    return SEVERITY.filter(function (s) { return counts[s]; })
      .map(function (s) { return counts[s] + " " + s; }).join(", ") || "-";
  }
  function worst(counts) {  // the rank of the worst status among these counts
    var r = SEVERITY.length;
    Object.keys(counts).forEach(function (s) { if (counts[s] && rank[s] < r) r = rank[s]; });
    return r;
  }
  // Worst first: most non-conforming cases, then the worst status, then report order.
  var ranked = entries.slice().sort(function (a, b) {
    return perEntry[b].bad - perEntry[a].bad || worst(perEntry[a].counts) - worst(perEntry[b].counts) ||
      entries.indexOf(a) - entries.indexOf(b);
  });
  function cellClass(counts) {
    if (!counts) return "notrun";
    var has = function (list) { return list.some(function (s) { return counts[s]; }); };
    if (has(BAD)) return "bad";
    if (has(["xfail"])) return "xfail";
    if (has(["pass"])) return "pass";
    return "unsupported";
  }
  function renderGrid() {
    var t = document.getElementById("grid"), head = el("tr");
    head.appendChild(el("th", ""));
    checks.forEach(function (ch) { head.appendChild(el("th", ch, "check")); });
    t.appendChild(head);
    ranked.forEach(function (name) {
      var tr = el("tr");
      tr.setAttribute("data-entry", name);
      tr.appendChild(el("th", name, "entry"));
      checks.forEach(function (ch) {
        var counts = perEntry[name].checks[ch], td = el("td"), cls = cellClass(counts);
        var b = el("button", null, "cell c-" + cls), tip = name + " / " + ch + ": " + (counts ? countsText(counts) : "not run");
        b.type = "button"; b.title = tip; b.setAttribute("aria-label", tip);
        b.setAttribute("data-entry", name); b.setAttribute("data-check", ch); b.setAttribute("data-class", cls);
        if (counts) b.addEventListener("click", function () {
          state.entry = name; state.check = ch; state.status = ""; state.q = ""; update();
          document.getElementById("cases").scrollIntoView();
        });
        else b.disabled = true;
        td.appendChild(b); tr.appendChild(td);
      });
      t.appendChild(tr);
    });
  }
  function markGrid() {
    document.querySelectorAll("#grid button.cell").forEach(function (b) {
      var on = b.getAttribute("data-entry") === state.entry && b.getAttribute("data-check") === state.check;
      b.classList.toggle("sel", on);
    });
  }
  function renderEntries() {
    var tb = document.querySelector("#entries tbody");
    ranked.forEach(function (name) {
      var e = perEntry[name], tr = el("tr"), td = el("td"), b = el("button", name, "link");
      tr.setAttribute("data-entry", name);
      b.addEventListener("click", function () { state.entry = name; update(); document.getElementById("cases").scrollIntoView(); });
      td.appendChild(b); tr.appendChild(td);
      tr.appendChild(el("td", e.total, "num"));
      tr.appendChild(el("td", e.bad, e.bad ? "num bad" : "num"));
      tr.appendChild(el("td", countsText(e.counts)));
      tb.appendChild(tr);
    });
  }
  function renderEntryPanel() {
    var panel = document.getElementById("entry-panel");
    panel.textContent = "";
    if (!state.entry || !perEntry[state.entry]) { panel.hidden = true; return; }
    panel.hidden = false;
    var e = perEntry[state.entry];
    var h = el("h2", "Entry " + state.entry + ": " + e.total + " cases, " + e.bad + " not conforming");
    panel.appendChild(h);
    var t = el("table"), head = el("tr");
    ["check"].concat(SEVERITY).forEach(function (s) { head.appendChild(el("th", s)); });
    t.appendChild(head);
    Object.keys(e.checks).forEach(function (ch) {
      var tr = el("tr"), td = el("td"), b = el("button", ch, "link");
      b.addEventListener("click", function () { state.check = ch; update(); });
      td.appendChild(b); tr.appendChild(td);
      SEVERITY.forEach(function (s) {
        var n = e.checks[ch][s] || 0;
        tr.appendChild(el("td", n || "", n && BAD.indexOf(s) >= 0 ? "num bad" : "num"));
      });
      t.appendChild(tr);
    });
    panel.appendChild(t);
  }

  // --- the case table ------------------------------------------------------------------
  function detailRow(c) {
    var tr = el("tr", null, "detail"), td = el("td");
    td.colSpan = 7;
    [["message", c.message], ["reproduce", c.repro], ["reference", c.reference], ["plan", c.plan]]
      .forEach(function (kv) {
        if (!kv[1]) return;
        var d = el("div"); d.appendChild(el("b", kv[0] + ": "));
        d.appendChild(el(kv[0] === "message" ? "pre" : "code", kv[1])); td.appendChild(d);
      });
    tr.appendChild(td);
    return tr;
  }
  function groupRow(g, members) {
    var c = members[0], tr = el("tr", null, "group"), td = el("td");
    td.colSpan = 7;
    tr.setAttribute("data-group", String(g));
    tr.setAttribute("data-status", c.status);
    tr.setAttribute("data-entry", c.entry);
    tr.setAttribute("data-count", String(members.length));
    tr.setAttribute("aria-expanded", openGroups[g] ? "true" : "false");
    td.appendChild(el("span", openGroups[g] ? "\u25BE" : "\u25B8", "tog"));
    td.appendChild(el("span", c.status, "st " + c.status));
    td.appendChild(el("span", members.length + (members.length === 1 ? " case" : " cases"), "n"));
    var chs = [];
    members.forEach(function (m) { if (chs.indexOf(m.check) < 0) chs.push(m.check); });
    td.appendChild(el("span", c.entry + " / " + chs.join(", "), "checks"));
    var msg = c.message.length > 300 ? c.message.slice(0, 299) + "\u2026" : c.message;
    td.appendChild(el("span", members.length === 1 ? c.id + (msg ? ": " + msg : "") : msg, "gmsg"));
    tr.appendChild(td);
    tr.addEventListener("click", function () { openGroups[g] = !openGroups[g]; render(); });
    return tr;
  }
  function render() {
    var hits = cases.filter(matches).sort(compare);
    var tb = document.querySelector("#cases tbody");
    tb.textContent = "";
    var flat = state.view === "flat", shown = [], groupsShown = 0, groupsAll = 0;
    if (flat) {
      shown = hits.slice(0, limit);
      shown.forEach(function (c) { tb.appendChild(caseRow(c, false)); if (open[c.i]) tb.appendChild(detailRow(c)); });
    } else {
      var order = [], members = {};
      hits.forEach(function (c) {
        if (!members[c.group]) { members[c.group] = []; order.push(c.group); }
        members[c.group].push(c);
      });
      groupsAll = order.length;
      order.slice(0, limit).forEach(function (g) {
        groupsShown++;
        tb.appendChild(groupRow(g, members[g]));
        if (!openGroups[g]) return;
        members[g].forEach(function (c) {
          shown.push(c); tb.appendChild(caseRow(c, true));
          if (open[c.i]) tb.appendChild(detailRow(c));
        });
      });
    }
    document.getElementById("count").textContent = flat
      ? "showing " + shown.length + " of " + hits.length + " matching cases (" + cases.length + " in the report)"
      : hits.length + " matching cases in " + groupsAll + " root-cause groups (click a group to open it; " +
        cases.length + " cases in the report)";
    document.getElementById("more").hidden = (flat ? hits.length : groupsAll) <= limit;
    document.querySelectorAll("#cases th[data-key]").forEach(function (th) {
      var k = th.getAttribute("data-key");
      th.setAttribute("aria-sort", k === state.sort ? (state.dir === "asc" ? "ascending" : "descending") : "none");
    });
    document.body.setAttribute("data-rendered", String(shown.length));
    document.body.setAttribute("data-matching", String(hits.length));
    document.body.setAttribute("data-groups", String(flat ? 0 : groupsShown));
  }
  function caseRow(c, inGroup) {
    var tr = el("tr", null, inGroup ? "case in-group" : "case");
    tr.setAttribute("data-status", c.status);
    tr.setAttribute("data-entry", c.entry);
    tr.setAttribute("data-id", c.id);
    tr.appendChild(el("td", c.id, "id"));
    tr.appendChild(el("td", c.entry));
    tr.appendChild(el("td", c.check));
    tr.appendChild(el("td", c.sample));
    var st = el("td"); st.appendChild(el("span", c.status, "st " + c.status)); tr.appendChild(st);
    var msg = c.message.length > 300 ? c.message.slice(0, 299) + "\u2026" : c.message;
    tr.appendChild(el("td", msg, "msg"));
    tr.appendChild(el("td", c.duration_s.toFixed(3), "num"));
    tr.addEventListener("click", function (ev) { ev.stopPropagation(); open[c.i] = !open[c.i]; render(); });
    return tr;
  }
  function update() { writeHash(); syncControls(); markGrid(); renderEntryPanel(); render(); }

  readHash();
  var COLUMNS = ["id", "entry", "check", "sample", "status", "message", "duration_s"];
  if (COLUMNS.indexOf(state.sort) < 0) state.sort = "status";
  if (state.dir !== "desc") state.dir = "asc";
  if (state.view !== "flat") state.view = "";
  window.addEventListener("hashchange", function () { readHash(); syncControls(); markGrid(); renderEntryPanel(); render(); });
  renderGrid(); renderEntries();
  syncControls(); markGrid(); renderEntryPanel(); render();
})();
"""


def _script_json(obj: Any) -> str:
    """JSON that is safe inside a <script> element: no string can close or open a tag."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    for raw, esc in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, esc)
    return text


def _data(result: RunResult) -> dict[str, Any]:
    group_of: dict[int, int] = {}
    for g, group in enumerate(group_cases(result.cases)):
        for c in group.cases:
            group_of[id(c)] = g
    return {
        "severity": list(SEVERITY),
        "statuses": list(STATUSES),
        "bad": sorted(BAD_STATUSES),
        "cases": [
            [
                c.id,
                c.entry,
                c.check,
                c.sample_name or ("" if c.sample is None else f"s{c.sample}"),
                c.status,
                c.message,
                round(c.duration_s, 6),  # as in the JSON: re-rendering is exact
                c.repro,
                c.reference,
                (c.plan or {}).get("id", ""),
                group_of[id(c)],
            ]
            for c in internal_first(result.cases)
        ],
    }


def _meta_rows(md: dict[str, Any]) -> str:
    rows = []
    for key, value in md.items():
        if isinstance(value, list):
            value = " ".join(map(str, value)) if key == "command" else ", ".join(map(str, value))
        rows.append(f"<dt>{html.escape(str(key))}</dt><dd>{html.escape(str(value))}</dd>")
    return "\n".join(rows)


def to_html(result: RunResult) -> str:
    md = result.metadata
    e = html.escape
    verdict = result.verdict  # PASS, FAIL, PARTIAL (a merge lacking shards) or INTERRUPTED
    title = f"afdb report: torch {md.get('torch_version', '?')}, {md.get('device', '?')}, {md.get('dtype', '?')}"
    interrupted = (
        f'<p class="interrupted"><b>Partial</b>: {e(result.verdict_note())}</p>'
        if md.get("partial")
        else '<p class="interrupted"><b>Interrupted</b>: this report holds only the cases that '
        "finished before the run was stopped.</p>"
        if md.get("interrupted")
        else ""
    )
    headers = [
        ("id", "case"),
        ("entry", "entry"),
        ("check", "check"),
        ("sample", "sample"),
        ("status", "status"),
        ("message", "message"),
        ("duration_s", "seconds"),
    ]
    ths = "".join(
        f'<th data-key="{k}" aria-sort="none"><button type="button">{label}</button></th>'
        for k, label in headers
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)}</title>
<style>{STYLE}</style>
</head>
<body>
<h1>{e(title)}</h1>
<p class="verdict"><b class="{verdict}">{verdict}</b>: {e(result.summary_line())}</p>
{interrupted}
<details><summary>Run metadata</summary>
<dl class="meta">
{_meta_rows(md)}
</dl>
</details>
<noscript><p>This report needs JavaScript to show its tables; the JSON report holds the same data.</p></noscript>
<h2>Entry x check</h2>
<div class="legend"><span><i class="c-bad"></i>fail, error, xpass, timeout, crash</span><span><i class="c-xfail"></i>expected failure</span><span><i class="c-pass"></i>pass</span><span><i class="c-unsupported"></i>unsupported or skipped</span><span><i class="c-notrun"></i>not run</span><span>hover: counts; click: the cases</span></div>
<table id="grid"></table>
<h2>Entries</h2>
<table id="entries"><thead><tr><th>entry</th><th>cases</th><th>not conforming</th><th>statuses</th></tr></thead><tbody></tbody></table>
<div id="entry-panel" hidden></div>
<h2>Cases</h2>
<div class="controls">
<input id="q" type="search" placeholder="filter: text in id, entry, check or message" aria-label="filter text">
<select id="status" aria-label="status"></select>
<select id="entry" aria-label="entry"></select>
<select id="check" aria-label="check"></select>
<label><input id="grouped" type="checkbox" checked> group by root cause</label>
<button id="clear" type="button">clear filters</button>
<span id="count" class="count"></span>
</div>
<table id="cases"><thead><tr>{ths}</tr></thead><tbody></tbody></table>
<p><button id="more" type="button" hidden>show more</button></p>
<script type="application/json" id="afdb-data">{_script_json(_data(result))}</script>
<script>{SCRIPT}</script>
</body>
</html>
"""


def write_html(result: RunResult, path: str | Path) -> None:
    write_atomic(path, to_html(result))
