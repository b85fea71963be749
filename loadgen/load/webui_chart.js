// The "Batch invariance" tab's live charts, placed beside Locust's table and redrawn whenever the
// table changes (Locust refreshes the table from its own stats poll, so the charts follow it).
// Served by loadgen/load/webui.py, which says why; the charts themselves are drawn by the server
// (loadgen/load/live_chart.py, every label escaped there), fetched from this page's own origin.
(function () {
  "use strict";
  var TAB = "batch-invariance";
  var SOURCE = "/loadgen/live-chart";
  var BOX_ID = "loadgen-live-chart";
  var drawnFor = null; // the table text the charts were last fetched for
  var asked = 0; // fetches started: a late answer to an older one is dropped
  var queued = false;

  function liveTable() {
    if (new URLSearchParams(window.location.search).get("tab") !== TAB) return null;
    var heads = document.querySelectorAll("th");
    for (var i = 0; i < heads.length; i++) {
      if (heads[i].textContent === "Unique completions") return heads[i].closest("table");
    }
    return null;
  }

  function redraw(box) {
    var mine = ++asked;
    fetch(SOURCE, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { if (mine === asked) box.innerHTML = html; })
      .catch(function () { drawnFor = null; }); // try again with the next change of the table
  }

  function sync() {
    queued = false;
    var table = liveTable();
    var box = document.getElementById(BOX_ID);
    if (table === null) {
      if (box !== null) box.remove(); // another tab: React replaced the table, not this box
      return;
    }
    var container = table.closest(".MuiTableContainer-root") || table;
    if (box === null || box.previousElementSibling !== container) {
      if (box !== null) box.remove();
      box = document.createElement("div");
      box.id = BOX_ID;
      container.after(box);
      drawnFor = null;
    }
    var body = table.tBodies.length ? table.tBodies[0].textContent : "";
    if (body !== drawnFor) {
      drawnFor = body;
      redraw(box);
    }
  }

  new MutationObserver(function () {
    if (!queued) {
      queued = true;
      window.setTimeout(sync, 50);
    }
  }).observe(document.body, { childList: true, subtree: true, characterData: true });
})();
