"""The script's own switches for explore's levers: where a script declares an option for a lever,
explore sets the lever through it (the command line the user would type) rather than by injection.

| lever | the script's option (its dest, or these short options) | what explore passes |
|---|---|---|
| `bf16_autocast` | `amp` with `amp_dtype` (timm); `bf16` (Hugging Face); `precision`, `mixed_precision` with a bf16 choice (Lightning CLI, accelerate) | `--amp --amp-dtype bfloat16`; `--bf16`; `--precision bf16-mixed` |
| `fp16_autocast` | `amp` (with `amp_dtype` when declared); `fp16` | `--amp [--amp-dtype float16]`; `--fp16` |
| `tf32` | `tf32` | `--tf32` |
| `channels_last` | `channels_last` | `--channels-last` |
| `num_workers` | `workers`, `num_workers`, `dataloader_num_workers`; `-j` | `-j N` |
| `dataloader_pin_memory` | `pin_mem`, `pin_memory`, `dataloader_pin_memory` | `--pin-mem` |
| `persistent_workers` | `persistent_workers`, `dataloader_persistent_workers` | `--dataloader_persistent_workers` |
| `prefetch_factor` | `prefetch_factor`, `dataloader_prefetch_factor` | `--dataloader_prefetch_factor 4` |
| `torch_compile` | `torch_compile`, `torchcompile`, `compile` (a switch, or an option whose value is optional: timm's backend) | `--torchcompile` |
| `torch_compile_reduce_overhead` | `torchcompile` with `torchcompile_mode` (timm) | `--torchcompile --torchcompile-mode reduce-overhead` |
| `script_batch_size` | `batch_size`, `per_device_train_batch_size`, `train_batch_size`; `-b` | `-b M x N` |

Options are known from the script's own source (`add_argument` calls, read before any trial) and,
authoritatively, from what the first baseline trial recorded of every parser the script parsed with
(gpuadvisor/verify/scriptopts.py: argparse wherever it was built, HfArgumentParser, click and typer).
A dest matches after `-` -> `_`, lower case, and the part after the last `.` (`--trainer.precision`).
A switch is used only when explore can turn it on: a flag that stores a true value (`store_true`),
an option whose value's type reads "True" as True (HF's booleans), a number for a number; a
`store_false` flag, a list, or a count is never used. A switch already on in the recorded command
(or parsed to the lever's value) makes the lever skipped with that reason. Spelling: the one the
recorded command uses, else the option's first long form, else its short one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "SWITCHES",
    "ScriptOption",
    "SwitchUse",
    "declared_in_source",
    "find_switch",
    "merged",
    "recorded_options",
    "took_effect",
]

_TRUE_TEXT = ("true", "1", "yes", "on")


@dataclass(frozen=True)
class ScriptOption:
    """One option of the script's parsers (scriptopts.py's entry, or read from its source)."""

    options: tuple[str, ...]
    dest: str
    kind: str  # "flag" | "optional_value" | "value" | "other"
    value: Any = None  # what it parsed to in the baseline trial (None: unknown)
    type: str | None = None  # "int" | "float" | "str" | "bool" | None
    bool_text: bool = False
    const: Any = None
    choices: tuple[Any, ...] | None = None
    parser: str = "argparse"
    seen_at_run_time: bool = False

    @property
    def key(self) -> str:
        return _norm(self.dest)

    @classmethod
    def from_record(cls, entry: Mapping[str, Any]) -> ScriptOption | None:
        options = entry.get("options")
        if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
            return None
        choices = entry.get("choices")
        return cls(
            options=tuple(options),
            dest=str(entry.get("dest") or options[-1].lstrip("-")),
            kind=str(entry.get("kind") or "other"),
            value=entry.get("value"),
            type=entry.get("type") if isinstance(entry.get("type"), str) else None,
            bool_text=bool(entry.get("bool_text")),
            const=entry.get("const"),
            choices=tuple(choices) if isinstance(choices, list) else None,
            parser=str(entry.get("parser") or "argparse"),
            seen_at_run_time=True,
        )

    def spelling(self, args: Sequence[str]) -> str:
        """The option string to pass: the one the command uses, else the first long one, else the first."""
        for a in args:
            name = a.split("=", 1)[0]
            if name in self.options:
                return name
        return next((o for o in self.options if o.startswith("--")), self.options[0])

    def on(self, args: Sequence[str]) -> bool | None:
        """Whether the switch is on already: passed in the command, or parsed to a true value (None:
        unknown)."""
        if self.kind == "flag" and any(a in self.options for a in args):
            return bool(self.const)
        if isinstance(self.value, bool):
            return self.value
        if isinstance(self.value, str):
            return self.value.strip().lower() in _TRUE_TEXT
        return None


def _norm(dest: str) -> str:
    return dest.rsplit(".", 1)[-1].replace("-", "_").lower()


@dataclass(frozen=True)
class SwitchSpec:
    """How a lever is set through a script option: `dests` (normalized) or `short` option strings
    name it; `value`: "on" (turn a switch on), "number" (the lever's number: workers, prefetch),
    "batch" (explore multiplies the parsed value), or a text to pass; `companions`: (dest, value)
    pairs set with it, `required` when the switch is used only if the script declares them all."""

    dests: tuple[str, ...]
    value: str
    short: tuple[str, ...] = ()
    companions: tuple[tuple[str, str], ...] = ()
    required: bool = False
    choice_needed: bool = False  # `value` is used only when the option's choices include it, or it has none


SWITCHES: dict[str, tuple[SwitchSpec, ...]] = {
    "bf16_autocast": (
        SwitchSpec(("amp",), "on", companions=(("amp_dtype", "bfloat16"),), required=True),
        SwitchSpec(("bf16",), "on"),
        SwitchSpec(("precision",), "bf16-mixed", choice_needed=True),
        SwitchSpec(("mixed_precision",), "bf16", choice_needed=True),
    ),
    "fp16_autocast": (
        SwitchSpec(("amp",), "on", companions=(("amp_dtype", "float16"),)),
        SwitchSpec(("fp16",), "on"),
    ),
    "tf32": (SwitchSpec(("tf32",), "on"),),
    "channels_last": (SwitchSpec(("channels_last",), "on"),),
    "num_workers": (SwitchSpec(("workers", "num_workers", "dataloader_num_workers"), "number", short=("-j",)),),
    "dataloader_pin_memory": (SwitchSpec(("pin_mem", "pin_memory", "dataloader_pin_memory"), "on"),),
    "persistent_workers": (SwitchSpec(("persistent_workers", "dataloader_persistent_workers"), "on"),),
    "prefetch_factor": (SwitchSpec(("prefetch_factor", "dataloader_prefetch_factor"), "number"),),
    "torch_compile": (SwitchSpec(("torch_compile", "torchcompile", "compile"), "on"),),
    "torch_compile_reduce_overhead": (
        SwitchSpec(("torchcompile",), "on", companions=(("torchcompile_mode", "reduce-overhead"),), required=True),
    ),
    "script_batch_size": (
        SwitchSpec(("batch_size", "per_device_train_batch_size", "train_batch_size"), "batch", short=("-b",)),
    ),
}


@dataclass(frozen=True)
class SwitchUse:
    """A lever set through the script's own option: `args` appended to the recorded command."""

    lever: str
    option: ScriptOption
    args: tuple[str, ...]
    flag: str  # the option string used (`-j`, `--amp`)
    # each option the switch sets, with its own part of `args` (the lever's option first, then its
    # companions: timm's `--amp` and `--amp-dtype bfloat16`); empty: `option` with all of `args`
    parts: tuple[tuple[ScriptOption, tuple[str, ...]], ...] = ()

    @property
    def text(self) -> str:
        return " ".join(self.args)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lever": self.lever,
            "args": list(self.args),
            "option": self.flag,
            "options": list(self.option.options),
            "parser": self.option.parser,
            "seen": "at run time" if self.option.seen_at_run_time else "in the script's source",
            "parsed_value": self.option.value,
        }


