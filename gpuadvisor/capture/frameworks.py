"""Which framework drives the loop, its settings, and where the user configured it (issue 10 item 3).

gpuadvisor never imports transformers, lightning or accelerate itself. A `sys.meta_path` finder
watches for the modules that define the classes (`transformers.training_args`, `transformers.trainer`,
`lightning.pytorch.trainer.trainer`, `pytorch_lightning.trainer.trainer`, `accelerate.accelerator`);
when the script imports one, its loader runs as usual and the constructors are wrapped right after.
Modules already imported when the capture starts (the in-process `Capture`) are wrapped at once.

Each wrapper calls the original constructor, then reads the switches that matter for the advice from
the constructed object (never from the arguments: defaults and environment variables count) and the
call site in user code (the first frame outside torch, gpuadvisor, the stdlib and the framework).
environment.json gets `framework` = {name, version, settings, call_site, call_sites}; see
docs/run-directory.md.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import importlib.abc
import importlib.machinery
import os
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpuadvisor.capture.experiment import Suspect

if TYPE_CHECKING:
    from gpuadvisor.capture.hooks import Recorder



def spec_from_other_finders(
    me: object, fullname: str, path: Sequence[str] | None, target: ModuleType | None
) -> importlib.machinery.ModuleSpec | None:
    """The spec the import system would find without the meta-path finder `me` (which wraps it)."""
    for finder in sys.meta_path:
        if finder is me or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


class Framework(str, enum.Enum):
    HF_TRAINER = "hf_trainer"
    HF_ACCELERATE = "hf_accelerate"
    LIGHTNING = "lightning"
    PLAIN = "plain"


# What is read from each constructed object (attribute names; missing ones are left out).
HF_ARGS_SETTINGS = (
    "bf16",
    "fp16",
    "tf32",
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "gradient_accumulation_steps",
    "dataloader_num_workers",
    "dataloader_pin_memory",
    "dataloader_persistent_workers",
    "optim",
    "torch_compile",
    "torch_compile_mode",
    "gradient_checkpointing",
    "max_steps",
    "logging_steps",
)
LIGHTNING_SETTINGS = (
    "precision",
    "accumulate_grad_batches",
    "max_steps",
    "max_epochs",
    "num_devices",
    "log_every_n_steps",
)
ACCELERATE_SETTINGS = ("mixed_precision", "gradient_accumulation_steps", "num_processes", "distributed_type")

# module that defines the class -> (record kind, class name, framework, attribute names)
WATCHED: dict[str, tuple[str, str, Framework, Sequence[str]]] = {
    "transformers.training_args": ("TrainingArguments", "TrainingArguments", Framework.HF_TRAINER, HF_ARGS_SETTINGS),
    "transformers.trainer": ("Trainer", "Trainer", Framework.HF_TRAINER, ()),
    "lightning.pytorch.trainer.trainer": ("Trainer", "Trainer", Framework.LIGHTNING, LIGHTNING_SETTINGS),
    "pytorch_lightning.trainer.trainer": ("Trainer", "Trainer", Framework.LIGHTNING, LIGHTNING_SETTINGS),
    "accelerate.accelerator": ("Accelerator", "Accelerator", Framework.HF_ACCELERATE, ACCELERATE_SETTINGS),
}
_PRECEDENCE = (Framework.HF_TRAINER, Framework.LIGHTNING, Framework.HF_ACCELERATE)


def _json_value(v: Any) -> Any:
    """A JSON-safe form of a setting (enums by value, other objects by str)."""
    if isinstance(v, enum.Enum):
        v = v.value
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    return str(v)


class _WatchFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched name it asks the finders after it, then makes the loader
    call `on_loaded(module)` once the module has executed."""

    def __init__(self, on_loaded: Callable[[ModuleType], None]) -> None:
        self._on_loaded = on_loaded
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in WATCHED or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = spec_from_other_finders(self, fullname, path, target)
        finally:
            self._busy.on = False
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return None
        orig_exec = loader.exec_module
        on_loaded = self._on_loaded

        def exec_module(module: ModuleType) -> None:
            orig_exec(module)
            on_loaded(module)

        with contextlib.suppress(AttributeError, TypeError):
            loader.exec_module = exec_module  # type: ignore[method-assign]
            return spec
        return None


