"""The layout's rules, checked against the code (docs/architecture.md): packages are reached
through their public surface, each collection is read and written only by the package that owns
it (others call the owner's exported functions), no package touches a private attribute of
another's service, the domain names no platform but the managed runtime, and no module grows
past 500 lines. The layers themselves
are held by import-linter (`lint-imports`, in `make test`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.source import parse

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("api", "actors", "svc", "plugins", "config")
PACKAGES = sorted(p.name for p in (ROOT / "svc").iterdir() if (p / "__init__.py").exists())

# Who owns each collection: only that package's modules read or write it (others call the
# functions it exports; a package below the owner is handed them by svc/wiring.py).
OWNERS = {
    "identity": {"users", "sessions", "api_keys", "install_tokens", "rate_limits", "org_key_slots"},
    "templates": {"templates", "template_versions"},
    "runs": {"runs", "run_stats", "runs_newest"},
    "installs": {"installs", "vault_secrets", "auto_upgrade_state"},
    "runtime": {
        "pipeline_runs",
        "schedules",
        "pipeline_events",
        "agent_runs",
        "security_requests",
        "drafts",
        "targets",
        "counters",
        "run_events",
        "callbacks",
        "actor_incarnations",
    },
    "orgs": {
        "orgs",
        "org_members",
        "org_invitations",
        "org_secrets",
        "org_approvals",
        "org_audit",
        "org_secret_slots",
    },
    "billing": {"invoices", "payment_events", "pay_customers", "payouts", "spend_alerts"},
    "core": {"outbox", "timeline", "metric_counters", "leases", "key_rotations"},
    "mcp": {"mcp_consents", "mcp_approvals"},
    "evals": {"eval_scorecards", "eval_budgets"},
}
WRITES = (
    "insert_one|insert_many|update_one|update_many|delete_one|delete_many|find_one_and_update"
    "|find_one_and_delete|find_one_and_replace|replace_one|bulk_write"
)
# A collection named as `store.name`, `store["name"]` or `store[CONSTANT]` (`store[ledger.RUNS]`),
# written directly, or named as the first argument of a batch operation (svc/core/bulk.py).
NAMED = r'(?:\.(\w+)|\[\s*(?:"(\w+)"|([\w.]+))\s*\])'
WRITE = re.compile(rf"store{NAMED}\s*\.\s*(?:{WRITES})\(")
BATCHED = re.compile(r'\b\w+\.(?:put|update)\(\s*(?:"(\w+)"|([A-Z_][\w.]*))\s*,')
# Any touch of a collection, read or write: a `store`/`db` (or `self.store`...) subscript or
# attribute naming it, or a helper taking its name first (a batch's `put`/`update`, a declared
# encrypted field of `svc keys rotate`).
TOUCH = re.compile(rf"\b(?:store|db){NAMED}")
NAMED_FIRST = re.compile(r'\b(?:\w+\.(?:put|update)|Encrypted)\(\s*(?:"(\w+)"|([A-Z_][\w.]*))\s*,')
# The store itself declares every collection (its indexes, its typed accessors).
STORE = "svc/core/store.py"
# The only writer of a managed run (docs/runtime.md, "Who may write what").
RUN_WRITER = "svc/runtime/ledger.py"


def product_files() -> list[Path]:
    return [p for d in PRODUCT for p in (ROOT / d).rglob("*.py")]


def package_of(path: Path) -> str | None:
    parts = path.relative_to(ROOT).parts
    return parts[1] if parts[0] == "svc" and len(parts) > 2 else None


def imported_modules(path: Path) -> list[str]:
    tree = parse(path.read_text())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def test_packages_are_reached_through_their_public_surface() -> None:
    """Outside a capability package, product code imports `svc.<pkg>`, never its modules."""
    offences = []
    for path in product_files():
        mine = package_of(path)
        for module in imported_modules(path):
            parts = module.split(".")
            if parts[0] == "svc" and len(parts) > 2 and parts[1] in PACKAGES and parts[1] != mine:
                offences.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offences == []


def test_a_surface_names_operations_not_modules() -> None:
    """A package exports functions and types, never one of its modules (`from svc.core import
    tokens` then `tokens.new_id()`): what others use is named in `__all__`, one place to read."""
    import importlib
    import types

    surfaces = {package: importlib.import_module(f"svc.{package}") for package in PACKAGES}

    def is_module(package: str, name: str) -> bool:
        # A name the surface does not bind is still found as a submodule by `from ... import`.
        found = getattr(surfaces[package], name, None)
        return isinstance(found, types.ModuleType) or (
            found is None and (ROOT / "svc" / package / f"{name}.py").exists()
        )

    offences = [
        f"svc.{package} exports the module {name}"
        for package, surface in surfaces.items()
        for name in surface.__all__
        if is_module(package, name)
    ]
    for path in product_files():
        mine = package_of(path)
        for node in ast.walk(parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
                continue
            parts = node.module.split(".")
            if len(parts) != 2 or parts[0] != "svc" or parts[1] not in PACKAGES or parts[1] == mine:
                continue
            offences += [
                f"{path.relative_to(ROOT)} imports the module {node.module}.{alias.name}"
                for alias in node.names
                if is_module(parts[1], alias.name)
            ]
    assert offences == []


@pytest.mark.parametrize("package", PACKAGES)
def test_each_surface_exports_exactly_its_all(package: str) -> None:
    """`__all__` is the public surface (httpx's habit): every name in it exists, and every name
    the package imports for others is listed."""
    import importlib

    module = importlib.import_module(f"svc.{package}")
    exported = set(module.__all__)
    assert all(hasattr(module, name) for name in exported)
    tree = parse((ROOT / "svc" / package / "__init__.py").read_text())
    imported = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if node.module != "__future__"
    }
    assert imported == exported


def module_constants(path: Path) -> dict[str, str]:
    """A module's own `NAME = "literal"` assignments."""
    found: dict[str, str] = {}
    for node in parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            if isinstance(node.value.value, str):
                found.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return found


def constants() -> dict[str, str]:
    """Every product module's constants as `module.NAME` (how other modules spell them)."""
    return {
        f"{path.stem}.{name}": value
        for path in product_files()
        for name, value in module_constants(path).items()
    }


def writes(path: Path, named: dict[str, str]) -> list[str]:
    """The collections a module writes, in every spelling (direct, by constant, in a batch)."""
    text = path.read_text()
    named = {**named, **module_constants(path)}
    out = []
    for match in WRITE.finditer(text):
        out.append(match.group(1) or match.group(2) or named.get(match.group(3), match.group(3)))
    for match in BATCHED.finditer(text):
        out.append(match.group(1) or named.get(match.group(2), match.group(2)))
    return out


def touches(path: Path, named: dict[str, str]) -> list[str]:
    """The collections a module reads or writes, in every spelling, in the order they appear."""
    text = path.read_text()
    named = {**named, **module_constants(path)}
    found = [
        (match.start(), match.group(1) or match.group(2) or named.get(match.group(3), match.group(3)))
        for match in TOUCH.finditer(text)
    ]
    found += [
        (match.start(), match.group(1) or named.get(match.group(2), match.group(2)))
        for match in NAMED_FIRST.finditer(text)
    ]
    return [collection for _, collection in sorted(found)]


def foreign_touches(directory: str) -> list[str]:
    """Every touch, under `directory`, of a collection its module's package does not own."""
    owner = {collection: package for package, names in OWNERS.items() for collection in names}
    named = constants()
    offences = []
    for path in sorted((ROOT / directory).rglob("*.py")):
        where = str(path.relative_to(ROOT))
        if where == STORE:
            continue
        mine = package_of(path)
        for collection in touches(path, named):
            if collection in owner and owner[collection] != mine:
                whose = owner[collection] + ("'" if owner[collection].endswith("s") else "'s")
                offences.append(f"{where}: {collection} ({whose})")
    return offences


@pytest.mark.parametrize("directory", ["svc", "actors", "api"])
def test_each_collection_is_read_and_written_only_by_its_owner(directory: str) -> None:
    """Another package's records are reached through its exported functions, never the store:
    reads too, so each package answers its questions (membership, a template's price) once."""
    assert foreign_touches(directory) == []


def test_only_the_ledger_writes_runs() -> None:
    """Every write to the run collection goes through svc/runtime/ledger.py: the API's and the
    scheduler's inserts, the job runner's hand-overs, the actor's transitions, the settlement."""
    named = constants()
    offences = [
        str(path.relative_to(ROOT))
        for path in product_files()
        if str(path.relative_to(ROOT)) != RUN_WRITER and "pipeline_runs" in writes(path, named)
    ]
    assert offences == []


def test_the_write_finder_sees_every_spelling(tmp_path: Path) -> None:
    """The checks above would pass vacuously if the finder missed a spelling."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        'RUNS = "pipeline_runs"\n'
        'await store["pipeline_runs"].insert_one(run)\n'
        "await store[RUNS].update_one(q, c)\n"
        "await store[ledger.RUNS].update_many(q, c)\n"
        "await store.installs.find_one_and_update(q, c)\n"
        'batch.update("installs", q, c)\n'
        "batch.put(RUNS, doc)\n"
    )
    named = {"RUNS": "pipeline_runs", "ledger.RUNS": "pipeline_runs"}
    assert writes(sample, named) == [
        "pipeline_runs",
        "pipeline_runs",
        "pipeline_runs",
        "installs",
        "installs",
        "pipeline_runs",
    ]


def test_the_touch_finder_sees_every_spelling(tmp_path: Path) -> None:
    """The ownership check would pass vacuously if the finder missed a read's spelling."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        'RUNS = "pipeline_runs"\n'
        'doc = await store["templates"].find_one(q)\n'
        "n = await self.store[RUNS].count_documents(q)\n"
        "cursor = store[ledger.RUNS].find(q)\n"
        "members = await self.store.org_members.distinct('userId', q)\n"
        "col = self.store.orgs\n"
        'users = db["users"]\n'
        "rows = await (await store[run_stats.COLLECTION].aggregate(p)).to_list(None)\n"
        'batch.update("installs", q, c)\n'
        "batch.put(RUNS, doc)\n"
        'ENCRYPTED = (Encrypted("org_secrets", "valueEncrypted"),)\n'
    )
    named = {"RUNS": "pipeline_runs", "ledger.RUNS": "pipeline_runs", "run_stats.COLLECTION": "run_stats"}
    assert touches(sample, named) == [
        "templates",
        "pipeline_runs",
        "pipeline_runs",
        "org_members",
        "orgs",
        "users",
        "run_stats",
        "installs",
        "pipeline_runs",
        "org_secrets",
    ]


