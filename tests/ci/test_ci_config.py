"""[tool.gpuadvisor] loading, validation and CLI precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuadvisor.config import AnalysisConfig, load_config, merge, parse_threshold_assignments
from gpuadvisor.errors import EXIT_USAGE, ConfigError

EXAMPLE = """
[project]
name = "demo"

[tool.gpuadvisor]
fail-on = "medium"
select = ["host_sync", "GA3"]
ignore = ["GA801"]
rules-dirs = ["myrules"]

[tool.gpuadvisor.thresholds.GA201]
min_impact = 0.03

[tool.gpuadvisor.thresholds.pageable-copies]
min_bytes = 65536
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_any_pyproject(tmp_path: Path) -> None:
    config = load_config(start=tmp_path)
    assert config == AnalysisConfig()
    assert config.fail_on is None and config.select == () and config.source is None


def test_nearest_pyproject_upward(tmp_path: Path) -> None:
    (tmp_path / "myrules").mkdir()
    pyproject = write(tmp_path / "pyproject.toml", EXAMPLE)
    # a nested pyproject without [tool.gpuadvisor] is passed over
    write(tmp_path / "pkg" / "pyproject.toml", "[project]\nname = 'inner'\n")
    deep = tmp_path / "pkg" / "src" / "deeper"
    deep.mkdir(parents=True)
    config = load_config(start=deep)
    assert config.source == pyproject.resolve()
    assert config.fail_on == "medium"
    assert config.select == ("host_sync", "GA3")
    assert config.ignore == ("GA801",)
    assert dict(config.thresholds["GA201"]) == {"min_impact": 0.03}
    assert dict(config.thresholds["pageable-copies"]) == {"min_bytes": 65536.0}
    assert config.rules_dirs == ((tmp_path / "myrules").resolve(),)


def test_explicit_file_and_standalone_toml(tmp_path: Path) -> None:
    standalone = write(tmp_path / "gpuadvisor.toml", 'fail_on = "low"\nignore = ["GA1"]\n')
    config = load_config(start=tmp_path, explicit=standalone)
    assert config.fail_on == "low" and config.ignore == ("GA1",) and config.source == standalone.resolve()
    none_gate = write(tmp_path / "p" / "pyproject.toml", '[tool.gpuadvisor]\nfail-on = "none"\n')
    assert load_config(explicit=none_gate).fail_on is None


def test_config_is_immutable(tmp_path: Path) -> None:
    config = AnalysisConfig(thresholds={"GA201": {"min_impact": 0.1}})
    with pytest.raises(TypeError):
        config.thresholds["GA201"]["min_impact"] = 0.5  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('fail-on = "severe"', "fail-on must be one of high, medium, low, none"),
        ("fail-on = 3", "fail-on must be one of"),
        ('colour = "red"', "colour: unknown key"),
        ("select = [1, 2]", "select must be a list of non-empty strings"),
        ('ignore = [""]', "ignore must be a list of non-empty strings"),
        ('thresholds = "x"', "thresholds must be a table"),
        ("[tool.gpuadvisor.thresholds]\nGA201 = 3", "thresholds.GA201 must be a table"),
        (
            '[tool.gpuadvisor.thresholds.GA201]\nmin_impact = "a lot"',
            "thresholds.GA201.min_impact must be a number",
        ),
        (
            "[tool.gpuadvisor.thresholds.GA201]\nmin_impact = true",
            "thresholds.GA201.min_impact must be a number",
        ),
        ("[tool.gpuadvisor.thresholds.GA201]\nmin_impact = nan", "must be a finite number"),
        ('rules-dirs = ["nowhere"]', "rules-dirs: 'nowhere' is not a directory"),
        ('fail-on = "high"\nfail_on = "low"', "given twice"),
    ],
)
def test_bad_config_is_one_line_config_error(tmp_path: Path, body: str, needle: str) -> None:
    path = write(tmp_path / "pyproject.toml", f"[tool.gpuadvisor]\n{body}\n")
    with pytest.raises(ConfigError) as info:
        load_config(start=tmp_path)
    message = str(info.value)
    assert needle in message
    assert str(path) in message  # names the file
    assert "\n" not in message
    assert info.value.exit_code == EXIT_USAGE


def test_invalid_toml_and_missing_explicit(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.gpuadvisor\nfail-on=")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(start=tmp_path)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(explicit=tmp_path / "missing.toml")
    # RELIABILITY (issue 12): an array nested 3000 deep is a clear exit-2 error, not a RecursionError
    deep = tmp_path / "deep"
    write(deep / "pyproject.toml", "[tool.gpuadvisor]\nx = " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply") as info:
        load_config(start=deep)
    assert info.value.exit_code == EXIT_USAGE


def test_cli_overrides_pyproject(tmp_path: Path) -> None:
    (tmp_path / "myrules").mkdir()
    (tmp_path / "clirules").mkdir()
    config = load_config(explicit=write(tmp_path / "pyproject.toml", EXAMPLE))
    # nothing given on the command line: configuration stays
    assert merge(config) == config
    merged = merge(
        config,
        select=["GA2"],
        ignore=["GA999"],
        fail_on="low",
        thresholds={"GA201": {"max_calls": 2}, "GA501": {"min_kernels": 10}},
        rules_dirs=[tmp_path / "clirules"],
    )
    assert merged.select == ("GA2",)  # replaced, not extended
    assert merged.ignore == ("GA999",)
    assert merged.fail_on == "low"
    # thresholds merge per rule and key
    assert dict(merged.thresholds["GA201"]) == {"max_calls": 2.0, "min_impact": 0.03}
    assert dict(merged.thresholds["GA501"]) == {"min_kernels": 10.0}
    assert dict(merged.thresholds["pageable-copies"]) == {"min_bytes": 65536.0}
    assert merged.rules_dirs == ((tmp_path / "myrules").resolve(), (tmp_path / "clirules").resolve())
    assert merge(config, fail_on="none").fail_on is None
    with pytest.raises(ConfigError, match="--fail-on must be one of"):
        merge(config, fail_on="critical")


def test_parse_threshold_assignments() -> None:
    assert parse_threshold_assignments(["GA201.min_impact=0.03", "GA201.max=2", "x.y = 1e3"]) == {
        "GA201": {"min_impact": 0.03, "max": 2.0},
        "x": {"y": 1000.0},
    }
    for bad in ("GA201=0.3", "GA201.min_impact", "GA201.min_impact=abc", ".x=1", "GA201.x=inf"):
        with pytest.raises(ConfigError, match="--threshold"):
            parse_threshold_assignments([bad])
