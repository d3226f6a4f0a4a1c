"""The docs name only what exists: every path, module, class, function and constant in backticks in
`docs/` and `README.md` is in the tree, and every environment variable the code reads (the
service, its scripts, benches and tests) is explained in docs/settings.md.

What counts as a reference (prose only; fenced code blocks hold commands and output):
- a path whose first part is a tracked top-level entry (`svc/core/store.py`, `tests/`), with an
  optional `::test_name` or a glob (`tests/test_money_*.py`);
- a first-party dotted name (`svc.core.store.INDEXES`, `api.lifecycle.serve`), imported;
- `Class.attribute` for a class defined in product code (`Installs.owned`);
- a bare Python file name (`heavy.py`), found somewhere in the tree;
- an UPPER_SNAKE constant or variable, found in the tree outside the docs.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.support.source import parse

ROOT = Path(__file__).resolve().parent.parent
THIS = str(Path(__file__).resolve().relative_to(ROOT))
FIRST_PARTY = ("svc", "api", "actors", "plugins", "config", "tests", "bench", "scripts")
CODE = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
DOTTED = re.compile(r"([A-Za-z_]\w*)(?:\.[A-Za-z_]\w*)+")
UPPER = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+")
# Named in the docs, defined outside this tree: other systems' settings the docs tell you to set.
ELSEWHERE = {
    "OPENAI_API_KEY": "an OpenAI-compatible client's variable (docs/models.md)",
    "CRM_TOKEN": "an example secret name of a team",
    "AWS_PROFILE": "boto3's profile variable (docs/platforms/orchC.md)",
}
# A dotted name with one of these endings is a file name (`api.yaml`), checked as a path or not at all.
FILE_SUFFIXES = (".py", ".md", ".json", ".txt", ".html", ".js", ".css", ".yaml", ".yml", ".toml", ".env")
# First-party looking names that are no module: the entry-point group plugins register under.
NOT_MODULES = {"svc.plugins"}
# Environment variables read through a name the code does not spell as a literal at the read.
READERS = ("environ.get", "environ.setdefault", "getenv", "environ.pop")
READER_NAMES = {reader.rsplit(".", 1)[-1] for reader in READERS}


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def references() -> Iterator[tuple[str, str]]:
    """(document, backticked text) for every code span outside fenced blocks."""
    for path in documents():
        prose = FENCE.sub("", path.read_text())
        for span in CODE.findall(prose):
            yield str(path.relative_to(ROOT)), span.strip()


@cache
def tracked() -> tuple[str, ...]:
    """Every file git tracks, plus what this change adds (untracked, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return tuple(name for name in listed if (ROOT / name).exists())


@cache
def top_level() -> frozenset[str]:
    return frozenset(name.split("/", 1)[0] for name in tracked())


@cache
def classes() -> dict[str, list[tuple[str, Path]]]:
    """Class name -> (module, file) for every class in first-party code (found by a regex: a
    file is parsed only when one of its classes is named in the docs)."""
    found: dict[str, list[tuple[str, Path]]] = {}
    for name in tracked():
        if name.endswith(".py") and name.split("/", 1)[0] in FIRST_PARTY and not name.startswith("tests/"):
            module = name[:-3].replace("/", ".").removesuffix(".__init__")
            for match in re.finditer(r"^\s*class (\w+)\b", (ROOT / name).read_text(), re.MULTILINE):
                found.setdefault(match.group(1), []).append((module, ROOT / name))
    return found


@cache
def class_node(path: Path, name: str) -> ast.ClassDef | None:
    """The definition of the class `name` in the file."""
    for node in ast.walk(parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def path_problem(span: str) -> str | None:
    """Why a path reference does not hold, or None (also None when it is no repository path)."""
    path, _, test = span.partition("::")
    if "/" not in path and path not in top_level():
        return None
    if any(char in path for char in "<>$ {}=?") or path.split("/", 1)[0] not in top_level():
        return None
    if any(char in path for char in "*["):
        return None if list(ROOT.glob(path)) else "no file matches"
    if not (ROOT / path).exists():
        return "does not exist"
    if test and not re.search(rf"^(async )?def {re.escape(test)}\(", (ROOT / path).read_text(), re.M):
        return f"has no test {test}"
    return None


def resolve(dotted: str) -> Any:
    """The object a first-party dotted name names (ImportError or AttributeError otherwise)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ImportError(dotted)


def has_attribute(module: str, path: Path, name: str, attribute: str) -> bool:
    """Whether the class has `attribute`: on the class (methods, inherited ones, dataclass fields)
    or set on its instances (`self.attribute = ...`)."""
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        cls = None
    if cls is not None and (
        hasattr(cls, attribute)
        or attribute in getattr(cls, "__dataclass_fields__", {})
        or attribute in getattr(cls, "model_fields", {})
        or any(attribute in getattr(base, "__annotations__", {}) for base in getattr(cls, "__mro__", ()))
    ):
        return True
    node = class_node(path, name)
    return node is not None and any(
        isinstance(target, ast.Attribute) and target.attr == attribute
        for sub in ast.walk(node)
        if isinstance(sub, ast.Assign | ast.AnnAssign)
        for target in (sub.targets if isinstance(sub, ast.Assign) else [sub.target])
    )


def name_problem(span: str) -> str | None:
    """Why a dotted name reference does not hold, or None (also None when it is not first-party)."""
    name = re.sub(r"\(.*\)$", "", span)  # `Plans.apply_subscription(org_id, ...)` names the method
    if not DOTTED.fullmatch(name) or name in NOT_MODULES or name.endswith(FILE_SUFFIXES):
        return None
    head, _, rest = name.partition(".")
    if head in FIRST_PARTY:
        try:
            resolve(name)
        except (ImportError, AttributeError) as exc:
            if name in span_names():  # a span attribute or event the traces carry (observability.md)
                return None
            return f"cannot be resolved ({type(exc).__name__})"
        return None
    if head in classes() and "." not in rest:
        if not any(has_attribute(module, path, head, rest) for module, path in classes()[head]):
            return f"class {head} has no attribute {rest}"
    return None


@cache
def span_names() -> frozenset[str]:
    """The `svc.*` span attribute and event names the plugins write (string literals)."""
    names = set()
    for path in (ROOT / "plugins").rglob("*.py"):
        for node in ast.walk(parse(path.read_text())):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and value.startswith("svc."):
                names.add(value)
    return frozenset(names)


def file_problem(span: str) -> str | None:
    """A bare `name.py` that no file in the tree is called."""
    if not re.fullmatch(r"[\w.-]+\.py", span):
        return None
    return None if any(Path(name).name == span for name in tracked()) else "no such file in the tree"


@cache
def outside_docs() -> frozenset[str]:
    """Every UPPER_SNAKE word of every tracked text file but the docs."""
    texts = []
    for name in tracked():
        if name.startswith("docs/") or name in ("README.md", THIS) or "/vendor/" in name:
            continue
        try:
            texts.append((ROOT / name).read_text())
        except (UnicodeDecodeError, IsADirectoryError):
            continue
    return frozenset(re.findall(r"\b[A-Z][A-Z0-9_]*\b", "\n".join(texts)))


def constant_problem(span: str) -> str | None:
    """An UPPER_SNAKE name that nothing outside the docs spells."""
    if not UPPER.fullmatch(span) or span in ELSEWHERE:
        return None
    return None if span in outside_docs() else "named nowhere in the tree"


CHECKS = (path_problem, name_problem, file_problem, constant_problem)


def test_every_reference_in_the_docs_exists():
    problems = sorted(
        {
            f"{document}: `{span}` {problem}"
            for document, span in references()
            for check in CHECKS
            if (problem := check(span)) is not None
        }
    )
    assert problems == []


@pytest.mark.parametrize(
    ("span", "broken"),
    [
        ("svc/core/store.py", False),
        ("plugins/builtin/providers.py", True),
        ("tests/test_settings.py::test_the_settings_check_command", False),
        ("tests/test_settings.py::test_that_never_was", True),
        ("tests/test_money_*.py", False),
        ("svc.core.store.INDEXES", False),
        ("api.server.run", True),
        ("svc.vault.Vault.rotate", True),
        ("svc.orgs.RULES", True),
        ("Installs.owned", False),
        ("Removal.hand_back", False),
        ("Orgs._access", True),
        ("Orgs.apply_subscription(org_id, *, status)", True),
        ("Plans.apply_subscription(org_id, *, status)", False),
        ("svc.plugins", False),  # the entry-point group
        ("RayRuntime.start", False),
        ("heavy.py", False),
        ("providers.py", True),
        ("INDEXES", False),
        ("TOKENLESS_PLATFORMS", True),
        ("usage.input_tokens", False),  # a JSON field path, not a reference
        ("ray.cluster_utils.Cluster", False),  # another project's name
    ],
)
def test_the_reference_checks_tell_a_broken_reference(span, broken):
    assert any(check(span) is not None for check in CHECKS) == broken


# ---- every environment variable the code reads is explained -----------------------------------


def variables_read() -> dict[str, str]:
    """Every environment variable read by name anywhere in the tree's Python: name -> where."""
    found: dict[str, str] = {}
    for name in tracked():
        if not name.endswith(".py") or name.split("/", 1)[0] not in FIRST_PARTY:
            continue
        text = (ROOT / name).read_text()
        if "environ" not in text and "getenv" not in text:
            continue  # reads no variable: not worth parsing
        tree = parse(text)
        constants = {  # module-level names of strings, such as `VARIABLE = "SVC_TEST_MONGO_DIR"`
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            key = None
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute | ast.Name)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) in READER_NAMES
                and node.args
                and ast.unparse(node.func).endswith(READERS)
            ):
                key = node.args[0]
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "environ"
            ):
                key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.setdefault(key.value, name)
            elif isinstance(key, ast.Name) and key.id in constants:
                found.setdefault(constants[key.id], name)
            elif isinstance(key, ast.Attribute) and key.attr.isupper():
                value = module_constant(key)
                if value is not None:
                    found.setdefault(value, name)
    return found


