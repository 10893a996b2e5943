"""Plain helpers of the test suite (no tests, no fixtures: those live in tests/conftest.py), always imported as
``from tests.support.X import ...``; ``PROJECT`` is the project's root."""

from __future__ import annotations

from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
