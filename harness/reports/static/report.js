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
  // The grid is drawn by the page itself (worst entry first, one cell per entry and check,
  // split in proportion where its cases differ); the script makes its cells filter the cases.
  var ranked = DATA.ranked;
  function wireGrid() {
    document.querySelectorAll("#grid button.cell").forEach(function (b) {
      if (b.disabled) return;
      var name = b.getAttribute("data-entry"), ch = b.getAttribute("data-check");
      b.addEventListener("click", function () {
        state.entry = name; state.check = ch; state.status = ""; state.q = ""; update();
        document.getElementById("cases").scrollIntoView();
      });
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
  wireGrid(); renderEntries();
  syncControls(); markGrid(); renderEntryPanel(); render();
})();
