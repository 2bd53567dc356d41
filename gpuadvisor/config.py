"""Analysis configuration: `[tool.gpuadvisor]` in pyproject.toml, merged with command-line options.

Example (pyproject.toml)::

    [tool.gpuadvisor]
    fail-on = "high"               # high | medium | low | none
    select = ["host_sync", "GA3"]  # rule ids, id prefixes, names or categories (empty = all rules)
    ignore = ["GA801"]
    rules-dirs = ["ci/gpuadvisor_rules"]   # relative to this pyproject.toml

    [tool.gpuadvisor.thresholds.GA201]     # keyed by rule id or rule name
    min_impact = 0.03

Precedence: command line > pyproject.toml > built-in defaults.
- `--select` / `--ignore` given on the command line REPLACE the configured lists (they do not extend
  them), so a CI job can always narrow or widen the rule set without editing the project.
- `--fail-on` replaces the configured value (`--fail-on none` disables the gate).
- thresholds merge per rule and per key: a command-line value for `GA201.min_impact` overrides only
  that key; other configured thresholds stay.
- rules directories from the command line are added after the configured ones.

The configuration file is found by walking up from the working directory to the nearest
`pyproject.toml` that holds a `[tool.gpuadvisor]` table (a pyproject.toml without that table is
passed over, the way ruff does it), or given explicitly (`--config FILE`: a pyproject.toml, or any
TOML file whose top level holds the same keys).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from gpuadvisor import engine, rundir
from gpuadvisor.errors import ConfigError

__all__ = [
    "FAIL_ON_CHOICES",
    "AnalysisConfig",
    "ConfigError",
    "check_against_rules",
    "find_config_file",
    "load_config",
    "merge",
    "parse_threshold_assignments",
]

FAIL_ON_CHOICES = ("high", "medium", "low", "none")

# Canonical key spelling is kebab-case (as in pyproject); snake_case is accepted too.
_KNOWN_KEYS = ("fail-on", "select", "ignore", "thresholds", "rules-dirs")


def _frozen_thresholds(
    thresholds: Mapping[str, Mapping[str, float]],
) -> Mapping[str, Mapping[str, float]]:
    return MappingProxyType(
        {rule: MappingProxyType(dict(sorted(values.items()))) for rule, values in sorted(thresholds.items())}
    )


@dataclass(frozen=True)
class AnalysisConfig:
    """Resolved analysis settings.

    `select`/`ignore` hold rule ids, id prefixes, rule names or categories (empty `select` = every rule).
    `fail_on` is "high", "medium", "low" or None (no gate). `thresholds` maps a rule id or name to
    threshold overrides. `rules_dirs` are extra folders of user rules (absolute paths).
    `source` is the configuration file these values came from (None: defaults only).
    """

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: str | None = None
    thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: _frozen_thresholds({}))
    rules_dirs: tuple[Path, ...] = ()
    source: Path | None = None

    def __post_init__(self) -> None:
        # Keep the dataclass truly immutable even when built from plain dicts.
        object.__setattr__(self, "thresholds", _frozen_thresholds(self.thresholds))

    def threshold_dict(self) -> dict[str, dict[str, float]] | None:
        """`thresholds` as plain dicts (None when there is none), the form the analysis takes."""
        return {rule: dict(values) for rule, values in self.thresholds.items()} or None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe view (for `--show-config` style output and tests)."""
        return {
            "select": list(self.select),
            "ignore": list(self.ignore),
            "fail_on": self.fail_on,
            "thresholds": {rule: dict(values) for rule, values in self.thresholds.items()},
            "rules_dirs": [str(p) for p in self.rules_dirs],
            "source": None if self.source is None else str(self.source),
        }


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: invalid TOML: {err}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply to read") from None
    return dict(data)


def _tool_table(data: Mapping[str, Any]) -> Any:
    tool = data.get("tool")
    if isinstance(tool, Mapping):
        return tool.get("gpuadvisor")
    return None


def find_config_file(
    start: Path | None = None, inputs: Sequence[Path] = (), ignored: list[Path] | None = None
) -> Path | None:
    """The nearest pyproject.toml at or above `start` (default: cwd) with a `[tool.gpuadvisor]` table,
    that is the user's own: one inside an input (`inputs`: the run directory or traces analyzed) or in
    a run directory is data someone may have sent (its `rules-dirs` would import their code), so it is
    passed over and appended to `ignored`."""
    here = (start or Path.cwd()).resolve()
    if here.is_file():
        here = here.parent
    data = [Path(os.path.realpath(p)) for p in inputs]
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and _tool_table(_load_toml(candidate)) is not None:
            if rundir.is_run_dir(folder) or any(folder == d or d in folder.parents for d in data):
                if ignored is not None:
                    ignored.append(candidate)
                continue
            return candidate
    return None


