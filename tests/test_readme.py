"""The README stands alone and the docs describe what exists (issue: "Real in production")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_names_nothing_outside_the_repository():
    text = (ROOT / "README.md").read_text()
    assert not re.search(r"\.\./|/work/|shared/spec", text), "the README points outside the repository"
    assert "/docs" in text and "/api/openapi.json" in text, "the HTTP reference is named"
    for relative in sorted(set(re.findall(r"`((?:docs|config|tests|bench)/[\w./-]+\.\w+)`", text))):
        assert (ROOT / relative).exists(), f"README names {relative}, which does not exist"


def test_no_doc_promises_a_later_issue():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        assert "later issue" not in path.read_text().lower(), path
