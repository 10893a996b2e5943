"""Test set-up: without a GPU, Triton runs under its interpreter (set before triton is imported)."""

from __future__ import annotations

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run on a GPU host (see README, GPU tests)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