def module_constant(node: ast.Attribute) -> str | None:
    """The string an attribute reference such as `shared_db.VARIABLE` names, when importable."""
    owner = ast.unparse(node.value)
    for candidate in (owner, f"tests.support.{owner}", f"svc.core.{owner}"):
        try:
            value = getattr(importlib.import_module(candidate), node.attr)
        except (ImportError, AttributeError):
            continue
        return value if isinstance(value, str) else None
    return None


def test_every_environment_variable_the_code_reads_is_in_the_settings_doc():
    documented = (ROOT / "docs" / "settings.md").read_text()
    read = variables_read()
    assert {"SVC_SECRETS_DIR", "RAY_ADDRESS", "SVC_CHROMIUM", "SVC_PAPERCLIP_CACHE", "CI"} <= set(read)
    missing = sorted(
        f"{name} ({where})" for name, where in read.items() if not re.search(rf"\b{name}\b", documented)
    )
    assert missing == [], "explain these in docs/settings.md"


# ---- lists the docs keep: commands, packages, benches -------------------------------------------


def commands() -> list[str]:
    """Every `svc` command and action, as `svc users create`, from the real parser."""
    from api.cli import build_parser

    found = []

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers:
            found.append(prefix)
        for action in subparsers:
            for name, sub in action.choices.items():
                walk(sub, f"{prefix} {name}")

    walk(build_parser(), "svc")
    return found


