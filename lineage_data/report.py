"""The run report: per-stage outcome counts and per-parent commit times, as polars DataFrames."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import polars as pl

OUTCOME_COLUMNS = ("PRESENT", "DROPPED", "FAILED", "SUPPRESSED")


class RunReport:
    """What one execution did.

    Attributes:
        stages: one row per stage: ``stage``, ``kind``, outcome counts (``present``, ``dropped``,
            ``failed``, ``suppressed``) of the rows it emitted, and ``children`` for expansions.
        parents: one row per source root: ``root``, ``outcome``, ``cause``, ``stage``, ``committed_s``
            (seconds from the start of the run to the moment the root's terminal row was emitted).
            Built on first use: a run of 1M roots that nobody asks about does not pay for the table.
        wall_s: seconds from the start of the run to the end of its output.
        coordinator_calls: batch-level calls the coordinators served (all passes).
        extra: ``passes`` (1 + repair passes), ``repaired_roots``, ``lost_roots``,
            ``duplicates_dropped`` (second copies kept from the consumer), ``helpers_recreated``.
    """

    def __init__(
        self,
        stages: pl.DataFrame,
        parents: pl.DataFrame | Callable[[], pl.DataFrame],
        wall_s: float,
        coordinator_calls: int,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.stages = stages
        self._parents = parents  # the table, or the function that builds it (called once)
        self.wall_s = wall_s
        self.coordinator_calls = coordinator_calls
        self.extra: dict[str, Any] = dict(extra or {})
        self._lock = threading.Lock()

    @property
    def parents(self) -> pl.DataFrame:
        """See the class docstring."""
        with self._lock:
            if callable(self._parents):
                self._parents = self._parents()
            return self._parents

    def __getstate__(self) -> dict[str, Any]:  # picklable: the table built, no lock
        state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
        state["_parents"] = self.parents
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"RunReport(stages={len(self.stages)}, wall_s={self.wall_s:.3f}, "
            f"coordinator_calls={self.coordinator_calls}, extra={self.extra})"
        )

    @classmethod
    def from_snapshot(
        cls,
        snapshot: dict,
        stage_kinds: dict[str, str],
        wall_s: float,
        *,
        extra: dict[str, Any] | None = None,
    ) -> RunReport:
        """Build from per-stage ``counts``, the consumer's ``terminal`` rows and the calls served.

        ``snapshot`` holds ``counts`` (stage -> outcome -> n), ``terminal`` (root -> (outcome, cause,
        stage, committed_s)) and ``progress["reports"]``; ``stage_kinds`` is in plan order.
        """
        counts = snapshot["counts"]
        stage_rows = []
        for stage, kind in stage_kinds.items():
            c = counts.get(stage, {})
            stage_rows.append(
                {
                    "stage": stage,
                    "kind": kind,
                    **{o.lower(): int(c.get(o, 0)) for o in OUTCOME_COLUMNS},
                    "children": int(c.get("children", 0)) if kind == "expand" else None,
                }
            )
        terminal = snapshot["terminal"]
        return cls(
            stages=pl.DataFrame(stage_rows, schema=_STAGE_SCHEMA),
            parents=lambda: _parents(terminal),
            wall_s=wall_s,
            coordinator_calls=int(snapshot["progress"]["reports"]),
            extra=extra,
        )

    @property
    def repaired_roots(self) -> int:
        """Roots lost to a fault in the first pass and delivered by a repair pass."""
        return int(self.extra.get("repaired_roots", 0))

    @property
    def lost_roots(self) -> int:
        """Roots that ended FAILED with a ``LostError`` cause (no repair pass delivered them)."""
        return int(self.extra.get("lost_roots", 0))

    def stage_counts(self) -> dict[str, dict[str, int]]:
        """Per stage, its rows by outcome (``"PRESENT"`` ..., none if zero) and ``"children"``."""
        out: dict[str, dict[str, int]] = {}
        for row in self.stages.iter_rows(named=True):
            counts = {o: row[o.lower()] for o in OUTCOME_COLUMNS if row[o.lower()]}
            if row["children"] is not None:
                counts["children"] = row["children"]
            out[row["stage"]] = counts
        return out

    @property
    def failures(self) -> pl.DataFrame:
        """Parents whose terminal row is not PRESENT, with cause and stage."""
        return self.parents.filter(pl.col("outcome") != "PRESENT")

    def summary(self) -> str:
        """A few lines of text for a terminal."""
        committed = self.parents.filter(pl.col("outcome") == "PRESENT").height
        lines = [
            f"parents: {committed} committed, {self.parents.height - committed} failed "
            f"({self.parents.height} total) in {self.wall_s:.1f}s, {self.coordinator_calls} coordinator calls"
        ]
        for row in self.stages.iter_rows(named=True):
            counts = ", ".join(
                f"{o.lower()}={row[o.lower()]}" for o in OUTCOME_COLUMNS if row[o.lower()]
            )
            extra = f", children={row['children']}" if row["children"] is not None else ""
            lines.append(f"  {row['kind']:<8} {row['stage']:<20} {counts}{extra}")
        if self.failures.height:
            by_cause = self.failures.group_by("cause").len().sort("len", descending=True)
            lines.append("failures by cause:")
            for row in by_cause.head(10).iter_rows(named=True):
                lines.append(f"  {row['len']:>5}  {row['cause']}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready): stages and parents as lists of records."""
        return {
            "wall_s": self.wall_s,
            "coordinator_calls": self.coordinator_calls,
            "stages": self.stages.to_dicts(),
            "parents": self.parents.to_dicts(),
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunReport:
        """Inverse of :meth:`to_dict`."""
        return cls(
            stages=pl.DataFrame(data["stages"], schema=_STAGE_SCHEMA),
            parents=pl.DataFrame(data["parents"], schema=_PARENT_SCHEMA),
            wall_s=float(data["wall_s"]),
            coordinator_calls=int(data["coordinator_calls"]),
            extra=dict(data.get("extra", {})),
        )

    def plot_timeline(self, path: str, *, marks: dict[str, float] | None = None) -> str:
        """Save a PNG of parent commits over time (cumulative, committed vs failed). Needs matplotlib.

        ``marks``: labelled moments (seconds since the start) drawn as vertical lines, e.g. when the
        first shard was committed.
        """
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as exc:  # pragma: no cover - optional extra
            raise ImportError(
                "plotting needs matplotlib: pip install 'lineage-data[plot]'"
            ) from exc
        fig, ax = plt.subplots(figsize=(8, 4))
        for outcome, color in _TIMELINE_COLORS.items():
            ended = self.parents.filter(pl.col("outcome") == outcome)
            times = sorted(ended["committed_s"].to_list())
            if times:
                count = range(1, len(times) + 1)
                ax.step(times, count, where="post", color=color, label=outcome.lower())
        for i, (label, at) in enumerate(sorted((marks or {}).items(), key=lambda m: m[1])):
            ax.axvline(at, color="tab:blue", linestyle="--", linewidth=1)
            ax.annotate(
                f"{label} ({at:.1f}s)",
                (at, 1 - 0.08 * (i + 1)),
                xycoords=("data", "axes fraction"),
                xytext=(4, 0),
                textcoords="offset points",
                color="tab:blue",
                fontsize=8,
            )
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("parents")
        ax.set_xlim(0, max(self.wall_s, 1e-3))
        ax.set_title(f"parent commits ({self.parents.height} parents, wall {self.wall_s:.1f}s)")
        ax.legend(loc="upper left")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path


def _parents(terminal: Any) -> pl.DataFrame:
    """The ``parents`` table of terminal rows (a ledger's :class:`TerminalRows`, or a plain mapping)."""
    if hasattr(terminal, "to_arrow"):  # a ledger's TerminalRows: columns, no row per root
        parents = pl.DataFrame(terminal.to_arrow(), schema=_PARENT_SCHEMA)
    else:
        rows = [(root, *t[:3], float(t[3])) for root, t in terminal.items()]
        parents = pl.DataFrame(rows, schema=_PARENT_SCHEMA, orient="row")
    if parents["committed_s"].is_sorted():  # completion order is commit order (usual): no sort
        return parents
    return parents.sort("committed_s", maintain_order=True)  # ties stay in commit order


_STAGE_SCHEMA = {
    "stage": pl.String,
    "kind": pl.String,
    **{o.lower(): pl.Int64 for o in OUTCOME_COLUMNS},
    "children": pl.Int64,
}
_TIMELINE_COLORS = {"PRESENT": "tab:green", "FAILED": "tab:red", "SUPPRESSED": "tab:orange"}
_PARENT_SCHEMA = {
    "root": pl.String,
    "outcome": pl.String,
    "cause": pl.String,
    "stage": pl.String,
    "committed_s": pl.Float64,
}
