"""The script's own command-line options, as its parsers saw them at run time (recorded by each trial).

Explore sets a lever through the script's own switch where it has one (gpuadvisor/verify/switches.py):
timm's `--amp --amp-dtype bfloat16`, `--channels-last`, `-j N`, `-b N`; Hugging Face's
`--bf16`, `--per_device_train_batch_size`, `--dataloader_num_workers`. Reading the script's source
finds the options it declares itself; a trial also records every parser the script parses with,
wherever it was built (a helper module, `HfArgumentParser` over TrainingArguments, a click or typer
command), with each option's kind and the value it parsed to:

- argparse (and its subclasses: HfArgumentParser, jsonargparse's): `ArgumentParser.parse_known_args`
  is wrapped (parse_args and parse_args_into_dataclasses go through it);
- click (and typer, built on it): `click.core.Command.parse_args`, patched when click is imported.

One entry per option: `{"parser", "options", "dest", "kind", "value", "default", "type", "bool_text",
"const", "choices"}`; `kind` is "flag" (takes no value: store_true, store_const, a click flag; `const`
is what it stores), "optional_value" (nargs="?": the option alone stores `const`), "value" (one
value) or "other" (lists, counts, appends: explore sets none of them); `bool_text` says that the
value's type turns the text "True" into True and "False" into False (HF's string_to_bool, click's
BOOL). Nothing here may break the script: a parser this code does not understand records nothing.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_OPTIONS", "record_script_options"]

MAX_OPTIONS = 2000  # option entries kept from the script's parsers
MAX_CHOICES = 32


def _scalar(value: Any) -> Any:
    """A JSON scalar, or None (a list, a path, an enum: not compared)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return None


def _bool_text(convert: Any) -> bool:
    if convert is None or convert is bool or not callable(convert):
        return False
    try:
        return convert("True") is True and convert("False") is False
    except Exception as err:  # a converter that refuses these words: not a boolean
        del err
        return False


def _type_name(convert: Any, value: Any) -> str | None:
    if convert in (int, float, str, bool):
        return str(convert.__name__)
    if _bool_text(convert):
        return "bool"
    for t in (bool, int, float, str):
        if isinstance(value, t):
            return t.__name__
    return None


def _argparse_entry(parser: Any, action: argparse.Action, namespace: Any) -> dict[str, Any] | None:
    options = [o for o in action.option_strings if isinstance(o, str)]
    if not options or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
        return None
    value = getattr(namespace, action.dest, None) if namespace is not None else None
    boolean_optional = getattr(argparse, "BooleanOptionalAction", None)
    const: Any = action.const
    if boolean_optional is not None and isinstance(action, boolean_optional):
        kind, const = "flag", True
        options = [o for o in options if not o.startswith("--no-")]
    elif action.nargs == 0:
        kind = "flag"
    elif action.nargs == "?":
        kind = "optional_value"
    elif action.nargs in (None, 1) and isinstance(action, argparse._StoreAction):
        kind = "value"
    else:
        kind = "other"
    choices = list(action.choices)[:MAX_CHOICES] if isinstance(action.choices, (list, tuple)) else None
    return {
        "parser": type(parser).__name__,
        "options": options,
        "dest": str(action.dest),
        "kind": kind,
        "value": _scalar(value),
        "default": _scalar(action.default),
        "type": _type_name(action.type, value),
        "bool_text": _bool_text(action.type),
        "const": _scalar(const),
        "choices": [_scalar(c) for c in choices] if choices is not None else None,
    }


def _click_entry(command: Any, param: Any, values: Any) -> dict[str, Any] | None:
    # lazy: click is imported by the script; this runs only once it has been
    import click

    if not isinstance(param, click.Option) or not param.opts:
        return None
    name = str(param.name or "")
    value = values.get(name) if isinstance(values, dict) else None
    type_name = {"integer": "int", "float": "float", "boolean": "bool", "text": "str", "choice": "str"}.get(str(getattr(param.type, "name", "")))
    if param.is_flag:
        kind = "flag"
    elif param.nargs == 1 and not param.multiple and not param.count:
        kind = "value"
    else:
        kind = "other"
    choices = getattr(param.type, "choices", None)
    return {
        "parser": f"click.{type(command).__name__}",
        "options": [str(o) for o in param.opts],
        "dest": name,
        "kind": kind,
        "value": _scalar(value),
        "default": _scalar(param.default) if not callable(param.default) else None,
        "type": type_name,
        "bool_text": type_name == "bool" and kind == "value",
        "const": _scalar(getattr(param, "flag_value", None)) if param.is_flag else None,
        "choices": [_scalar(c) for c in list(choices)[:MAX_CHOICES]] if choices else None,
    }


class _Collector:
    def __init__(self, out: list[dict[str, Any]]) -> None:
        self.out = out
        self.seen: dict[tuple[int, str], int] = {}  # (parser id, dest) -> index in out

    def add(self, owner: Any, entry: dict[str, Any] | None) -> None:
        if entry is None:
            return
        key = (id(owner), entry["dest"])
        if key in self.seen:
            self.out[self.seen[key]] = entry  # parsed again: the last values
        elif len(self.out) < MAX_OPTIONS:
            self.seen[key] = len(self.out)
            self.out.append(entry)


def record_script_options(
    out: list[dict[str, Any]], patch_on_import: Callable[[str, Callable[[Any], None]], None]
) -> None:
    """Record into `out` the options of every parser the script parses with (module docstring).
    `patch_on_import(module_name, patch)` runs `patch(module)` once the module is imported (now, if
    it already is)."""
    collect = _Collector(out)
    cls = argparse.ArgumentParser
    orig = cls.parse_known_args

    @functools.wraps(orig)
    def parse_known_args(parser: Any, *args: Any, **kwargs: Any) -> Any:
        parsed = orig(parser, *args, **kwargs)
        try:
            namespace = parsed[0] if isinstance(parsed, tuple) and parsed else None
            for action in list(getattr(parser, "_actions", [])):
                collect.add(parser, _argparse_entry(parser, action, namespace))
        except Exception as err:  # a parser we do not understand: its options stay unknown
            del err
        return parsed

    cls.parse_known_args = parse_known_args  # type: ignore[method-assign,assignment]

    def patch_click(module: Any) -> None:
        command_cls = getattr(module, "Command", None)
        orig_parse = getattr(command_cls, "parse_args", None)
        if command_cls is None or orig_parse is None:
            return

        @functools.wraps(orig_parse)
        def parse_args(command: Any, ctx: Any, args: Any) -> Any:
            rest = orig_parse(command, ctx, args)
            try:
                for param in list(getattr(command, "params", [])):
                    collect.add(command, _click_entry(command, param, getattr(ctx, "params", None)))
            except Exception as err:  # an unusual command: its options stay unknown
                del err
            return rest

        command_cls.parse_args = parse_args

    patch_on_import("click.core", patch_click)


def long_options(entries: list[dict[str, Any]]) -> tuple[list[str], dict[str, int]]:
    """The long option strings the parsers declared and the integer values they parsed to (the
    record's older form: `script_options`, `script_option_values`)."""
    names: set[str] = set()
    values: dict[str, int] = {}
    for e in entries:
        for option in e.get("options") or []:
            if option.startswith("--"):
                names.add(option)
                value = e.get("value")
                if isinstance(value, int) and not isinstance(value, bool):
                    values[option] = value
    return sorted(names), dict(sorted(values.items()))
