// Sluice contamination report: click-to-sort headers and evidence filters. No dependencies.
(function () {
  "use strict";
  function cellValue(row, idx, numeric) {
    var cell = row.cells[idx];
    var raw = cell ? (cell.getAttribute("data-v") !== null ? cell.getAttribute("data-v") : cell.textContent) : "";
    if (numeric) { var x = parseFloat(raw); return isNaN(x) ? -Infinity : x; }
    return raw.trim().toLowerCase();
  }
  function makeSortable(table) {
    var headers = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(headers, function (th, idx) {
      th.addEventListener("click", function () {
        var numeric = th.getAttribute("data-type") === "num";
        var asc = !th.classList.contains("asc");
        Array.prototype.forEach.call(headers, function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(asc ? "asc" : "desc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var va = cellValue(a, idx, numeric), vb = cellValue(b, idx, numeric);
          if (va < vb) return asc ? -1 : 1;
          if (va > vb) return asc ? 1 : -1;
          return 0;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }
  function setupFilters() {
    var table = document.getElementById("evidence-table");
    if (!table) return;
    var q = document.getElementById("ev-filter");
    var det = document.getElementById("ev-detector");
    var bench = document.getElementById("ev-benchmark");
    var removedOnly = document.getElementById("ev-removed");
    var count = document.getElementById("ev-count");
    function apply() {
      var text = (q.value || "").toLowerCase();
      var shown = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var ok = true;
        if (text && row.textContent.toLowerCase().indexOf(text) < 0) ok = false;
        if (ok && det.value && (" " + row.getAttribute("data-detectors") + " ").indexOf(" " + det.value + " ") < 0) ok = false;
        if (ok && bench.value && row.getAttribute("data-benchmark") !== bench.value) ok = false;
        if (ok && removedOnly.checked && row.getAttribute("data-removed") !== "1") ok = false;
        row.style.display = ok ? "" : "none";
        if (ok) shown += 1;
      });
      count.textContent = shown + " of " + table.tBodies[0].rows.length + " shown";
    }
    [q, det, bench, removedOnly].forEach(function (el) {
      el.addEventListener("input", apply);
      el.addEventListener("change", apply);
    });
    apply();
  }
  document.addEventListener("DOMContentLoaded", function () {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), makeSortable);
    setupFilters();
  });
})();
