"""The functions behind the column verbs: picklable batch functions over Arrow tables.

``select_columns``, ``drop_columns``, ``rename_columns`` and ``with_column`` run them on the workers.
Each is named after its verb (``__name__``), as Ray names the operator of a function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa


@dataclass(frozen=True)
class Columns:
    """``select_columns`` (``keep=True``) or ``drop_columns``: keep or drop these columns."""

    names: list[str]
    keep: bool

    @property
    def __name__(self) -> str:  # noqa: D105 - the verb's name, as Ray names a function's operator
        return "select_columns" if self.keep else "drop_columns"

    def __call__(self, batch: pa.Table) -> pa.Table:
        return batch.select(self.names) if self.keep else batch.drop_columns(self.names)


@dataclass(frozen=True)
class Predicate:
    """``filter(expr=...)``: a Ray Data expression as a row predicate."""

    expr: Any
    __name__ = "filter"

    def __call__(self, row: dict) -> bool:
        from lineage_data._ray.compat import eval_expression  # imports ray: not at dataset import

        return bool(eval_expression(self.expr, pa.Table.from_pylist([row]))[0].as_py())


@dataclass(frozen=True)
class Rename:
    """``rename_columns``: a mapping old -> new, or every new name in order."""

    names: Mapping[str, str] | Sequence[str]
    __name__ = "rename_columns"

    def __call__(self, batch: pa.Table) -> pa.Table:
        if isinstance(self.names, Mapping):
            unknown = [n for n in self.names if n not in batch.column_names]
            if unknown:
                raise KeyError(f"rename_columns: no column(s) {unknown} in {batch.column_names}")
            return batch.rename_columns([self.names.get(n, n) for n in batch.column_names])
        return batch.rename_columns(list(self.names))


@dataclass(frozen=True)
class WithColumn:
    """``with_column``: a column from a Ray Data expression or a function of the batch."""

    name: str
    expr: Any
    __name__ = "with_column"

    def __call__(self, batch: pa.Table) -> pa.Table:
        from ray.data.expressions import Expr

        from lineage_data._ray.compat import eval_expression

        values = (
            eval_expression(self.expr, batch) if isinstance(self.expr, Expr) else self.expr(batch)
        )
        if isinstance(values, pa.Scalar):
            values = pa.array([values.as_py()] * batch.num_rows, values.type)
        elif not isinstance(values, pa.Array | pa.ChunkedArray):
            values = pa.array(values)
        if self.name in batch.column_names:
            return batch.set_column(batch.column_names.index(self.name), self.name, values)
        return batch.append_column(self.name, values)
