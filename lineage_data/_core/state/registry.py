"""The root registry: the roots sources discover while running (a ``from_ray`` source), in order.

It grows with the corpus, by the id's bytes + ~18 bytes a root (:class:`~.roots.RootIndex`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from lineage_data._core.errors import DuplicateRootError
from lineage_data._core.roots import RootIndex


class Roots:
    """Registered roots, by source block: registering a block again changes nothing."""

    def __init__(self) -> None:
        self._roots = RootIndex()  # registered roots, in order (a few bytes each, see _core.roots)
        self._blocks: set[str] = set()
        self._unnamed = 0  # blocks registered without a name (each a block of its own)

    def register_roots(self, roots: Sequence[str], block: str | None = None) -> None:
        """Record the roots of one block; a root another block registered is a ``DuplicateRootError``.

        ``block`` names the block (a retried source task registers it again: nothing changes);
        without it, every call is a block of its own.
        """
        self._unnamed += block is None
        key = block if block is not None else f"#{self._unnamed}"
        if key not in self._blocks and len(roots):
            # the block is new, so a root registered before was registered by another block
            _, known = self._roots.add_known(roots, all_new=True)
            if known.any():
                root = roots[int(known.argmax())]
                root = root.as_py() if isinstance(root, pa.Scalar) else root
                raise DuplicateRootError(
                    f"duplicate lineage root id {root!r}: source ids must be unique"
                )
        self._blocks.add(key)

    def root_ids_since(self, cursor: int) -> tuple[pa.StringArray, int]:
        """Roots registered after the first ``cursor`` ones (an Arrow array), and the new cursor."""
        size = len(self._roots)
        return self._roots.ids(range(min(cursor, size), size)), size
