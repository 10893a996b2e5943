"""A laboratory of stored runs for the judging tests: ``Lab(db).run(commit, scale)`` ingests a result document of
six cases with run-level noise (seeded), as the runner stores it; ``confirmer`` fakes the interleaved
re-measurement; ``chain(n)`` names n commits."""

from __future__ import annotations

import random
from datetime import timedelta

from storage.db import Database
from storage.ingest import ingest_result
from tests.support.factories import BASE_TIME, default_median_us, make_result

NAMES = ["B1_S256", "B4_S128", "B8_S256", "B16_S256", "B2_S4096", "B64_S128"]


class Lab:
    """Stored runs with run-level noise (seeded), as the runner ingests them."""

    def __init__(self, db: Database, sigma: float = 0.003, seed: int = 1) -> None:
        self.db, self.sigma, self.rng, self.n = db, sigma, random.Random(seed), 0

    def run(
        self,
        commit: str,
        scale: float | dict[str, float] = 1.0,
        *,
        purpose: str = "measure",
        job_id: int | None = None,
        cases: list[str] | None = None,
        parent: str | None = None,
        **kw,
    ) -> str:
        self.n += 1
        names = cases or NAMES
        sc = scale if isinstance(scale, dict) else dict.fromkeys(names, scale)
        med = {c: default_median_us(c) * sc.get(c, 1.0) * (1 + self.rng.gauss(0, self.sigma)) for c in names}
        doc = make_result(
            run_id=f"r{self.n:04d}",
            commit=commit,
            cases=names,
            medians=med,
            started_at=BASE_TIME + timedelta(minutes=self.n),
            **kw,
        )
        ingest_result(self.db, doc, job_id=job_id, purpose=purpose, parent=parent)
        return doc["run_id"]

    def confirmer(self, levels: dict[str, float | dict[str, float]], calls: list | None = None):
        def confirm(parent: str, commit: str, cases: list[str]) -> list[tuple[str, str]]:
            if calls is not None:
                calls.append((parent, commit, list(cases)))
            out = []
            for label in ("A", "B", "B", "A"):
                c = parent if label == "A" else commit
                out.append((label, self.run(c, levels.get(c, 1.0), purpose="confirm", job_id=99, cases=cases)))
            return out

        return confirm


def chain(n: int, prefix: str = "c") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]
