"""The README's figures come from the repository, so they cannot go stale (issue 42 item 8): the
example output is the real output of its command, the counts of workload scripts and controls are the
catalog's, every `profile` option is in the options table. (The recordings by GPU: tests/test_sample_runs.py.)

When a change of the analysis changes the example, regenerate it:
    NO_COLOR=1 gpuadvisor analyze sample_runs/transfer_bound-planted
and paste it between the ```text fences under "Example: what it prints".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from click.testing import CliRunner

from gpuadvisor.cli import cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_example_output_is_what_the_command_prints() -> None:
    m = re.search(
        r"Real output of `gpuadvisor analyze sample_runs/transfer_bound-planted`.*?```text\n(.*?)```",
        README,
        re.S,
    )
    assert m, "README.md: the example block under 'Example: what it prints' is missing"
    res = CliRunner().invoke(
        cli, ["analyze", str(ROOT / "sample_runs" / "transfer_bound-planted")], env={"NO_COLOR": "1"}
    )
    assert res.exit_code == 0, res.output  # no gate without --fail-on
    printed = res.stdout.replace(str(ROOT) + "/", "")
    assert m.group(1) == printed, "README.md's example output is stale; see this module's docstring"


def test_the_workload_counts_are_the_catalogs() -> None:
    sys.path.insert(0, str(ROOT))
    from benchmarks.catalog import CATALOG

    scripts = [p for p in (ROOT / "benchmarks" / "workloads").glob("*.py") if not p.name.startswith("_")]
    controls = sum(1 for w in CATALOG if w.control)
    said = re.search(r"holds (\d+) scripts \((\d+) in `benchmarks/catalog.py`", README)
    assert said and (int(said.group(1)), int(said.group(2))) == (len(scripts), len(CATALOG)), said
    assert f"and {controls} well-tuned controls" in README
    recorded = sum(1 for p in (ROOT / "sample_runs").iterdir() if p.is_dir() and p.name.startswith("control_"))
    assert f"the {recorded} recorded controls have no high or medium finding" in README


def test_every_profile_option_is_in_the_options_table() -> None:
    from gpuadvisor.commands.profile import profile

    table = README.split("| option | default | meaning |")[1].split("\n\n")[0]
    missing = [
        opt
        for param in profile.params
        for opt in param.opts[:1]
        if opt.startswith("-")
        and opt not in ("-h", "--help")
        and f"`{opt}" not in table
        and f"{opt}`" not in table
    ]
    assert not missing, f"README.md's profile options table lacks {missing}"
