"""`gpuadvisor rules [RULE]`: the rule catalog, or one rule's full documentation."""

from __future__ import annotations

import inspect
import os
import shutil
import sys
import textwrap
from pathlib import Path

import click

from gpuadvisor import engine
from gpuadvisor.commands._options import verbose_option
from gpuadvisor.engine import LoadedRule
from gpuadvisor.render._format import Style, color_enabled, rule_sort_key


@click.command("rules")
@click.argument("rule", required=False)
@click.option(
    "--rules",
    "rules_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Also load rules from the *.py files of DIR. Repeatable.",
)
@click.option("--markdown", is_flag=True, help="Print the catalog (or the rule) as Markdown (docs/rules.md).")
@verbose_option
def rules(rule: str | None, rules_dirs: tuple[Path, ...], markdown: bool, verbose: bool) -> None:
    """List the rules (id, name, category, summary), or print RULE's documentation (id or name).

    \b
    Exit codes: 0 ok; 2 unknown rule (close matches are suggested) or a broken rules folder.
    """
    del verbose  # only the error boundary reads it
    loaded = sorted(engine.load_rules(rules_dirs), key=lambda r: rule_sort_key(r.id))
    style = Style(not markdown and color_enabled(sys.stdout))
    if rule is None:
        text = catalog_markdown(loaded) if markdown else catalog_table(loaded, style, terminal_width())
    else:
        cls = engine.find_rule([r.cls for r in loaded], rule)
        item = next(r for r in loaded if r.cls is cls)
        text = rule_markdown(item) if markdown else rule_text(item, style)
    click.echo(text, nl=False, color=style.enabled or None)


# the summary column keeps at least this many characters a line, whatever the terminal's width
MIN_SUMMARY_WIDTH = 30


def terminal_width() -> int | None:
    """The width to wrap to: $COLUMNS when set, else the terminal's when stdout is one; None when piped
    (one line per rule, for grep)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def catalog_table(loaded: list[LoadedRule], style: Style | None = None, width: int | None = None) -> str:
    """A table: ID, NAME, CATEGORY, SUMMARY, in natural rule order (GA101 before GA1001). With `width`,
    the summary wraps under its own column to fit it."""
    st = style or Style()
    rows = [("ID", "NAME", "CATEGORY", "SUMMARY")]
    rows += [
        (r.id, r.name, r.cls.category.value, r.cls.summary())
        for r in sorted(loaded, key=lambda r: rule_sort_key(r.id))
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    indent = sum(widths) + 6
    below = width is not None and width - indent - 1 < MIN_SUMMARY_WIDTH
    if below:  # too narrow for a summary column: each summary goes under its row, indented
        indent = 4
    lines = []
    for i, (a, b, c, d) in enumerate(rows):
        summary = [d]
        if width is not None:
            summary = textwrap.wrap(d, max(MIN_SUMMARY_WIDTH, width - indent - 1)) or [""]
            if below:
                summary = ["", *summary] if i else [""]
        cells = f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c:<{widths[2]}}  {summary[0]}".rstrip()
        if i == 0:
            lines.append(st.dim(cells))
        else:  # the id in bold; padding measured on the plain text
            lines.append(st.bold(a) + cells[len(a) :])
        lines.extend(" " * indent + more for more in summary[1:])
    return "\n".join(lines) + "\n"


def _requires(item: LoadedRule) -> str:
    return ", ".join(sorted(r.value for r in item.cls.requires)) or "nothing beyond the trace"


def rule_text(item: LoadedRule, style: Style | None = None) -> str:
    """One rule's documentation: header, docstring, requires, thresholds with defaults, source."""
    cls = item.cls
    st = style or Style()
    lines = [st.bold(f"{cls.id} {cls.name}") + f" ({cls.category.value})", ""]
    lines.append(inspect.getdoc(cls) or "")
    lines += ["", f"Requires: {_requires(item)}"]
    if cls.aliases:
        lines.append(f"Aliases: {', '.join(cls.aliases)}")
    if cls.thresholds:
        lines.append(
            "Thresholds (override with --threshold ID.KEY=VALUE or [tool.gpuadvisor.thresholds.ID]):"
        )
        for key, thr in sorted(cls.thresholds.items()):
            unit = f" {thr.unit}" if thr.unit else ""
            lines.append(f"  {key} = {thr.default:g}{unit}: {thr.description}")
    else:
        lines.append("Thresholds: none")
    if cls.references:
        lines.append("References:")
        lines.extend(f"  {ref}" for ref in cls.references)
    if item.origin != "builtin":
        lines.append(f"Source: {item.source}")
    return "\n".join(lines).rstrip() + "\n"


def rule_markdown(item: LoadedRule) -> str:
    """One rule as a Markdown section (docstring sections become subheadings)."""
    cls = item.cls
    doc = inspect.getdoc(cls) or ""
    out = [
        f"## {cls.id} {cls.name}",
        "",
        f"Category: `{cls.category.value}`. Requires: {_requires(item)}.",
        "",
    ]
    doc_lines = doc.splitlines()
    i = 0
    while i < len(doc_lines):
        line = doc_lines[i]
        underline = doc_lines[i + 1] if i + 1 < len(doc_lines) else ""
        if (
            line.strip()
            and underline.strip()
            and set(underline.strip()) <= {"-", "="}
            and len(underline.strip()) >= 3
        ):
            out.append(f"### {line.strip()}")
            i += 2
            continue
        out.append(line)
        i += 1
    out = _fence_code(out)
    if cls.thresholds:
        out += ["", "### Thresholds", "", "| key | default | unit | meaning |", "|---|---|---|---|"]
        for key, thr in sorted(cls.thresholds.items()):
            out.append(f"| `{key}` | {thr.default:g} | {thr.unit} | {thr.description} |")
    if cls.references:
        out += ["", "### References", ""] + [f"- {ref}" for ref in cls.references]
    return "\n".join(out).rstrip() + "\n"


def _fence_code(lines: list[str]) -> list[str]:
    """Indented (reST-style, after a `::` line) blocks become fenced python blocks for Markdown."""
    out: list[str] = []
    in_block = False
    for line in lines:
        indented = line.startswith("    ") or (in_block and not line.strip())
        if (
            not in_block
            and line.startswith("    ")
            and out
            and (not out[-1].strip() or out[-1].rstrip().endswith("::"))
        ):
            if out[-1].rstrip().endswith("::"):
                out[-1] = out[-1].rstrip()[:-1]
            out.append("```python")
            in_block = True
        elif in_block and not indented:
            while out and not out[-1].strip():
                out.pop()
            out += ["```", ""]
            in_block = False
        out.append(line[4:] if in_block and line.startswith("    ") else line)
    if in_block:
        while out and not out[-1].strip():
            out.pop()
        out.append("```")
    return out


def catalog_markdown(loaded: list[LoadedRule]) -> str:
    """docs/rules.md: generated with `gpuadvisor rules --markdown > docs/rules.md`."""
    out = [
        "# gpuadvisor rules",
        "",
        "<!-- generated by `gpuadvisor rules --markdown > docs/rules.md`; do not edit by hand -->",
        "",
        "| id | name | category | summary |",
        "|---|---|---|---|",
    ]
    ordered = sorted(loaded, key=lambda r: rule_sort_key(r.id))
    out += [f"| {r.id} | `{r.name}` | `{r.cls.category.value}` | {r.cls.summary()} |" for r in ordered]
    out.append("")
    for r in ordered:
        out.append(rule_markdown(r))
    return "\n".join(out).rstrip() + "\n"
