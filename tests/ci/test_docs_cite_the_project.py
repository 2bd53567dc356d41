"""The project cites only its own documents (issue 42 item 8): code, tests and docs said "the contract of
DESIGN.md", "FIELD_NOTES" and "../shared/docs/RELIABILITY.md", files that are not in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ABSENT = re.compile(r"\b(?:DESIGN\.md|FIELD_NOTES(?:\.md)?|RELIABILITY\.md|STYLE\.md)\b|shared/docs/")
WHERE = ("README.md", "docs", "gpuadvisor", "rules", "tests", "benchmarks", "scripts", "sample_runs")
THIS = Path(__file__).resolve()


def test_no_citation_of_a_document_outside_the_repository() -> None:
    cited: list[str] = []
    for top in WHERE:
        base = ROOT / top
        files = (
            [base]
            if base.is_file()
            else [p for p in base.rglob("*") if p.suffix in (".py", ".md", ".sh", ".j2")]
        )
        for path in files:
            if path.resolve() == THIS:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if ABSENT.search(line):
                    cited.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not cited, "\n".join(cited)


def test_the_documents_cited_instead_exist() -> None:
    text = (ROOT / "docs" / "trace-inputs.md").read_text(encoding="utf-8")
    assert "## Facts from real traces the analysis relies on" in text
    assert "## Faults and bad input: the 24 reliability cases" in (ROOT / "docs" / "capture.md").read_text(
        encoding="utf-8"
    )
