"""Open a gpuadvisor HTML report in headless Chromium and check that it rendered.

Usage (also used by tests/report/test_browser.py):

    python tests/report/browser_check.py REPORT.html [--screenshot OUT.png] [--height 4000]

Prints a JSON object {charts, charts_ok, errors: [...], done, findings, code_blocks} and exits 0 when
every chart drew its plotly SVG, no script error was recorded, and the render finished; 1 otherwise;
2 when no Chromium is installed. The page itself records the outcome in
`<div id="ga-render-status" data-charts=.. data-charts-ok=.. data-errors=.. data-done=..>` (see
gpuadvisor/templates/report.js); this script reads it from `chromium --dump-dom`.
Chromium on Debian: `apt-get install -y chromium` (chromium-driver is not needed for this script).
"""

from __future__ import annotations

import argparse
import html.parser
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--virtual-time-budget=15000",  # let plotly finish its (promise-based) drawing before the dump
)


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class _StatusParser(html.parser.HTMLParser):
    """Reads the status element, its error list, and counts findings and code blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.status: dict[str, str] = {}
        self.errors: list[str] = []
        self.findings = 0
        self.code_blocks = 0
        self.chart_svgs: dict[str, int] = {}
        self._in_status = False
        self._in_li = False
        self._chart_stack: list[str] = []
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        if a.get("id") == "ga-render-status":
            self.status = a
            self._in_status = True
        if self._in_status and tag == "li":
            self._in_li = True
            self.errors.append("")
        if tag == "article" and "ga-finding" in classes:
            self.findings += 1
        if tag == "pre" and ("ga-code" in classes or "ga-source-lines" in classes):
            self.code_blocks += 1
        if tag == "div" and "ga-chart" in classes and a.get("id"):
            self.chart_svgs.setdefault(a["id"], 0)
            self._current_chart = a["id"]
        if tag == "svg" and "main-svg" in classes and getattr(self, "_current_chart", None):
            self.chart_svgs[self._current_chart] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "li":
            self._in_li = False
        if tag == "section":
            self._current_chart = None  # type: ignore[assignment]
        if tag == "div" and self._in_status and not self._in_li:
            self._in_status = False

    def handle_data(self, data: str) -> None:
        if self._in_li and self.errors:
            self.errors[-1] += data


def check(
    report: Path, *, screenshot: Path | None = None, height: int = 4000, timeout: float = 120.0
) -> dict[str, Any]:
    """Render `report` headless; return the status (raises FileNotFoundError without Chromium)."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("no chromium binary found (apt-get install -y chromium)")
    url = report.resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="ga-chromium-") as profile:
        base = [chromium, *FLAGS, f"--user-data-dir={profile}", "--window-size=1400,1000"]
        proc = subprocess.run(
            [*base, "--enable-logging=stderr", "--v=0", "--dump-dom", url],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if screenshot is not None:
            subprocess.run(
                [*base[:-1], f"--window-size=1400,{height}", f"--screenshot={screenshot.resolve()}", url],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                cwd=profile,
            )
    parser = _StatusParser()
    parser.feed(proc.stdout)
    console_errors = [
        line
        for line in proc.stderr.splitlines()
        if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)
    ]
    st = parser.status
    return {
        "charts": int(st.get("data-charts", "-1") or -1),
        "charts_ok": int(st.get("data-charts-ok", "0") or 0),
        "chart_svgs": parser.chart_svgs,
        "errors": [e for e in parser.errors if e] + console_errors,
        "errors_count": int(st.get("data-errors", "0") or 0),
        "done": st.get("data-done") == "1",
        "findings": parser.findings,
        "code_blocks": parser.code_blocks,
        "returncode": proc.returncode,
        "dom_bytes": len(proc.stdout),
    }


def ok(status: dict[str, Any]) -> bool:
    return bool(
        status["done"]
        and status["charts"] >= 0
        and status["charts_ok"] == status["charts"]
        and not status["errors"]
        and status["errors_count"] == 0
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("report", type=Path)
    parser.add_argument("--screenshot", type=Path, default=None)
    parser.add_argument("--height", type=int, default=4000)
    args = parser.parse_args(argv)
    try:
        status = check(args.report, screenshot=args.screenshot, height=args.height)
    except FileNotFoundError as err:
        print(f"browser_check: {err}", file=sys.stderr)
        return 2
    print(json.dumps(status, indent=2, sort_keys=True))
    return 0 if ok(status) else 1


if __name__ == "__main__":
    sys.exit(main())
