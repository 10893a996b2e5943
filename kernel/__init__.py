"""The fused Triton backward of the attention output projection with reshape.

The public names load lazily, so that ``kernel.workload`` (the facts: cases, tolerances, SOL model) can be
imported without torch and Triton, which keeps the ``solci`` commands that only read the history fast.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_EXPORTS = {
    "attn_output_proj_backward": "kernel.attn_output_proj_backward",
    "kernel_config": "kernel.attn_output_proj_backward",
    "KernelConfig": "kernel.configs",
    "config_for": "kernel.configs",
    "attn_output_proj_backward_ref": "kernel.reference",
    "attn_output_proj_backward_eager": "kernel.reference",
    "two_matmuls": "kernel.reference",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kernel' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """``kernel`` keeps its public function when its module of the same name is imported: the import system
    binds a loaded submodule on its package (``kernel.attn_output_proj_backward = <module>``), which would
    shadow the function for every later ``from kernel import attn_output_proj_backward``. The module stays
    reachable as ``sys.modules["kernel.attn_output_proj_backward"]`` (``importlib.import_module``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType) and value.__name__ == _EXPORTS[name]:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
