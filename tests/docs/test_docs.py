"""The README and every docs page: their Python blocks run, and their links stay in the repository.

Python blocks (```` ```python ````) run with sybil, one page per test, in one namespace per page (as a
reader runs them top to bottom), in a fresh working directory (also where their ``tempfile`` folders
go), on the session's one local Ray. A
block that cannot run here (a shell command, a cluster address, an S3 URL) is marked ``bash`` or
``text`` instead; a block with no language would silently not run, so it fails the check below.
"""

import pathlib
import re
import tempfile

import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LANGUAGES = {"python", "bash", "text", "yaml"}
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^`\n]*)$", re.MULTILINE)
LINK = re.compile(r"\]\((?P<target>[^)\s]+)(?: \"[^\"]*\")?\)")

# Functions and classes a block defines live in "__main__", as in a user's script: Ray pickles them
# by value, so the workers need no module to import.
SYBIL = Sybil(
    parsers=[PythonCodeBlockParser()], setup=lambda namespace: namespace.update(__name__="__main__")
)


def _name(page: pathlib.Path) -> str:
    return str(page.relative_to(ROOT))


def _has_python(page: pathlib.Path) -> bool:
    return any(m["info"].split()[:1] == ["python"] for m in FENCE.finditer(page.read_text()))


@pytest.mark.parametrize("page", [p for p in PAGES if _has_python(p)], ids=_name)
def test_python_blocks_run(page, ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the blocks' mkdtemp() folders
    examples = list(SYBIL.parse(page))
    assert examples, f"{_name(page)}: no example found although a python block is there"
    for example in examples:
        example.evaluate()


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_block_names_its_language(page):
    text = page.read_text()
    opening = True
    for match in FENCE.finditer(text):
        info = match["info"].strip()
        if opening:
            language = info.split()[0] if info else ""
            line = text.count("\n", 0, match.start()) + 1
            assert language in LANGUAGES, (
                f"{_name(page)}:{line}: a code block must say its language, one of "
                f"{sorted(LANGUAGES)} (python runs in CI), got {info!r}"
            )
        opening = not opening
    assert opening, f"{_name(page)}: a code block is not closed"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_links_stay_in_the_repository(page):
    for match in LINK.finditer(page.read_text()):
        target = match["target"]
        if re.match(r"[a-z]+://", target):
            continue  # a public web page (Ray's docs ...)
        path = target.split("#", 1)[0]
        if not path:
            continue
        resolved = (page.parent / path).resolve()
        assert resolved.is_relative_to(ROOT), f"{_name(page)}: {target} leaves the repository"
        assert resolved.exists(), f"{_name(page)}: {target} does not exist"
