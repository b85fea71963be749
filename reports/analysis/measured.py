"""Per canary record: what it was measured to share the engine with, and whether it diverged, as the report sees it.

Why: a level is what was asked; what a canary ran beside is what was measured (docs/design.md, "The level's band").
``loadgen onset`` judges levels by what each canary measured (``loadgen.studies.onset``), and must do so by the
report's own rules, not a second copy of them: the run folder is read by ``collectors.read.runfolder.load_run``, joined
with the engine's gauge and the client's own count by ``reports.analysis.build.with_engine_join`` (``join_engine``,
``join_client``), measured by ``reports.analysis.coresidency.measure`` (the engine's batch sizes, else its ``/metrics``
gauge, else the client's count), and compared with the reference by ``reports.analysis.canary.CanaryView`` (identity and
first divergence, ``reports.analysis.identity``, the reference by ``loadgen.core.identity.reference_index``). So a
record's ``diverged`` here is the one counted in its level's ``diverged`` in ``report.json``, and its ``measured_level``
the ``others`` group ``by_co_residency`` places it in.

Pure but for reading the folder: a run folder in, one row per canary record out.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from collectors.read.runfolder import load_run
from reports.analysis import coresidency
from reports.analysis.build import with_engine_join
from reports.analysis.canary import CanaryView, canonical_order

COLUMNS: Final = (
    "request_id",
    "canary_id",
    "phase",
    "level",
    "status",
    "diverged",  # nullable boolean: NA where the record failed, is a warm-up, or its canary has no reference
    "others_min",  # the other requests beside it over its life (NaN: not measured)
    "others_median",
    "others_max",
    "others_source",  # "engine_batch_sizes", "metrics", "client", or NA (not measured)
    "measured_level",  # nullable integer: others_median rounded, halves to even (by_co_residency's "others")
)


def measured_records(run_dir: Path) -> Any:
    """One row per canary record of ``run_dir`` (``COLUMNS``), each canary's rows in send order."""
    run = load_run(run_dir)
    cols = with_engine_join(run)
    loaded = run.prepared.loaded_side if run.servers else None
    ids = cols.frame["canary_id"].astype(str).to_numpy()
    parts = [
        _canary_rows(CanaryView(cols, canonical_order(cols, np.flatnonzero(ids == cid)), loaded))
        for cid in sorted(set(ids))
    ]
    if not parts:
        return pd.DataFrame({k: [] for k in COLUMNS})
    return pd.concat(parts, ignore_index=True)


def _canary_rows(view: CanaryView) -> Any:
    """One canary's rows: the view's own measured co-residency (a prefill/decode run: the loaded side's, where it
    was measured) and first divergence against its reference."""
    m = view.co
    if view.sides is not None and view.loaded is not None:
        side = view.sides[view.loaded]
        known = side.known
        m = replace(
            m,
            lo=np.where(known, side.lo, m.lo),
            med=np.where(known, side.med, m.med),
            hi=np.where(known, side.hi, m.hi),
            source=np.where(known, side.source, m.source).astype(np.int8),
        )
    f = view.cols.frame
    diverged = pd.array(view.fd >= 0, dtype="boolean")
    diverged[~view.comp | (view.ref is None)] = pd.NA
    level = pd.array(np.rint(m.med), dtype="Float64").astype("Int64")
    return pd.DataFrame(
        {
            "request_id": f["request_id"].to_numpy()[view.rows],
            "canary_id": f["canary_id"].astype(str).to_numpy()[view.rows],
            "phase": view.phase,
            "level": view.level.astype(np.int64),
            "status": f["status"].to_numpy()[view.rows],
            "diverged": diverged,
            "others_min": m.lo,
            "others_median": m.med,
            "others_max": m.hi,
            "others_source": pd.array([coresidency.SOURCE_NAMES.get(int(s)) for s in m.source], dtype="string"),
            "measured_level": level,
        }
    )