def test_the_command_line_section_names_every_command():
    section = (ROOT / "docs" / "lifecycle.md").read_text().split("## Command line", 1)[1].split("\n## ", 1)[0]
    spelled = " ".join(re.sub(r"\s+", " ", span) for span in re.findall(r"`([^`]+)`", section))
    missing = [command for command in commands() if command not in spelled]
    assert {"svc serve", "svc users delete", "svc templates import"} <= set(commands())
    assert missing == [], "docs/lifecycle.md, Command line, does not name these"


def test_the_architecture_names_every_package():
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("## Capability packages", 1)[1].split("\n## ", 1)[0]
    missing = []
    for init in sorted(ROOT.glob("*/**/__init__.py")):
        package = init.parent.relative_to(ROOT)
        if package.parts[0] not in ("svc", "api", "actors", "plugins", "config") or len(package.parts) == 1:
            continue
        named = f"| `{package.name}` |" in table if package.parts[0] == "svc" else f"`{package}/`" in text
        if not named:
            missing.append(str(package))
    assert missing == [], "docs/architecture.md does not name these packages"


def test_the_bench_page_says_what_make_bench_runs():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    run = re.findall(r"(bench/\w+\.py)", recipe)
    sentence = re.search(r"`make bench`\s+runs (.*?);", (ROOT / "docs" / "bench.md").read_text(), re.DOTALL)
    assert sentence and run
    assert re.findall(r"`(bench/\w+\.py)`", sentence.group(1)) == run