def _where(path: Path, key: str) -> str:
    return f"{path}: [tool.gpuadvisor] {key}" if path.name == "pyproject.toml" else f"{path}: {key}"


def _string_list(value: Any, path: Path, key: str) -> tuple[str, ...]:
    if isinstance(value, str):  # a lone string is a common slip; accept it as a one-item list
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{_where(path, key)} must be a list of non-empty strings, got {value!r}")
    return tuple(v.strip() for v in value)


def _fail_on(value: Any, where: str) -> str | None:
    if not isinstance(value, str) or value.lower() not in FAIL_ON_CHOICES:
        raise ConfigError(f"{where} must be one of {', '.join(FAIL_ON_CHOICES)}, got {value!r}")
    lowered = value.lower()
    return None if lowered == "none" else lowered


def _number(value: Any, where: str) -> float:
    # bool is an int subclass: `min_impact = true` is a mistake, not 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ConfigError(f"{where} must be a finite number, got {value!r}")
    return number


def _thresholds(value: Any, path: Path) -> dict[str, dict[str, float]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{_where(path, 'thresholds')} must be a table of rule tables, got {value!r}")
    out: dict[str, dict[str, float]] = {}
    for rule, values in value.items():
        key = f"thresholds.{rule}"
        if not isinstance(values, Mapping):
            raise ConfigError(f"{_where(path, key)} must be a table of name = number, got {values!r}")
        out[str(rule)] = {
            str(name): _number(number, _where(path, f"{key}.{name}")) for name, number in values.items()
        }
    return out


def _parse_table(table: Any, path: Path) -> AnalysisConfig:
    if not isinstance(table, Mapping):
        raise ConfigError(f"{path}: [tool.gpuadvisor] must be a table")
    normalized: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = str(raw_key).replace("_", "-")
        if key not in _KNOWN_KEYS:
            raise ConfigError(f"{_where(path, str(raw_key))}: unknown key (known: {', '.join(_KNOWN_KEYS)})")
        if key in normalized:
            raise ConfigError(f"{_where(path, str(raw_key))}: given twice (as kebab-case and snake_case)")
        normalized[key] = value

    config = AnalysisConfig(source=path)
    if "fail-on" in normalized:
        config = replace(config, fail_on=_fail_on(normalized["fail-on"], _where(path, "fail-on")))
    if "select" in normalized:
        config = replace(config, select=_string_list(normalized["select"], path, "select"))
    if "ignore" in normalized:
        config = replace(config, ignore=_string_list(normalized["ignore"], path, "ignore"))
    if "thresholds" in normalized:
        config = replace(config, thresholds=_thresholds(normalized["thresholds"], path))
    if "rules-dirs" in normalized:
        dirs = []
        for entry in _string_list(normalized["rules-dirs"], path, "rules-dirs"):
            folder = (path.parent / entry).resolve()
            if not folder.is_dir():
                raise ConfigError(f"{_where(path, 'rules-dirs')}: {entry!r} is not a directory ({folder})")
            dirs.append(folder)
        config = replace(config, rules_dirs=tuple(dirs))
    return config


def load_config(
    start: Path | None = None,
    explicit: Path | None = None,
    inputs: Sequence[Path] = (),
    ignored: list[Path] | None = None,
) -> AnalysisConfig:
    """Load the analysis configuration.

    With `explicit`, read that file (a pyproject.toml's `[tool.gpuadvisor]` table, or the top level
    of any other TOML file); a missing file is a ConfigError. Otherwise use the nearest pyproject.toml
    with a `[tool.gpuadvisor]` table at or above `start` (default: the working directory) that is not
    inside an input or a run directory (`find_config_file`; those passed over go to `ignored`), or the
    defaults when there is none. Raises ConfigError (exit code 2) with a one-line message naming the
    file and key for anything invalid.
    """
    if explicit is not None:
        path = Path(explicit).resolve()
        if not path.is_file():
            raise ConfigError(f"config file not found: {explicit}")
        data = _load_toml(path)
        table = _tool_table(data)
        if table is None:
            if path.name == "pyproject.toml":
                return AnalysisConfig(source=path)
            table = data
        return _parse_table(table, path)
    found = find_config_file(start, inputs, ignored)
    if found is None:
        return AnalysisConfig()
    return _parse_table(_tool_table(_load_toml(found)), found)


def merge(
    config: AnalysisConfig,
    *,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    fail_on: str | None = None,
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
    rules_dirs: Iterable[Path] | None = None,
) -> AnalysisConfig:
    """Apply command-line values on top of `config` (CLI > pyproject > defaults).

    None or an empty iterable means "not given on the command line". A given `select`/`ignore`
    replaces the configured list; `fail_on` replaces it ("none" disables the gate); `thresholds`
    merge per rule and key; `rules_dirs` are appended after the configured ones.
    """
    out = config
    select_t = tuple(select or ())
    ignore_t = tuple(ignore or ())
    if select_t:
        out = replace(out, select=select_t)
    if ignore_t:
        out = replace(out, ignore=ignore_t)
    if fail_on is not None:
        out = replace(out, fail_on=_fail_on(fail_on, "--fail-on"))
    if thresholds:
        merged = {rule: dict(values) for rule, values in out.thresholds.items()}
        for rule, values in thresholds.items():
            target = merged.setdefault(rule, {})
            for name, number in values.items():
                target[name] = _number(number, f"--threshold {rule}.{name}")
        out = replace(out, thresholds=merged)
    if rules_dirs:
        extra = tuple(Path(p).resolve() for p in rules_dirs)
        out = replace(out, rules_dirs=out.rules_dirs + tuple(p for p in extra if p not in out.rules_dirs))
    return out


def parse_threshold_assignments(values: Iterable[str]) -> dict[str, dict[str, float]]:
    """Parse command-line `--threshold RULE.NAME=VALUE` options (e.g. `GA201.min_impact=0.03`)."""
    out: dict[str, dict[str, float]] = {}
    for raw in values:
        lhs, sep, rhs = raw.partition("=")
        rule, dot, name = lhs.strip().partition(".")
        if not sep or not dot or not rule or not name or not rhs.strip():
            raise ConfigError(f"--threshold {raw!r}: expected RULE.NAME=NUMBER (e.g. GA201.min_impact=0.03)")
        try:
            number = float(rhs)
        except ValueError:
            raise ConfigError(f"--threshold {raw!r}: {rhs.strip()!r} is not a number") from None
        out.setdefault(rule, {})[name] = _number(number, f"--threshold {raw!r}")
    return out


def check_against_rules(
    config: AnalysisConfig,
    rules_dirs: Iterable[Path] = (),
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    thresholds: Mapping[str, Mapping[str, float]] | None = None,
) -> None:
    """Check rule selectors and thresholds against the rules that will run (built-ins, `rules_dirs`,
    entry points), so that a mistake is reported where it was made: the configuration file and key
    (`pyproject.toml: [tool.gpuadvisor] thresholds.GA201.min_imapct: unknown threshold ... (did you
    mean min_impact?)`) or the command-line option (`--select`, `--ignore`, `--threshold`).

    `config` is the configuration as read from its file (before command-line values were merged in);
    `select`/`ignore`/`thresholds` are the command-line values. Raises ConfigError (exit 2)."""
    classes = [r.cls for r in engine.load_rules(rules_dirs)]

    def check_selectors(values: Iterable[str], where: str) -> None:
        for selector in values:
            try:
                engine.select_rules(classes, [selector])
            except ConfigError as err:
                raise ConfigError(f"{where}: {err}") from None

    def check_thresholds(values: Mapping[str, Mapping[str, float]], where: Callable[[str, str], str]) -> None:
        for rule, keys in values.items():
            for key, number in keys.items():
                try:
                    engine.resolve_thresholds(classes, {rule: {key: number}})
                except ConfigError as err:
                    raise ConfigError(f"{where(rule, key)}: {err}") from None

    if config.source is not None:
        path = config.source
        check_selectors(config.select, _where(path, "select"))
        check_selectors(config.ignore, _where(path, "ignore"))
        check_thresholds(config.thresholds, lambda rule, key: _where(path, f"thresholds.{rule}.{key}"))
    check_selectors(select, "--select")
    check_selectors(ignore, "--ignore")
    check_thresholds(thresholds or {}, lambda rule, key: f"--threshold {rule}.{key}")


def resolve_options(
    config: AnalysisConfig | str | os.PathLike[str] | None,
    select: Iterable[str],
    ignore: Iterable[str],
    thresholds: Mapping[str, Mapping[str, float]] | None,
    rules: Iterable[str | os.PathLike[str]],
) -> AnalysisConfig:
    """The options of one API analysis: `config` (an AnalysisConfig, the path of a TOML file, or None
    for no configuration file) with the explicit arguments over it (the CLI's precedence)."""
    if config is None:
        base = AnalysisConfig()
    elif isinstance(config, AnalysisConfig):
        base = config
    else:
        base = load_config(explicit=Path(config))
    return merge(
        base,
        select=tuple(select),
        ignore=tuple(ignore),
        thresholds=thresholds,
        rules_dirs=[Path(r) for r in rules],
    )