class FrameworkRecorder:
    """Wraps the framework constructors and holds what they saw."""

    def __init__(self, recorder: Recorder) -> None:
        self._rec = recorder
        self._finder: _WatchFinder | None = None
        self.records: dict[tuple[Framework, str], dict[str, Any]] = {}
        self._depth = 0  # constructors nested in a framework constructor (Trainer builds an Accelerator)

    def install(self) -> None:
        if Suspect.SETTINGS_HOOKS in self._rec.off:
            return
        for name in WATCHED:
            module = sys.modules.get(name)
            if module is not None:
                self._wrap(module)
        self._finder = _WatchFinder(self._wrap)
        sys.meta_path.insert(0, self._finder)

    def uninstall(self) -> None:
        """Stop watching imports (the wrapped constructors go with the recorder's SETTINGS_HOOKS)."""
        if self._finder is not None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self._finder)
            self._finder = None

    def _wrap(self, module: ModuleType) -> None:
        try:
            kind, cls_name, framework, attrs = WATCHED[module.__name__]
            cls = getattr(module, cls_name, None)
            if cls is None:
                return
            top = module.__name__.split(".", 1)[0]
            top_mod = sys.modules.get(top)
            top_file = getattr(top_mod, "__file__", None)
            if top_file:
                pkg_dir = os.path.dirname(os.path.abspath(top_file)) + os.sep
                if pkg_dir not in self._rec.skip_dirs:
                    self._rec.skip_dirs = (*self._rec.skip_dirs, pkg_dir)
            version = getattr(top_mod, "__version__", None)
            # Dataclass-built TrainingArguments: subclasses generate their own __init__ but call
            # __post_init__; wrap that when the class defines it.
            attr = "__post_init__" if "__post_init__" in vars(cls) else "__init__"
            self._rec._patch(
                cls, attr, lambda orig: self._constructor(orig, framework, kind, attrs, version), Suspect.SETTINGS_HOOKS
            )
        except Exception as err:
            self._rec._failed(f"framework hook {module.__name__}", err)

    def _constructor(
        self, orig: Any, framework: Framework, kind: str, attrs: Sequence[str], version: Any
    ) -> Any:
        name = f"framework {framework.value} {kind}"

        @functools.wraps(orig)
        def wrapper(obj: Any, *args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            try:
                result = orig(obj, *args, **kwargs)
            finally:
                self._depth -= 1
            if name not in self._rec._disabled:
                try:
                    self._note(obj, framework, kind, attrs, version, nested=self._depth > 0)
                except Exception as err:
                    self._rec._failed(name, err)
            return result

        return wrapper

    def _note(
        self, obj: Any, framework: Framework, kind: str, attrs: Sequence[str], version: Any, nested: bool
    ) -> None:
        key = (framework, kind)
        rec = self.records.get(key)
        if rec is not None:
            rec["count"] += 1
            return
        settings: dict[str, Any] = {}
        for attr in attrs:
            try:
                value = getattr(obj, attr)
            except Exception:
                continue
            settings[attr] = _json_value(value)
        if kind == "Trainer" and framework is Framework.HF_TRAINER:
            # The Trainer's own TrainingArguments (also when they were built before we could see them).
            args = getattr(obj, "args", None)
            for attr in HF_ARGS_SETTINGS:
                with contextlib.suppress(Exception):
                    settings.setdefault(attr, _json_value(getattr(args, attr)))
        frame = self._rec.user_frame(3, skip_frameworks=True)
        self.records[key] = {
            "framework": framework,
            "kind": kind,
            "version": None if version is None else str(version),
            "settings": settings,
            "call_site": self._rec.site(frame),
            "nested": nested,
            "count": 1,
        }

    def framework_json(self) -> dict[str, Any]:
        """environment.json `framework`."""
        chosen: Framework = Framework.PLAIN
        for fw in _PRECEDENCE:
            # An Accelerator built inside a Trainer's constructor does not make the run an accelerate run.
            if any(k[0] is fw and not r["nested"] for k, r in self.records.items()):
                chosen = fw
                break
        if chosen is Framework.PLAIN:
            return {"name": chosen.value, "version": None, "settings": {}, "call_site": None, "call_sites": {}}
        mine = {k[1]: r for k, r in self.records.items() if k[0] is chosen}
        settings: dict[str, Any] = {}
        for r in mine.values():
            for key, value in r["settings"].items():
                settings.setdefault(key, value)
        main = mine.get("TrainingArguments") or mine.get("Trainer") or mine.get("Accelerator")
        assert main is not None
        return {
            "name": chosen.value,
            "version": main["version"],
            "settings": dict(sorted(settings.items())),
            "call_site": main["call_site"],
            "call_sites": {kind: r["call_site"] for kind, r in sorted(mine.items())},
        }
