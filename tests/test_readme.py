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


def section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_readme_says_what_a_newcomer_needs_first():
    first = section((ROOT / "README.md").read_text(), "Two commands")
    before = first.split("make serve   #", 1)[0]
    for needed in ("Python 3.11", "python3.11-venv", "`make`", "`npm`", "Chromium", "CI"):
        assert needed in before, f"the README says {needed} before the two commands"
    assert re.search(r"first run .* about \d+ seconds", first, re.DOTALL), "how long the first run takes"
    assert re.search(r"`make test` runs about [\d,]+ tests in about \d+ minutes", first)


def test_the_tours_env_file_is_not_the_deployments():
    text = (ROOT / "README.md").read_text()
    tour = section(text, "A five-minute tour")
    production = section(text, "Production")
    assert "cat > .env <<ENV" in tour and "make serve" in tour
    assert "cp .env.example compose.env" in production
    assert "docker compose --env-file compose.env up" in production
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        assert "cp .env.example .env" not in path.read_text(), f"{path.name} mixes the two files"
