"""Lineage keys: the name of an entity, ``(root, path)``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class LineageKey:
    """One entity: the source row ``root`` and the child ordinals ``path`` from it.

    >>> key = LineageKey("doc.pdf", (3, 1))
    >>> key.level, key.parent, key.ordinal
    (2, LineageKey(root='doc.pdf', path=(3,)), 1)
    >>> key.child(0)
    LineageKey(root='doc.pdf', path=(3, 1, 0))
    """

    root: str
    path: tuple[int, ...] = ()

    @property
    def level(self) -> int:
        """0 for a source row, 1 for its children, and so on."""
        return len(self.path)

    @property
    def parent(self) -> LineageKey:
        """The key one level up; a source row has none."""
        if not self.path:
            raise ValueError(f"{self} is a source row and has no parent")
        return LineageKey(self.root, self.path[:-1])

    @property
    def ordinal(self) -> int:
        """This entity's position among its siblings."""
        if not self.path:
            raise ValueError(f"{self} is a source row and has no ordinal")
        return self.path[-1]

    def child(self, ordinal: int) -> LineageKey:
        """The key of this entity's child number ``ordinal``."""
        return LineageKey(self.root, (*self.path, ordinal))

    def __str__(self) -> str:
        return self.root + "".join(f"/{i}" for i in self.path)
