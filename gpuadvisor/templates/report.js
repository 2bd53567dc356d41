/* gpuadvisor report: draw the charts from their embedded JSON and record the outcome in
   #ga-render-status (data-charts-ok, data-errors, data-done) so headless browser tests can check it. */
(function () {
  "use strict";
  var status = document.getElementById("ga-render-status");
  var list = status.querySelector("ul");
  var errors = window.__gaErrors || [];
  function sync() {
    status.setAttribute("data-errors", String(errors.length));
    while (list.firstChild) { list.removeChild(list.firstChild); }
    errors.forEach(function (msg) {
      var li = document.createElement("li");
      li.textContent = msg;
      list.appendChild(li);
    });
  }
  function fail(msg) { errors.push(String(msg)); sync(); }
  window.addEventListener("error", sync);
  var divs = Array.prototype.slice.call(document.querySelectorAll("div.ga-chart[data-figure]"));
  var pending = [];
  divs.forEach(function (div) {
    var fig;
    try {
      fig = JSON.parse(document.getElementById(div.getAttribute("data-figure")).textContent);
    } catch (e) { fail("figure " + div.id + ": " + e.message); return; }
    if (typeof window.Plotly === "undefined") { fail("plotly.js is not loaded (offline with --cdn, or the shared plotly-*.min.js missing beside this report?)"); return; }
    var config = { responsive: true, displaylogo: false, scrollZoom: false,
                   modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"] };
    try {
      pending.push(window.Plotly.newPlot(div, fig.data, fig.layout, config).catch(function (e) {
        fail("figure " + div.id + ": " + (e && e.message ? e.message : e));
      }));
    } catch (e) { fail("figure " + div.id + ": " + e.message); }
  });
  Promise.all(pending).then(function () {
    var ok = divs.filter(function (d) { return d.querySelector(".main-svg") !== null; }).length;
    status.setAttribute("data-charts-ok", String(ok));
    sync();
    status.setAttribute("data-done", "1");
  });
})();
