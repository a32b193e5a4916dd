"""What the model stages share (:mod:`~lineage_data.connectors.vllm`, ``openai``)."""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import pyarrow as pa

from lineage_data import RecordFailure
from lineage_data._core.errors import describe

NUM_PROMPT_TOKENS = "num_prompt_tokens"
NUM_GENERATED_TOKENS = "num_generated_tokens"
Answer = tuple[Any, int | None, int | None]  # (text or RecordFailure, prompt tokens, generated)


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


def checked_fields(
    template: str,
    output_column: str,
    media_columns: Collection[str | None],
    text_columns: Sequence[str] = (),
) -> frozenset[str]:
    """The template's fields, once the output column and the fields are known not to clash."""
    if output_column in (NUM_PROMPT_TOKENS, NUM_GENERATED_TOKENS):
        raise ValueError(f"output_column {output_column!r} clashes with a token-count column")
    fields = template_fields(template)
    if text_columns and (unknown := sorted(fields - set(text_columns))):
        raise ValueError(f"prompt_template uses {unknown}, which are not in text_columns")
    if media := sorted(fields & set(media_columns)):
        raise ValueError(f"prompt_template uses the media column(s) {media}")
    return fields


def prompt_text(
    who: str, template: str, fields: frozenset[str], columns: dict[str, list[Any]], row: int
) -> str | RecordFailure:
    """``template`` formatted with row ``row`` (a null formats as ``""``), or why it does not."""
    try:
        values = {name: "" if columns[name][row] is None else columns[name][row] for name in fields}
        return template.format_map(values)
    except Exception as exc:  # a value that does not fit its field's format spec
        return RecordFailure(f"{who}: prompt_template does not format: {describe(exc)}")


def batch_columns(
    batch: pa.Table | Mapping[str, Sequence[Any]], wanted: set[str], who: str
) -> tuple[dict[str, list[Any]], int]:
    """The ``wanted`` columns of ``batch`` as Python lists, and its number of rows."""
    names = list(batch.column_names if isinstance(batch, pa.Table) else batch.keys())
    if missing := sorted(wanted - set(names)):
        raise ValueError(f"{who}: the batch has no column {missing}; it has {names}")
    if isinstance(batch, pa.Table):
        return {name: batch.column(name).to_pylist() for name in wanted}, batch.num_rows
    columns = {name: list(batch[name]) for name in wanted}
    return columns, len(batch[names[0]]) if names else 0


def requests(num_rows: int, build: Callable[[int], Any]) -> tuple[list[Any], dict[int, Any]]:
    """Per row its ``RecordFailure`` or None, and the request ``build(row)`` of every other row."""
    built = [build(row) for row in range(num_rows)]
    failures = [r if isinstance(r, RecordFailure) else None for r in built]
    return failures, {row: r for row, r in enumerate(built) if not isinstance(r, RecordFailure)}


def output_columns(
    output_column: str, values: list[Any], answers: Mapping[int, Answer]
) -> dict[str, list[Any]]:
    """The stage's output: ``values`` with each row's answer filled in, and the token counts."""
    prompt_tokens: list[int | None] = [None] * len(values)
    generated_tokens: list[int | None] = [None] * len(values)
    for row, (value, prompt, generated) in answers.items():
        values[row], prompt_tokens[row], generated_tokens[row] = value, prompt, generated
    return {
        output_column: values,
        NUM_PROMPT_TOKENS: prompt_tokens,
        NUM_GENERATED_TOKENS: generated_tokens,
    }
