"""The layout of REAL reports in headless Chromium at 1400 px (issue 42 item 1; marker `browser`, skipped
without Chromium): no table row taller than three lines of text, no column clipped or pushed out of
view, and a page no more than 10% taller than the same page with every table cell allowed to wrap.

The reports are those of tests/report/real_reports.py: a planted problem, a control, the DDP job and a
CPU-only run recorded here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report import browser_check, layout_check
from tests.report.real_reports import REPORTS, write_real_report

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(
        browser_check.find_chromium() is None, reason="needs headless Chromium (apt-get install chromium)"
    ),
]


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_real_report_tables_fit_at_1400_px(tmp_path: Path, name: str) -> None:
    report = write_real_report(name, tmp_path)
    layout = layout_check.measure(report, width=1400)
    assert layout.get("rows", 0) > 20, layout  # the measuring script ran over the page's tables
    assert layout_check.problems(layout) == [], layout


_CRAMPED = """<!DOCTYPE html><html><head><style>
.ga-table {{ border-collapse: collapse; width: 100%; }} .ga-table td {{ padding: 3px 8px; white-space: nowrap; }}
.ga-table td.ga-name {{ white-space: normal; word-break: break-all; }}
main {{ max-width: 900px; }} .ga-scroll {{ overflow-x: auto; }}
</style></head><body><main><div class="ga-scroll"><table class="ga-table">
{rows}
</table></div></main><div id="ga-render-status" data-done="1" hidden></div></body></html>"""


def test_the_layout_check_fails_on_the_layout_issue_42_found(tmp_path: Path) -> None:
    """A table like the old Top kernels one: a long note in a cell that cannot wrap squeezes the name
    column into a tall row and pushes the last column out of view. All three checks must say so."""
    note = "0% (Kineto's estimate reads 0 for library GEMM/conv/attention kernels that run few large blocks) "
    row = f'<tr><td class="ga-name">{"cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align4" * 3}</td><td>{note * 2}</td><td>yes</td></tr>'
    page = tmp_path / "cramped.html"
    page.write_text(_CRAMPED.format(rows=row * 40), encoding="utf-8")
    found = layout_check.problems(layout_check.measure(page, width=1400))
    assert any(p.startswith("row ") for p in found), found
    assert any(p.startswith("clipped table") for p in found), found
    assert any(p.startswith("page ") for p in found), found
