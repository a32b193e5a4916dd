"""The root registry: the roots sources discover while running (a ``from_ray`` source), in order.

It grows with the corpus, by the id's bytes + ~18 bytes a root
(:class:`~lineage_data._core.roots.RootIndex`); which roots reached the consumer is not kept here
but by the driver's :class:`~lineage_data._core.ledger.Ledger`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from lineage_data._core.errors import DuplicateRootError
from lineage_data._core.roots import RootIndex


class Roots:
    """Registered roots, by source block: registering a block again changes nothing.

    Example:
        >>> roots = Roots()
        >>> roots.register_roots(["a", "b"], block="b0")
        >>> roots.register_roots(["a", "b"], block="b0")  # a retried source task
        >>> ids, cursor = roots.root_ids_since(0)
        >>> ids.to_pylist(), cursor
        (['a', 'b'], 2)
    """

    def __init__(self) -> None:
        """No root yet."""
        self._roots = RootIndex()  # registered roots, in order (a few bytes each, see _core.roots)
        self._blocks: set[str] = set()
        self._unnamed = 0  # blocks registered without a name (each a block of its own)

    def register_roots(self, roots: Sequence[str], block: str | None = None) -> None:
        """Record the roots of one source block; a root seen in another block is a duplicate.

        ``block`` names the source block (e.g. a digest of its ids): registering the same block again
        (a retried source task) changes nothing. Without it, every call is a block of its own.

        Raises:
            DuplicateRootError: a root was already registered by another block.
        """
        self._unnamed += block is None
        key = block if block is not None else f"#{self._unnamed}"
        if key in self._blocks or not len(roots):
            self._blocks.add(key)
            return
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
        """Roots registered after the first ``cursor`` ones, and the new cursor (for the driver).

        The roots are an Arrow array: cheap to send, no Python object per root.
        """
        size = len(self._roots)
        return self._roots.ids(range(min(cursor, size), size)), size
