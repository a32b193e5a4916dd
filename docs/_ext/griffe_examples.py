"""A griffe extension for the API reference: ``Example:`` headers read as Google ``Examples:``.

The docstrings follow the Google convention, which allows ``Example:`` as well as ``Examples:``;
griffe only knows the plural, and would render the doctests under ``Example:`` as prose. A header
with a note, ``Example (on CPU):``, keeps the note as the section's first line. Doctests outside
an examples section are fenced as ``pycon`` so that their output is shown as code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_HEADER = re.compile(r"^(?P<indent>[ \t]*)Example(?: \((?P<note>[^)]*)\))?:[ \t]*$")
_SECTION = re.compile(r"^[ \t]*[A-Z][\w ]*(?: \([^)]*\))?:[ \t]*$")


def _rewrite(text: str) -> str:
    out: list[str] = []
    in_examples = False
    fence: list[str] | None = None
    for line in text.split("\n"):
        header = _HEADER.match(line)
        if header:
            indent = header["indent"]
            out.append(f"{indent}Examples:")
            if header["note"]:
                out.append(f"{indent}    {header['note']}:")
                out.append("")
            in_examples = True
            continue
        if _SECTION.match(line) and not line.startswith((" ", "\t")):
            in_examples = line.strip() == "Examples:"
        stripped = line.lstrip()
        if in_examples:
            out.append(line)
            continue
        if fence is not None:
            if stripped:
                fence.append(line)
                continue
            out.extend(["```pycon", *fence, "```", ""])
            fence = None
            continue
        if stripped.startswith(">>>") and line == stripped:
            fence = [line]
            continue
        out.append(line)
    if fence is not None:
        out.extend(["```pycon", *fence, "```"])
    return "\n".join(out)


class ExampleSections(griffe.Extension):
    """Rewrite each docstring once, when its object is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring in place (the parsed form is built later, on render)."""
        if obj.docstring is not None:
            obj.docstring.value = _rewrite(obj.docstring.value)