def recorded_options(result: Mapping[str, Any] | None) -> list[ScriptOption]:
    """The options a trial recorded (`script_arguments`)."""
    entries = result.get("script_arguments") if result else None
    if not isinstance(entries, list):
        return []
    return [o for o in (ScriptOption.from_record(e) for e in entries if isinstance(e, Mapping)) if o is not None]


def _literal(node: ast.AST | None) -> Any:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def declared_in_source(script: Path | None) -> list[ScriptOption]:
    """The options the script's own `add_argument` calls declare (no helper modules, no values):
    what explore knows before the first trial."""
    if script is None:
        return []
    try:
        tree = ast.parse(script.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return []
    out: list[ScriptOption] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        options = tuple(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
        if not options or not all(o.startswith("-") for o in options):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action = _literal(kw.get("action"))
        nargs = _literal(kw.get("nargs"))
        type_node = kw.get("type")
        type_name = type_node.id if isinstance(type_node, ast.Name) and type_node.id in ("int", "float", "str") else None
        if action in ("store_true", "store_false", "store_const"):
            kind = "flag"
            const: Any = {"store_true": True, "store_false": False}.get(str(action), _literal(kw.get("const")))
        elif action not in (None, "store") or nargs not in (None, 1, "?"):
            kind, const = "other", None
        else:
            kind, const = ("optional_value" if nargs == "?" else "value"), _literal(kw.get("const"))
        longs = [o for o in options if o.startswith("--")]
        dest = _literal(kw.get("dest")) or (longs[0] if longs else options[0]).lstrip("-").replace("-", "_")
        default = _literal(kw.get("default"))
        choices = _literal(kw.get("choices"))
        out.append(
            ScriptOption(
                options=options,
                dest=str(dest),
                kind=kind,
                value=None if kind == "flag" else default,
                type=type_name or (type(default).__name__ if isinstance(default, (int, float, str)) and not isinstance(default, bool) else None),
                const=const,
                choices=tuple(choices) if isinstance(choices, (list, tuple)) else None,
            )
        )
    return out


def merged(source: Iterable[ScriptOption], recorded: Iterable[ScriptOption]) -> list[ScriptOption]:
    """The recorded options, and those read from the source that no recorded option has (by dest)."""
    rec = list(recorded)
    keys = {o.key for o in rec} | {s for o in rec for s in o.options}
    return rec + [o for o in source if o.key not in keys and not any(s in keys for s in o.options)]


def _find(options: Sequence[ScriptOption], dest: str, short: Sequence[str] = ()) -> ScriptOption | None:
    for o in options:
        if o.key == dest or any(s in o.options for s in short):
            return o
    return None


def _value_args(option: ScriptOption, text: str, args: Sequence[str]) -> tuple[str, ...] | None:
    """The arguments that give `option` the value `text` (None: it takes none)."""
    if option.kind not in ("value", "optional_value"):
        return None
    if option.choices is not None and text not in {str(c) for c in option.choices}:
        return None
    return (option.spelling(args), text)


def _on_args(option: ScriptOption, args: Sequence[str]) -> tuple[str, ...] | None:
    """The arguments that turn `option` on (None: explore cannot)."""
    flag = option.spelling(args)
    if option.kind == "flag":
        return (flag,) if option.const is True else None
    if option.kind == "optional_value" and option.const not in (None, False, "", 0):
        return (flag,)  # the option alone stores its const (True; timm's --torchcompile: "inductor")
    if option.kind in ("value", "optional_value") and (option.bool_text or option.type == "bool"):
        return (flag, "True")
    return None


def find_switch(
    lever: str, options: Sequence[ScriptOption], args: Sequence[str], *, number: int | None = None
) -> tuple[SwitchUse | None, str | None]:
    """The script's own switch for `lever` (None: it has none, or explore cannot use it), and why
    the lever needs no trial (the switch is on already; None otherwise). `number`: the lever's value
    for "number" switches (workers, prefetch)."""
    for spec in SWITCHES.get(lever, ()):
        option = next((o for d in spec.dests if (o := _find(options, d, spec.short)) is not None), None)
        if option is None:
            continue
        flag = option.spelling(args)
        if spec.value == "on":
            state = option.on(args)
            if state is True:
                return None, f"the script's own {flag} is on already"
            used = _on_args(option, args)
        elif spec.value in ("number", "batch"):
            if option.kind not in ("value", "optional_value") or option.type not in (None, "int"):
                continue
            if spec.value == "batch":
                used = (flag,)  # explore adds the value (the parsed one x its multiplier)
            else:
                if number is None:
                    continue
                current = option.value
                if isinstance(current, int) and not isinstance(current, bool) and current >= number:
                    return None, f"the script's own {flag} is {current} already (>= {number})"
                used = (flag, str(number))
        else:
            if option.value == spec.value:
                return None, f"the script's own {flag} is {spec.value} already"
            if spec.choice_needed and option.choices is None and not _looks_like(option, spec.value):
                continue
            used = _value_args(option, spec.value, args)
        if used is None:
            continue
        extra: list[str] = []
        parts: list[tuple[ScriptOption, tuple[str, ...]]] = [(option, used)]
        missing = False
        for dest, text in spec.companions:
            companion = _find(options, dest)
            companion_args = _value_args(companion, text, args) if companion is not None else None
            if companion is None or companion_args is None:
                missing = True
                continue
            extra += companion_args
            parts.append((companion, companion_args))
        if missing and spec.required:
            continue
        return SwitchUse(lever, option, (*used, *extra), flag, tuple(parts)), None
    return None, None


def _looks_like(option: ScriptOption, value: str) -> bool:
    """An option without choices takes a precision of this family (Lightning's 32, "32-true", ...)."""
    current = str(option.value if option.value is not None else "")
    if value == "bf16-mixed":
        return current in ("32", "32-true", "16-mixed", "64", "64-true", "bf16-mixed")
    return current in ("no", "fp16", "bf16")


def took_effect(use: SwitchUse, result: Mapping[str, Any]) -> str | None:
    """Why a trial's switch did not take effect (None: it did, or the trial recorded no value of it):
    the script's parser gave one of the options the switch sets another value than the one passed (a
    script that reads the option under another name, or overrides it). Each option is checked against
    its own arguments: `--amp --amp-dtype bfloat16` is amp=True and amp_dtype="bfloat16"."""
    if result.get("status") != "ok":
        return None
    recorded = recorded_options(result)
    for option, args in use.parts or ((use.option, use.args),):
        key = option.key
        seen = next((o for o in recorded if o.key == key or set(o.options) & set(option.options)), None)
        if seen is None or seen.value is None:
            continue
        if len(args) == 1 or args[1] == "True":
            ok = seen.value is True or (isinstance(seen.value, str) and seen.value.strip().lower() in _TRUE_TEXT)
            if isinstance(seen.value, str) and option.kind == "optional_value" and seen.value == str(option.const):
                ok = True
        else:
            ok = str(seen.value) == args[1]
        if not ok:
            return f"the script's own {use.text} did not take effect: its parser gave {seen.dest}={seen.value!r}"
    return None
