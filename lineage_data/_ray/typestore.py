"""Run-wide column types without a coordinator: Ray's own key-value store, first writer wins.

A flat plan (every stage a source-level 1:1 stage, see :attr:`Plan.flat`) has no barrier and no partial
group, so it runs without a coordinator: no actor to start, none to wait for before the first batch.
Its stages still establish their output column types run-wide (see
:class:`~lineage_data._core.columns.EstablishedTypes`); here through the GCS key-value store that every
Ray process already talks to, with a put that never overwrites: the first writer of a column wins.
An operator asks only for columns it has not seen yet, so a run makes a few such calls per stage.
"""

from __future__ import annotations

import ray
from ray.experimental import internal_kv

_NAMESPACE = "lineage_data"
_SEP = "\x1f"


class TypeStore:
    """The client a flat plan's operators get instead of a coordinator's: ``establish_types`` only.

    Picklable (two strings). ``drop()`` removes the run's keys; the driver calls it when the pass ends.
    """

    def __init__(self, run_id: str) -> None:
        self.name = f"lineage-{run_id}-types"
        self._run_id = run_id

    def for_stage(self, stage: str) -> TypeStore:
        """The same store (stages are named in each call)."""
        return self

    def establish_types(self, stage: str, types: dict[str, str]) -> dict[str, str]:
        """First writer wins, per column: the established type token of each column of ``types``.

        One read for all the columns (every worker but the first of a run finds them all there),
        then a put that never overwrites for each column nobody established yet.
        """
        keys = {column: _SEP.join((self._run_id, stage, column)).encode() for column in types}
        known = _read_all(list(keys.values()))
        out = {}
        for column, token in types.items():
            key = keys[column]
            first = known.get(key)
            if first is None and internal_kv._internal_kv_put(
                key, token, overwrite=False, namespace=_NAMESPACE
            ):  # another writer was first after all
                first = internal_kv._internal_kv_get(key, namespace=_NAMESPACE)
            out[column] = first.decode() if first is not None else token
        return out

    def drop(self) -> None:
        """Forget the run's types (its pass is over)."""
        if ray.is_initialized() and internal_kv._internal_kv_initialized():  # (not after shutdown)
            internal_kv._internal_kv_del(
                self._run_id + _SEP, del_by_prefix=True, namespace=_NAMESPACE
            )


def _read_all(keys: list[bytes]) -> dict[bytes, bytes]:
    """The values of those ``keys`` that have one, in one call to the GCS."""
    client = internal_kv.internal_kv_get_gcs_client()
    return dict(client.internal_kv_multi_get(keys, _NAMESPACE.encode()))
