"""The script's own switches for explore's levers (gpuadvisor/verify/switches.py, scriptopts.py): read
from a script's source, recorded from its parsers at run time (argparse wherever it was built,
HfArgumentParser, click), and which arguments each lever passes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuadvisor.verify import explore as ex
from gpuadvisor.verify.scriptopts import record_script_options
from gpuadvisor.verify.switches import (
    ScriptOption,
    declared_in_source,
    find_switch,
    recorded_options,
    took_effect,
)

SCRIPTS = Path(__file__).parent / "scripts"
TIMM_STYLE = """
import argparse
parser = argparse.ArgumentParser()
group = parser.add_argument_group('Device')
group.add_argument('-b', '--batch-size', type=int, default=128, metavar='N')
group.add_argument('-j', '--workers', type=int, default=4, metavar='N')
group.add_argument('--channels-last', action='store_true', default=False)
group.add_argument('--amp', action='store_true', default=False)
group.add_argument('--amp-dtype', default='float16', type=str)
group.add_argument('--pin-mem', action='store_true', default=False)
group.add_argument('--no-prefetcher', action='store_true', default=False)
group.add_argument('--torchcompile', nargs='?', type=str, default=None, const='inductor')
group.add_argument('--torchcompile-mode', type=str, default=None)
"""


def switch(lever: str, options: list[ScriptOption], args: tuple[str, ...] = (), number: int | None = None) -> Any:
    use, already = find_switch(lever, options, args, number=number)
    return use.args if use is not None else already


def test_timm_style_options_are_read_from_the_source(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TIMM_STYLE)
    options = declared_in_source(script)
    assert {o.dest for o in options} >= {"batch_size", "workers", "channels_last", "amp", "amp_dtype"}
    assert switch("bf16_autocast", options) == ("--amp", "--amp-dtype", "bfloat16")
    assert switch("fp16_autocast", options) == ("--amp", "--amp-dtype", "float16")
    assert switch("channels_last", options) == ("--channels-last",)
    assert switch("num_workers", options, number=12) == ("--workers", "12")
    assert switch("dataloader_pin_memory", options) == ("--pin-mem",)
    assert switch("script_batch_size", options) == ("--batch-size",)  # explore adds the value
    assert switch("torch_compile", options) == ("--torchcompile",)  # stores its const, "inductor"
    assert switch("torch_compile_reduce_overhead", options) == (
        "--torchcompile", "--torchcompile-mode", "reduce-overhead",
    )  # fmt: skip
    # the spelling the command uses, and a switch the command passes already
    assert switch("num_workers", options, ("-j", "4"), number=12) == ("-j", "12")
    assert switch("bf16_autocast", options, ("--amp",)) == "the script's own --amp is on already"
    # a workers option at or above the lever's number: nothing to change
    assert switch("num_workers", [o if o.dest != "workers" else ScriptOption(o.options, o.dest, o.kind, value=16, type="int")
                                  for o in options], number=12) == "the script's own --workers is 16 already (>= 12)"  # fmt: skip


def test_short_options_alone_are_found(tmp_path: Path) -> None:
    options = declared_in_source(SCRIPTS / "short_flags.py")
    assert switch("num_workers", options, number=2) == ("-j", "2")
    assert switch("script_batch_size", options) == ("-b",)
    # a short option is the batch or the workers only when it takes a number
    odd = [ScriptOption(("-j",), "j", "flag", const=True)]
    assert switch("num_workers", odd, number=2) is None


def test_switches_explore_cannot_turn_on_are_not_used() -> None:
    # --amp alone sets fp16 in old timm: bf16 is injected there, fp16 may use it
    amp_only = [ScriptOption(("--amp",), "amp", "flag", const=True)]
    assert switch("bf16_autocast", amp_only) is None and switch("fp16_autocast", amp_only) == ("--amp",)
    assert switch("channels_last", [ScriptOption(("--no-channels-last",), "channels_last", "flag", const=False)]) is None
    assert switch("tf32", [ScriptOption(("--tf32",), "tf32", "value", type=None, bool_text=False)]) is None
    assert switch("tf32", [ScriptOption(("--tf32",), "tf32", "value", type="bool", bool_text=True)]) == ("--tf32", "True")
    # a precision option takes the bf16 value its choices offer (Lightning CLI, accelerate)
    lightning = [ScriptOption(("--trainer.precision",), "trainer.precision", "value", value="32-true", type="str")]
    assert switch("bf16_autocast", lightning) == ("--trainer.precision", "bf16-mixed")
    accelerate = [ScriptOption(("--mixed_precision",), "mixed_precision", "value", value="no", choices=("no", "fp16", "bf16"))]
    assert switch("bf16_autocast", accelerate) == ("--mixed_precision", "bf16")


def test_the_trial_records_argparse_parsers_wherever_they_are_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", argparse.ArgumentParser.parse_known_args)
    sys.path.insert(0, str(SCRIPTS))
    try:
        from hf_standin import HfArgumentParser  # the stand-in: the same options the real one builds
    finally:
        sys.path.remove(str(SCRIPTS))
    import dataclasses

    @dataclasses.dataclass
    class Args:
        per_device_train_batch_size: int = 8
        dataloader_num_workers: int = 0
        bf16: bool = False

    entries: list[dict[str, Any]] = []
    record_script_options(entries, lambda name, patch: None)
    (args,) = HfArgumentParser(Args).parse_args_into_dataclasses(["--per_device_train_batch_size", "16"])
    assert args.per_device_train_batch_size == 16
    by = {e["dest"]: e for e in entries}
    assert by["bf16"] == {**by["bf16"], "parser": "HfArgumentParser", "kind": "optional_value", "const": True,
                          "bool_text": True, "value": False}  # fmt: skip
    assert by["per_device_train_batch_size"]["value"] == 16 and by["per_device_train_batch_size"]["type"] == "int"
    options = recorded_options({"script_arguments": entries})
    assert switch("bf16_autocast", options) == ("--bf16",)
    assert switch("num_workers", options, number=8) == ("--dataloader_num_workers", "8")
    assert switch("script_batch_size", options) == ("--per_device_train_batch_size",)
    assert next(o for o in options if o.dest == "per_device_train_batch_size").value == 16


def test_the_trial_records_click_options() -> None:
    import click

    entries: list[dict[str, Any]] = []
    patches: dict[str, Any] = {}
    record_script_options(entries, lambda name, patch: patches.setdefault(name, patch))
    saved = click.core.Command.parse_args
    try:
        patches["click.core"](click.core)

        @click.command()
        @click.option("-b", "--batch-size", type=int, default=4)
        @click.option("--amp/--no-amp", default=False)
        def train(batch_size: int, amp: bool) -> None:
            del batch_size, amp

        train.main(["-b", "8"], standalone_mode=False)
    finally:
        click.core.Command.parse_args = saved  # type: ignore[method-assign]
    options = recorded_options({"script_arguments": entries})
    by = {o.dest: o for o in options}
    assert by["batch_size"].value == 8 and by["batch_size"].options == ("-b", "--batch-size")
    assert by["amp"].kind == "flag" and by["amp"].value is False


def test_a_switch_that_did_not_take_effect_fails_the_trial() -> None:
    use, _ = find_switch("num_workers", [ScriptOption(("-j",), "j", "value", value=0, type="int")], (), number=2)
    assert use is not None
    took = {"status": "ok", "script_arguments": [{"options": ["-j"], "dest": "j", "kind": "value", "value": 2}]}
    ignored = {"status": "ok", "script_arguments": [{"options": ["-j"], "dest": "j", "kind": "value", "value": 0}]}
    assert took_effect(use, took) is None
    assert took_effect(use, ignored) == "the script's own -j 2 did not take effect: its parser gave j=0"


def test_levers_are_set_through_the_scripts_switches_or_injected(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TIMM_STYLE)
    env = {"cuda_available": True, "settings": {}, "dataloaders": [{"num_workers": 4, "batch_size": 128}],
           "optimizers": [{"class": "SGD"}]}  # fmt: skip
    lvs = ex.build_levers(env, num_workers=12, env={}, bf16_supported=True, options=declared_in_source(script), args=())
    by = {lv.name: lv for lv in lvs}
    assert by["bf16_autocast"].switch is not None and by["channels_last"].script_flag == "--channels-last"
    assert by["fused_optimizer"].switch is None  # no switch for it: injected
    # the script's -b is the DataLoader's batch_size: the script's own option raises it
    assert by["script_batch_size"].skip_reason is None and by["script_batch_size"].takes_value
    assert "the script's own --batch-size sets the DataLoader's batch_size (128)" in str(by["larger_batch"].skip_reason)
    remedies, _params, switched = ex.trial_setup([by["bf16_autocast"], by["channels_last"], by["fused_optimizer"]])
    assert remedies == ("fused_optimizer",) and [lv.name for lv in switched] == ["channels_last", "bf16_autocast"]


def test_a_switch_with_a_companion_is_checked_option_by_option() -> None:
    """timm's bf16 switch is `--amp --amp-dtype bfloat16`: its parser giving amp=True and
    amp_dtype="bfloat16" is the switch taking effect (on an H200 every trial that carried it was
    failed with "its parser gave amp=True", and the guided search lost its compute levers)."""
    options = [
        ScriptOption(("--amp",), "amp", "flag", value=False, const=True),
        ScriptOption(("--amp-dtype",), "amp_dtype", "value", value="float16", type="str"),
    ]
    use, _ = find_switch("bf16_autocast", options, ())
    assert use is not None and use.args == ("--amp", "--amp-dtype", "bfloat16")

    def parsed(amp: Any, dtype: Any) -> dict[str, Any]:
        return {"status": "ok", "script_arguments": [
            {"options": ["--amp"], "dest": "amp", "kind": "flag", "value": amp, "const": True},
            {"options": ["--amp-dtype"], "dest": "amp_dtype", "kind": "value", "value": dtype},
        ]}  # fmt: skip

    assert took_effect(use, parsed(True, "bfloat16")) is None
    assert took_effect(use, parsed(False, "bfloat16")) == (
        "the script's own --amp --amp-dtype bfloat16 did not take effect: its parser gave amp=False"
    )
    assert took_effect(use, parsed(True, "float16")) == (
        "the script's own --amp --amp-dtype bfloat16 did not take effect: its parser gave amp_dtype='float16'"
    )
