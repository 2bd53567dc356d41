"""Measure the layout of a gpuadvisor HTML report in headless Chromium (issue 42: a report a person can read).

Usage (also used by tests/report/test_browser_layout.py):

    python tests/report/layout_check.py REPORT.html [--width 1400]

Prints a JSON object and exits 0 when the page passes the three checks below, 1 otherwise, 2 without
Chromium. A copy of the report gets a measuring script (this file's `_MEASURE`) that runs once the
report's own script has drawn the charts (`#ga-render-status[data-done="1"]`); it writes what it
measured into `<div id="ga-layout" data-json=...>`, read back from `chromium --dump-dom`:

- `tall_rows`: table rows taller than three lines of text (with the cells' padding; every `<details>`
  opened first except a long evidence value's own, which exists to be folded);
- `clipped`: a table wider than its scroll box (a column pushed out of view), or a cell whose content
  is wider than the cell (cut at its edge);
- `height` / `wrapped_height`: the page's height as rendered, and with every table cell allowed to
  wrap (`white-space: normal; word-break: break-word`): a page more than 10% taller than its wrapped
  self spends its height on cells that cannot wrap.
"""

from __future__ import annotations

import argparse
import html.parser
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.report.browser_check import FLAGS, find_chromium

MAX_LINES = 3.0
MAX_HEIGHT_RATIO = 1.10

_MEASURE = r"""
<script>
(function () {
  "use strict";
  function lineHeight(el) {
    var cs = getComputedStyle(el);
    var lh = parseFloat(cs.lineHeight);
    return isNaN(lh) ? 1.2 * parseFloat(cs.fontSize) : lh;
  }
  function describe(el) {
    var table = el.closest("table");
    var section = el.closest("section");
    var head = section ? section.querySelector("h2") : null;
    return (head ? head.textContent.trim().slice(0, 40) : "?") + " | " +
      (table ? (table.className || "table") : "") + " | " + el.textContent.trim().replace(/\s+/g, " ").slice(0, 90);
  }
  function measure() {
    var out = {tall_rows: [], clipped: [], rows: 0};
    var root = document.documentElement;
    out.height = root.scrollHeight;
    var style = document.createElement("style");
    style.textContent = ".ga-table td, .ga-table th { white-space: normal !important; " +
      "word-break: break-word !important; }";
    document.head.appendChild(style);
    out.wrapped_height = root.scrollHeight;
    style.remove();
    Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) {
      if (!d.classList.contains("ga-long")) { d.open = true; }
    });
    Array.prototype.forEach.call(document.querySelectorAll("table.ga-table tr"), function (tr) {
      out.rows += 1;
      var limit = 0;
      Array.prototype.forEach.call(tr.cells, function (cell) {
        var cs = getComputedStyle(cell);
        var pad = parseFloat(cs.paddingTop) + parseFloat(cs.paddingBottom) +
          parseFloat(cs.borderTopWidth) + parseFloat(cs.borderBottomWidth);
        limit = Math.max(limit, MAX_LINES * lineHeight(cell) + pad + 2);
      });
      var h = tr.getBoundingClientRect().height;
      if (h > limit) {
        out.tall_rows.push({height: Math.round(h), limit: Math.round(limit), row: describe(tr)});
      }
      Array.prototype.forEach.call(tr.cells, function (cell) {
        if (cell.scrollWidth > cell.clientWidth + 1) {
          out.clipped.push({what: "cell", over: cell.scrollWidth - cell.clientWidth, cell: describe(cell)});
        }
      });
    });
    Array.prototype.forEach.call(document.querySelectorAll("table.ga-table"), function (table) {
      var box = table.parentElement;
      var over = table.scrollWidth - box.clientWidth;
      if (over > 1) {
        out.clipped.push({what: "table", over: over, cell: describe(table.rows[0] || table)});
      }
    });
    var div = document.createElement("div");
    div.id = "ga-layout";
    div.setAttribute("data-json", JSON.stringify(out));
    document.body.appendChild(div);
  }
  var MAX_LINES = __MAX_LINES__;
  var tries = 0;
  function wait() {
    var status = document.getElementById("ga-render-status");
    if ((status && status.getAttribute("data-done") === "1") || tries > 200) { measure(); return; }
    tries += 1;
    setTimeout(wait, 50);
  }
  window.addEventListener("load", wait);
})();
</script>
"""


class _LayoutParser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.data: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id") == "ga-layout":
            self.data = a.get("data-json")


def measure(report: Path, *, width: int = 1400, timeout: float = 120.0) -> dict[str, Any]:
    """Render a copy of `report` at `width` px; return what `_MEASURE` found (FileNotFoundError without
    Chromium). The copy sits beside the report, so a shared plotly.js next to it still loads."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("no chromium binary found (apt-get install -y chromium)")
    page = report.read_text(encoding="utf-8")
    script = _MEASURE.replace("__MAX_LINES__", repr(MAX_LINES))
    marker = "</body>"
    at = page.rfind(marker)
    measured = page[:at] + script + page[at:] if at >= 0 else page + script
    copy = report.with_name(f".layout-{report.name}")
    copy.write_text(measured, encoding="utf-8")
    try:
        with tempfile.TemporaryDirectory(prefix="ga-chromium-") as profile:
            proc = subprocess.run(
                [
                    chromium,
                    *FLAGS,
                    f"--user-data-dir={profile}",
                    f"--window-size={width},1000",
                    "--dump-dom",
                    copy.resolve().as_uri(),
                ],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
    finally:
        copy.unlink(missing_ok=True)
    parser = _LayoutParser()
    parser.feed(proc.stdout)
    if parser.data is None:
        return {"error": "the measuring script wrote nothing", "returncode": proc.returncode}
    out: dict[str, Any] = json.loads(parser.data)
    out["width"] = width
    return out


def problems(layout: dict[str, Any]) -> list[str]:
    """What fails the three checks, one line each (empty: the page passes)."""
    if "error" in layout:
        return [str(layout["error"])]
    out = [f"row {r['height']} px > {r['limit']} px (3 lines): {r['row']}" for r in layout["tall_rows"]]
    out += [f"clipped {c['what']} by {c['over']} px: {c['cell']}" for c in layout["clipped"]]
    if layout["height"] > MAX_HEIGHT_RATIO * layout["wrapped_height"]:
        out.append(
            f"page {layout['height']} px tall, {layout['wrapped_height']} px with every cell wrapping "
            f"(more than {MAX_HEIGHT_RATIO - 1:.0%} taller)"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("report", type=Path)
    parser.add_argument("--width", type=int, default=1400)
    args = parser.parse_args(argv)
    try:
        layout = measure(args.report, width=args.width)
    except FileNotFoundError as err:
        print(f"layout_check: {err}", file=sys.stderr)
        return 2
    found = problems(layout)
    print(json.dumps({**layout, "problems": found}, indent=2, sort_keys=True))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
