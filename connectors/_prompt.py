"""Prompt building shared by the model stages (:mod:`lineage_data.connectors.vllm`, :mod:`lineage_data.connectors.openai`)."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

__all__ = ["batch_columns", "format_prompt", "template_fields"]


def template_fields(template: str) -> frozenset[str]:
    """The column names a format template refers to (``{meta[page]}`` refers to ``meta``)."""
    names = set()
    for _, field_name, _, _ in string.Formatter().parse(template):
        if field_name is None:
            continue
        name = re.split(r"[.\[]", field_name, maxsplit=1)[0]
        if not name or name.isdigit():
            raise ValueError(f"prompt_template fields must name columns, got {{{field_name}}}")
        names.add(name)
    return frozenset(names)


def format_prompt(
    template: str, fields: Iterable[str], columns: dict[str, list[Any]], row: int
) -> str:
    """``template`` formatted with row ``row`` of ``columns`` (a null value formats as ``""``)."""
    values = {name: "" if columns[name][row] is None else columns[name][row] for name in fields}
    return template.format_map(values)


def batch_columns(
    batch: pa.Table | Mapping[str, Sequence[Any]], wanted: set[str], who: str
) -> tuple[dict[str, list[Any]], int]:
    """The ``wanted`` columns of ``batch`` as Python lists, and its number of rows.

    Raises:
        ValueError: naming ``who``, when the batch lacks a wanted column.
    """
    names = list(batch.column_names if isinstance(batch, pa.Table) else batch.keys())
    if missing := sorted(wanted - set(names)):
        raise ValueError(f"{who}: the batch has no column {missing}; it has {names}")
    if isinstance(batch, pa.Table):
        return {name: batch.column(name).to_pylist() for name in wanted}, batch.num_rows
    columns = {name: list(batch[name]) for name in wanted}
    return columns, len(batch[names[0]]) if names else 0
