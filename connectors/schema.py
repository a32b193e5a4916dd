"""One schema per shard directory: the same columns, in the same order, with the same types.

Loaders that take the first file's schema as the dataset's (Hugging Face ``datasets``) and
``pa.concat_tables`` need it. Blocks arrive with their columns in different orders, so every shard
puts the lineage columns it keeps first, then the user's in the rows' order. The first shard's
schema is recorded beside the shards (``_schema.json``) and every later shard is written with it:
a missing column becomes nulls, an untyped one (all nulls, empty lists) takes the recorded type,
and a value that cannot take it fails the write with a :class:`ShardError`. A new column is added
to the recorded schema, at the end. ``write_shards(schema=...)`` fixes it before the first shard.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pyarrow as pa

from lineage_data._core import columns as C
from lineage_data.connectors.manifest import ShardError, join_path, put_atomic

SCHEMA_FILE = "_schema.json"
_FIRST = (C.ROOT, C.MISSING)  # the lineage columns a shard keeps, first in every shard


def canonical(table: pa.Table) -> pa.Table:
    """``table`` with the lineage columns first, then the others in their order."""
    first = [n for n in _FIRST if n in table.column_names]
    order = first + [n for n in table.column_names if n not in _FIRST]
    return table if order == table.column_names else table.select(order)


def _untyped(kind: pa.DataType) -> bool:
    """No type known yet: all nulls, or lists (of lists ...) that held nothing."""
    while pa.types.is_list(kind) or pa.types.is_large_list(kind):
        kind = kind.value_type
    return pa.types.is_null(kind)


def conform(table: pa.Table, schema: pa.Schema, path: str) -> pa.Table:
    """``table`` with exactly ``schema``'s columns, order and types, or a :class:`ShardError`."""
    if extra := [n for n in table.column_names if n not in schema.names]:
        raise ShardError(
            f"shards at {path}: the rows have columns {extra} that the dataset's schema "
            f"({', '.join(schema.names)}) does not: add them to write_shards(schema=...) or "
            "write to a new path"
        )
    arrays = []
    for field in schema:
        if field.name not in table.column_names:
            arrays.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table[field.name]
        try:
            arrays.append(column if column.type == field.type else column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise ShardError(
                f"shards at {path}: column {field.name!r} holds {column.type} where the dataset's "
                f"schema has {field.type}: write them to a new path"
            ) from exc
    return pa.Table.from_arrays(arrays, schema=schema)


def merged(stored: pa.Schema, table: pa.Table, *, grow: bool = True) -> pa.Schema | None:
    """``stored`` with the types ``table`` knows where it had none, and (``grow``) its new columns.

    None when ``table`` adds nothing.
    """
    fields, changed = [], False
    for field in stored:
        if field.name in table.column_names and _untyped(field.type):
            found = table.schema.field(field.name).type
            if not _untyped(found):
                field, changed = field.with_type(found), True
        fields.append(field)
    if grow:
        new = [table.schema.field(n) for n in table.column_names if n not in stored.names]
        fields += [f.with_nullable(True) for f in new]
        changed = changed or bool(new)
    return pa.schema(fields, metadata=stored.metadata) if changed else None


def load(fs: Any, path: str) -> pa.Schema | None:
    """The schema recorded at ``path`` (None before the first shard)."""
    target = join_path(path, SCHEMA_FILE)
    fs.invalidate_cache(target)
    try:
        raw = json.loads(fs.cat_file(target))
    except FileNotFoundError:
        return None
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(raw["arrow"])))


def record(fs: Any, path: str, schema: pa.Schema) -> None:
    """Record ``schema`` at ``path``, atomically (read back by :func:`load`)."""
    raw = {
        "columns": [[f.name, str(f.type)] for f in schema],  # for people; the Arrow schema rules
        "arrow": base64.b64encode(schema.serialize().to_pybytes()).decode(),
    }
    put_atomic(fs, join_path(path, SCHEMA_FILE), json.dumps(raw, indent=1).encode())
