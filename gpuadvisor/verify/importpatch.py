"""Patching a module right after its import (a meta-path finder that wraps the real loader): how a
verify trial reaches a framework's constructors (TrainingArguments, Lightning's Trainer) and a
command-line library's parser (click) that the script imports after the trial installed itself."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from gpuadvisor.capture.frameworks import spec_from_other_finders

__all__ = ["PostImportPatcher", "patch_on_import"]


def patch_on_import(name: str, patch: Callable[[types.ModuleType], None]) -> None:
    """Run `patch(module)` on the module `name` now if it is imported, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
    else:
        sys.meta_path.insert(0, PostImportPatcher({name: patch}))


class PostImportPatcher(importlib.abc.MetaPathFinder):
    """Runs a patch on a module right after it is first imported (framework constructors)."""

    def __init__(self, patches: dict[str, Callable[[types.ModuleType], None]]) -> None:
        self.patches = patches
        self._busy: set[str] = set()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = self.patches.get(fullname)
        if patch is None or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = spec_from_other_finders(self, fullname, path, target)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: Any, patch: Callable[[types.ModuleType], None]) -> None:
        self.inner = inner
        self.patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        module: types.ModuleType | None = self.inner.create_module(spec)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        self.inner.exec_module(module)
        self.patch(module)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ... of the real loader
        return getattr(self.inner, name)