def service_classes() -> dict[str, str]:
    """Every class a capability package defines, by name, with its package."""
    found: dict[str, str] = {}
    for path in (ROOT / "svc").rglob("*.py"):
        package = package_of(path)
        if package is not None:
            for node in ast.walk(parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    found.setdefault(node.name, package)
    return found


def annotated_class(annotation: ast.expr | None) -> str | None:
    """`Installs`, `svc.installs.Installs`, `"Installs"` or `Installs | None`: the class named."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.BinOp):  # `X | None`
        return annotated_class(annotation.left) or annotated_class(annotation.right)
    if isinstance(annotation, ast.Name):
        return annotation.id
    if isinstance(annotation, ast.Attribute):
        return annotation.attr
    return None


def private_reaches(path: Path, classes: dict[str, str], mine: str | None) -> list[str]:
    """`x._name` where `x` is a parameter, a local or a `self.` attribute annotated (or built) as a
    class of another package: that package's internals, reached around its surface."""
    tree = parse(path.read_text())

    def foreign(name: str | None) -> bool:
        return name is not None and name in classes and classes[name] != mine

    typed: dict[str, str] = {}  # "installs" or "self.installs" -> its class
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs]:
                if foreign(annotated_class(arg.annotation)):
                    typed[arg.arg] = annotated_class(arg.annotation) or ""
        elif isinstance(node, ast.AnnAssign):
            target = ast.unparse(node.target)
            if foreign(annotated_class(node.annotation)):
                typed[target] = annotated_class(node.annotation) or ""
                if isinstance(node.target, ast.Name):  # a class body's field: `self.<name>`
                    typed[f"self.{target}"] = typed[target]
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = ast.unparse(node.targets[0]), node.value
            if isinstance(value, ast.Name) and value.id in typed:
                typed.setdefault(target, typed[value.id])
            elif isinstance(value, ast.Call) and foreign(annotated_class(value.func)):
                typed.setdefault(target, annotated_class(value.func) or "")
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    offences = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            if owner in typed:
                offences.append((node.lineno, f"{where}:{node.lineno} {owner}.{node.attr} ({typed[owner]})"))
    return [offence for _, offence in sorted(offences)]


def test_no_package_reaches_into_another_packages_service() -> None:
    """A package calls another's service through its public methods: `self.installs._decrypt_json`
    from the runtime would tie it to how installs store their fields (imports alone cannot see it)."""
    classes = service_classes()
    offences = [
        offence
        for directory in ("svc", "api", "actors")
        for path in sorted((ROOT / directory).rglob("*.py"))
        for offence in private_reaches(path, classes, package_of(path))
    ]
    assert offences == []


def test_the_private_reach_finder_sees_a_reach(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "class Runner:\n"
        "    def __init__(self, installs: Installs, mine: Local) -> None:\n"
        "        self.installs = installs\n"
        "        self.mine = mine\n"
        "        self.charges = Charges(store)\n"
        "    def go(self, other: 'Installs | None') -> None:\n"
        "        self.installs._decrypt_json(x)\n"
        "        other._deployer(p)\n"
        "        self.charges._payee(t)\n"
        "        self.mine._fine()\n"
        "        self._own()\n"
        "        self.installs.__class__\n"
    )
    classes = {"Installs": "installs", "Charges": "billing", "Local": "runtime"}
    found = [line.split(" ", 1)[1] for line in private_reaches(sample, classes, "runtime")]
    assert found == [
        "self.installs._decrypt_json (Installs)",
        "other._deployer (Installs)",
        "self.charges._payee (Charges)",
    ]


def test_the_domain_names_no_platform_but_the_managed_runtime() -> None:
    """The core reads `PlatformInfo.traits`; a platform id in svc/ would bypass them."""
    pattern = re.compile(r"[\"'](orchA|orchB|orchC)[\"']")
    offences = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in (ROOT / "svc").rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offences == []


def test_no_module_is_over_500_lines() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in product_files()}
    assert {path: n for path, n in sizes.items() if n > 500} == {}
