"""Pin the tested dependency set and write down every dependency's license.

`python scripts/licenses.py` (run with the project's `.venv` after `make install`)
writes two generated files from the installed environment:

- `constraints.txt`: `name==version` for every package the Docker image installs
  (the project's dependencies with the extras named on the Dockerfile's
  `pip install` line, direct and transitive), then the pins that only `make`
  uses (the `embedded` and `dev` extras). The Dockerfile and the Makefile both
  install with `-c constraints.txt`, so the image runs the versions the suite ran.
- `docs/licenses.md`: each of those packages with its version and SPDX license.

`python scripts/licenses.py --check` writes nothing and exits 1 when either file
is stale or a package of the image is outside the allow-list; the test suite
(`tests/test_licenses.py`) makes the same checks through the functions below.
`--resolve` (network) also asks pip what the Dockerfile's install line would install
from the package index and compares it with the pins.

Licenses are read from package metadata, in this order: `License-Expression`
(PEP 639), the `License` field when it is an SPDX expression or a well-known
spelling of one, a single specific trove classifier. A package for which none of
these gives an answer must be reviewed by hand (`REVIEWED`, keyed by version so a
new release is looked at again); until then it is reported by name.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
LICENSES_DOC = ROOT / "docs" / "licenses.md"
DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = ROOT / "pyproject.toml"

# Licenses a package of the image may carry without further thought: permissive,
# compatible with shipping the image under Apache-2.0.
ALLOWED = frozenset({"Apache-2.0", "MIT", "BSD-2-Clause", "BSD-3-Clause", "ISC", "PSF-2.0", "MPL-2.0"})
# The few others accepted, each with the reason (rendered into docs/licenses.md).
JUSTIFIED: dict[str, str] = {
    "MIT-0": "MIT without the attribution condition, so strictly more permissive than MIT.",
    "0BSD": "BSD without the attribution condition, so strictly more permissive than BSD-2-Clause.",
    "Unlicense": "a public-domain dedication with a permissive fallback; it asks nothing of us.",
}
# The extras `make` adds on top of the image's set; they are never installed in the image.
MAKE_ONLY_EXTRAS = ("embedded", "dev")

# Free-text `License` values seen in the wild that name one SPDX license unambiguously.
LICENSE_ALIASES: dict[str, str] = {
    "apache 2.0": "Apache-2.0",
    "apache-2": "Apache-2.0",
    "apache license 2.0": "Apache-2.0",
    "apache license, version 2.0": "Apache-2.0",
    "apache software license": "Apache-2.0",
    "apache software license 2.0": "Apache-2.0",
    "mit license": "MIT",
    "the mit license": "MIT",
    "bsd 3-clause": "BSD-3-Clause",
    "3-clause bsd license": "BSD-3-Clause",
    "new bsd license": "BSD-3-Clause",
    "bsd 2-clause": "BSD-2-Clause",
    "bsd 2-clause license": "BSD-2-Clause",
    "bsd 3-clause license": "BSD-3-Clause",
    "2-clause bsd license": "BSD-2-Clause",
    "simplified bsd license": "BSD-2-Clause",
    "isc license": "ISC",
    "psf": "PSF-2.0",
    "psf license": "PSF-2.0",
    "python software foundation license": "PSF-2.0",
    "mpl 2.0": "MPL-2.0",
    "mozilla public license 2.0 (mpl 2.0)": "MPL-2.0",
}
# Trove classifiers that name one SPDX license (the bare "BSD License" does not: 2 or 3 clauses?).
CLASSIFIERS: dict[str, str] = {
    "License :: OSI Approved :: MIT License": "MIT",
    "License :: OSI Approved :: MIT No Attribution License (MIT-0)": "MIT-0",
    "License :: OSI Approved :: Apache Software License": "Apache-2.0",
    "License :: OSI Approved :: ISC License (ISCL)": "ISC",
    "License :: OSI Approved :: Python Software Foundation License": "PSF-2.0",
    "License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "License :: OSI Approved :: The Unlicense (Unlicense)": "Unlicense",
    "License :: OSI Approved :: GNU General Public License v3 (GPLv3)": "GPL-3.0-only",
    "License :: OSI Approved :: GNU Affero General Public License v3": "AGPL-3.0-only",
}
# SPDX identifiers recognised in a free-text `License` field (beyond ALLOWED and JUSTIFIED), so
# that a copyleft package is reported as "not allowed" rather than as "no metadata".
KNOWN_IDS = frozenset(
    {
        "GPL-2.0-only",
        "GPL-2.0-or-later",
        "GPL-3.0-only",
        "GPL-3.0-or-later",
        "LGPL-2.1-only",
        "LGPL-2.1-or-later",
        "LGPL-3.0-only",
        "LGPL-3.0-or-later",
        "AGPL-3.0-only",
        "AGPL-3.0-or-later",
        "CC-BY-4.0",
        "CC0-1.0",
        "Zlib",
        "HPND",
        "BSL-1.0",
        "EPL-2.0",
        "Python-2.0",
        "SSPL-1.0",
    }
)
CLASSIFIER_PREFIX = "License :: "


@dataclass(frozen=True)
class Reviewed:
    """A license read from a package's files because its metadata does not say."""

    spdx: str
    files_say: str


# (canonical name, version) → what a person found in the package's license files.
REVIEWED: dict[tuple[str, str], Reviewed] = {
    ("python-dateutil", "2.9.0.post0"): Reviewed(
        "Apache-2.0 AND BSD-3-Clause",
        "Its metadata says only `Dual License`; its LICENSE file puts contributions after 2017-12-01 (and"
        " re-licensed code) under Apache-2.0 and the rest under the 3-clause BSD text, so both apply",
    ),
    ("jinja2", "3.1.6"): Reviewed(
        "BSD-3-Clause",
        "Its metadata gives only the generic `BSD License` classifier; its LICENSE.txt is the 3-clause BSD"
        " text (redistribution conditions 1-2 and the no-endorsement clause 3), copyright Pallets",
    ),
    ("kubernetes-validate", "1.37.0"): Reviewed(
        "Apache-2.0",
        "Its metadata says only `Apache`; its LICENSE file is the Apache License, Version 2.0 notice"
        " (copyright Will Thames). A test-only dependency: never in the image",
    ),
}


@dataclass(frozen=True)
class License:
    """The SPDX expression of one package and where it was read."""

    spdx: str | None
    source: str


@dataclass(frozen=True)
class Package:
    """One installed distribution of an install set."""

    name: str
    version: str
    license: License
    required_by: str


@dataclass
class InstallSet:
    """Packages an install brings in, by canonical name, with the first requirer of each."""

    packages: dict[str, Package] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


class DependencyError(RuntimeError):
    """The environment does not hold what the project requires."""


def project() -> dict[str, object]:
    """The `[project]` table of pyproject.toml."""
    with PYPROJECT.open("rb") as handle:
        table: dict[str, object] = tomllib.load(handle)["project"]
    return table


def dockerfile_install(text: str | None = None) -> tuple[list[str], list[str]]:
    """The project extras and the constraints files of the Dockerfile's `pip install .` line.

    The image's install set is derived from this line, so what the test checks is what
    `docker build` installs.
    """
    text = DOCKERFILE.read_text() if text is None else text
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        if not line.strip().upper().startswith("RUN") or "pip install" not in line:
            continue
        words = shlex.split(line.strip()[3:])
        targets = [w for w in words if w == "." or w.startswith(".[")]
        if not targets:
            continue
        constraints = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-c", "--constraint")]
        constraints += [w.split("=", 1)[1] for w in words if w.startswith("--constraint=")]
        match = re.fullmatch(r"\.(?:\[([^\]]*)\])?", targets[0])
        extras = [e.strip() for e in (match.group(1) or "").split(",") if e.strip()] if match else []
        return extras, constraints
    raise DependencyError("the Dockerfile has no `pip install .` line")


def requirements_of(extras: Iterable[str]) -> list[Requirement]:
    """The project's dependencies plus those of the given extras."""
    table = project()
    reqs = [Requirement(r) for r in table["dependencies"]]  # type: ignore[union-attr]
    optional: dict[str, list[str]] = table.get("optional-dependencies", {})  # type: ignore[assignment]
    for extra in extras:
        if extra not in optional:
            raise DependencyError(f"pyproject.toml has no extra {extra!r}")
        reqs.extend(Requirement(r) for r in optional[extra])
    return reqs


def resolve(reqs: Iterable[Requirement], root: str = "svc-registry") -> InstallSet:
    """Walk installed metadata from `reqs` to every transitive dependency (markers evaluated here)."""
    result = InstallSet()
    seen_extras: dict[str, set[str]] = {}
    queue: list[tuple[Requirement, str, str]] = [(r, root, "") for r in reqs]
    while queue:
        req, parent, parent_extra = queue.pop(0)
        if req.marker is not None and not req.marker.evaluate({"extra": parent_extra}):
            continue
        name = canonicalize_name(req.name)
        wanted = {canonicalize_name(e) for e in req.extras}
        known = seen_extras.get(name)
        if known is not None and wanted <= known:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            result.missing.append(f"{req.name} (required by {parent})")
            seen_extras[name] = wanted
            continue
        seen_extras[name] = (known or set()) | wanted
        if name not in result.packages:
            result.packages[name] = Package(name, dist.version, license_of(dist), parent)
        for spec in dist.requires or []:
            child = Requirement(spec)
            for extra in {""} | seen_extras[name]:
                queue.append((child, name, extra))
    return result


def image_set() -> InstallSet:
    """What the Docker image installs: the project with the Dockerfile's extras."""
    extras, _ = dockerfile_install()
    return resolve(requirements_of(extras))


def make_only_set(image: InstallSet) -> InstallSet:
    """What `make install` adds to the image's set (the embedded database, the dev tools)."""
    full = resolve(requirements_of([*dockerfile_install()[0], *MAKE_ONLY_EXTRAS]))
    extra = {n: p for n, p in full.packages.items() if n not in image.packages}
    return InstallSet(extra, full.missing)


def extra_set(extra: str, image: InstallSet) -> InstallSet:
    """The packages one make-only extra adds to the image's set."""
    full = resolve(requirements_of([extra]))
    return InstallSet({n: p for n, p in full.packages.items() if n not in image.packages}, full.missing)


def license_of(dist: md.Distribution) -> License:
    """The SPDX license of an installed distribution, from its metadata or the reviewed table."""
    meta = dist.metadata
    expression = (meta.get("License-Expression") or "").strip()
    if expression:
        return License(expression, "License-Expression")
    text = (meta.get("License") or "").strip()
    if text and "\n" not in text:
        if is_spdx(text):
            return License(text, "License")
        alias = LICENSE_ALIASES.get(text.lower())
        if alias:
            return License(alias, f"License: {text}")
    specific = {
        c
        for c in (meta.get_all("Classifier") or [])
        if c.startswith(CLASSIFIER_PREFIX) and c.count("::") >= 2
    }
    if len(specific) == 1:
        (classifier,) = specific
        if classifier in CLASSIFIERS:
            return License(CLASSIFIERS[classifier], "classifier")
    reviewed = REVIEWED.get((canonicalize_name(meta["Name"]), dist.version))
    if reviewed is not None:
        return License(reviewed.spdx, "reviewed")
    return License(None, "none")


TOKEN = re.compile(r"\(|\)|[A-Za-z0-9.+-]+")


def spdx_ids(expression: str) -> list[str]:
    """The license identifiers of an SPDX expression (operators, exceptions and brackets dropped)."""
    tokens = TOKEN.findall(expression)
    ids = []
    skip_next = False
    for token in tokens:
        if skip_next:
            skip_next = False
            continue
        if token.upper() in {"AND", "OR"} or token in "()":
            continue
        if token.upper() == "WITH":
            skip_next = True
            continue
        ids.append(token.rstrip("+"))
    return ids


def is_spdx(text: str) -> bool:
    """True when every identifier of `text` is one we recognise and nothing else is in it."""
    if "".join(TOKEN.findall(text)).replace(" ", "") != text.replace(" ", ""):
        return False
    ids = spdx_ids(text)
    return bool(ids) and all(i in ALLOWED or i in JUSTIFIED or i in KNOWN_IDS for i in ids)


def acceptable(expression: str) -> bool:
    """Whether an SPDX expression can be met with allowed licenses (OR: one branch, AND: all)."""
    tokens = [t for t in TOKEN.findall(expression)]
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        token = tokens[position]
        position += 1
        return token

    def disjunction() -> bool:
        ok = conjunction()
        while (peek() or "").upper() == "OR":
            take()
            ok = conjunction() or ok
        return ok

    def conjunction() -> bool:
        ok = atom()
        while (peek() or "").upper() == "AND":
            take()
            ok = atom() and ok
        return ok

    def atom() -> bool:
        if peek() is None:
            raise ValueError(f"incomplete SPDX expression: {expression!r}")
        token = take()
        if token == "(":
            ok = disjunction()
            if peek() != ")":
                raise ValueError(f"unbalanced SPDX expression: {expression!r}")
            take()
            return ok
        if (peek() or "").upper() == "WITH":
            take()
            take()  # an exception only adds permissions to the license before it
        name = token.rstrip("+")
        return name in ALLOWED or name in JUSTIFIED

    ok = disjunction()
    if peek() is not None:
        raise ValueError(f"unexpected {peek()!r} in SPDX expression {expression!r}")
    return ok


def problems(image: InstallSet) -> list[str]:
    """Everything that keeps the image's install set from being shippable, one line each."""
    lines = [f"not installed here: {m}; run `make install`" for m in image.missing]
    for pkg in sorted(image.packages.values(), key=lambda p: p.name):
        if pkg.license.spdx is None:
            lines.append(
                f"{pkg.name} {pkg.version} has no usable license metadata: read its license files and"
                " record them in REVIEWED in scripts/licenses.py"
            )
        elif not acceptable(pkg.license.spdx):
            lines.append(
                f"{pkg.name} {pkg.version} is {pkg.license.spdx}, outside the allow-list"
                f" (required by {pkg.required_by})"
            )
    return lines


def constraints_text(image: InstallSet, make_only: InstallSet) -> str:
    """The generated constraints.txt."""
    lines = [
        "# Generated by `python scripts/licenses.py` from the environment the test suite ran in;",
        "# do not edit by hand. Used by the Dockerfile and `make install` (pip install -c constraints.txt).",
        f"# Pins for the image's base {image_base()} (Linux, the same Python minor version as the suite).",
        "#",
        "# The Docker image's install set (the project's runtime dependencies, direct and transitive):",
        *pins(image),
        "# make only: the `embedded` and `dev` extras (never installed in the image):",
        *pins(make_only),
    ]
    return "\n".join(lines) + "\n"


def pins(packages: InstallSet) -> Iterator[str]:
    """`name==version` lines, sorted by name."""
    for pkg in sorted(packages.packages.values(), key=lambda p: p.name):
        yield f"{pkg.name}=={pkg.version}"


def read_constraints(text: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """The image's pins and the make-only pins of constraints.txt."""
    text = CONSTRAINTS.read_text() if text is None else text
    image: dict[str, str] = {}
    make_only: dict[str, str] = {}
    current = image
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("# make only"):
            current = make_only
            continue
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise DependencyError(f"constraints.txt: {line!r} is not pinned with ==")
        current[canonicalize_name(name)] = version.strip()
    return image, make_only


def image_base(text: str | None = None) -> str:
    """The Dockerfile's base image (`python:X.Y.Z-...`), whose Python the pins are for."""
    text = DOCKERFILE.read_text() if text is None else text
    match = re.search(r"^FROM\s+(\S+)", text, re.MULTILINE)
    if not match:
        raise DependencyError("the Dockerfile has no FROM line")
    return match.group(1)


def image_python(text: str | None = None) -> str:
    """The exact Python version of the Dockerfile's base image."""
    match = re.fullmatch(r"python:(\d+\.\d+\.\d+)-[\w.-]+", image_base(text))
    if not match:
        raise DependencyError(f"the base image {image_base(text)} is not pinned to a Python patch release")
    return match.group(1)


def table(packages: InstallSet) -> list[str]:
    """A markdown table of packages with version, license and where the license was read."""
    rows = ["| package | version | license (SPDX) | read from |", "|---|---|---|---|"]
    for pkg in sorted(packages.packages.values(), key=lambda p: p.name):
        spdx = pkg.license.spdx or "**unknown**"
        rows.append(f"| {pkg.name} | {pkg.version} | {spdx} | {pkg.license.source} |")
    return rows


def licenses_text(image: InstallSet, extras: dict[str, InstallSet]) -> str:
    """The generated docs/licenses.md."""
    reviewed = [
        (pkg, REVIEWED[(pkg.name, pkg.version)])
        for group in (image, *extras.values())
        for pkg in sorted(group.packages.values(), key=lambda p: p.name)
        if pkg.license.source == "reviewed"
    ]
    unknown = [
        pkg
        for group in (image, *extras.values())
        for pkg in sorted(group.packages.values(), key=lambda p: p.name)
        if pkg.license.spdx is None
    ]
    lines = [
        "# Licenses",
        "",
        "svc is licensed under the Apache License 2.0 (`LICENSE`). This page is generated by",
        "`python scripts/licenses.py` from the installed packages; do not edit it by hand.",
        "`tests/test_licenses.py` fails when it is stale, when `constraints.txt` no longer pins",
        "exactly what the Docker image installs, or when a package of the image carries a",
        "license outside the allow-list.",
        "",
        "The embedded database (SecantusDB) is GPL-2.0-only, so it stays the optional `embedded`",
        "extra that `make serve` and `make test` install for local runs, and the Docker image and",
        "the compose deployment never contain it: they use a real MongoDB, and the image ships only",
        "the permissive packages below.",
        "",
        "## Allow-list",
        "",
        "A package of the image must be available under "
        + ", ".join(sorted(ALLOWED))
        + " (an `OR` needs one allowed branch, an `AND` needs all). Also accepted:",
        "",
        *[f"- {spdx}: {why}" for spdx, why in sorted(JUSTIFIED.items())],
        "",
        "Licenses are read from `License-Expression`, else an SPDX `License` field (or a well-known",
        "spelling of one), else a single specific trove classifier; a package whose metadata says",
        "none of these is read by hand and recorded below.",
        "",
        "## Runtime dependencies: the Docker image and `make`",
        "",
        f"Installed by `pip install -c constraints.txt .` on `{image_base()}`;"
        " `make install` installs the same pins.",
        "",
        *table(image),
        "",
        "## Read from the files (no usable license metadata)",
        "",
    ]
    if reviewed:
        lines += [
            f"- {pkg.name} {pkg.version}: {review.spdx}. {review.files_say}." for pkg, review in reviewed
        ]
    else:
        lines.append("None.")
    if unknown:
        lines += ["", "Not reviewed yet (the test fails until they are):", ""]
        lines += [f"- {pkg.name} {pkg.version}" for pkg in unknown]
    for extra, group in extras.items():
        lines += [
            "",
            f"## The `{extra}` extra (`make` only, never in the image)",
            "",
            *EXTRA_NOTES.get(extra, []),
            *table(group),
        ]
    return "\n".join(lines) + "\n"


EXTRA_NOTES: dict[str, list[str]] = {
    "embedded": [
        "The local MongoDB-wire server for `make serve` and `make test`; GPL-2.0-only, which is why",
        "it is optional and kept out of the image. Packages already listed above are not repeated.",
        "",
    ],
    "dev": ["Test and lint tools; not distributed. Packages already listed above are not repeated.", ""],
}


def generate() -> tuple[str, str, list[str]]:
    """Constraints text, licenses doc text and the problems found, from the installed environment."""
    image = image_set()
    make_only = make_only_set(image)
    extras = {extra: extra_set(extra, image) for extra in MAKE_ONLY_EXTRAS}
    missing = [f"not installed here: {m}; run `make install`" for m in make_only.missing]
    # The make-only packages are not shipped, so any license will do, but it must be known.
    unknown = [line for line in problems(make_only) if "no usable license metadata" in line]
    found = problems(image) + missing + unknown
    return constraints_text(image, make_only), licenses_text(image, extras), found


def resolve_from_index() -> dict[str, str]:
    """What pip would install for the Dockerfile's line, resolved from the package index (network).

    The closest check to `docker build` without Docker: pip's own resolver, ignoring what is
    installed here. Markers are evaluated for this machine, so run it on Linux.
    """
    extras, constraints = dockerfile_install()
    target = "." + (f"[{','.join(extras)}]" if extras else "")
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    command += ["--report", "-", *[arg for c in constraints for arg in ("-c", c)], target]
    # Our own interpreter running pip on arguments taken from our own Dockerfile.
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)  # noqa: S603
    report = json.loads(done.stdout)
    project_name = canonicalize_name(str(project()["name"]))
    return {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in report["install"]
        if canonicalize_name(item["metadata"]["name"]) != project_name
    }


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, verify) constraints.txt and docs/licenses.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale or not allowed")
    parser.add_argument(
        "--resolve",
        action="store_true",
        help="also ask pip (from the index) what the Dockerfile's line installs; exit 1 if not the pins",
    )
    args = parser.parse_args(argv)
    if args.resolve:
        pinned, _ = read_constraints()
        resolved = resolve_from_index()
        differ = sorted(set(resolved.items()) ^ set(pinned.items()))
        for name, version in differ:
            side = "pip resolves" if resolved.get(name) == version else "constraints.txt pins"
            print(f"{side} {name}=={version}", file=sys.stderr)
        print(f"pip resolves {len(resolved)} packages for the image; constraints.txt pins {len(pinned)}")
        if differ:
            return 1
    constraints, doc, found = generate()
    stale = [
        str(path.relative_to(ROOT))
        for path, text in ((CONSTRAINTS, constraints), (LICENSES_DOC, doc))
        if not path.exists() or path.read_text() != text
    ]
    for line in found:
        print(line, file=sys.stderr)
    if args.check:
        for name in stale:
            print(f"{name} is stale: run python scripts/licenses.py", file=sys.stderr)
        return 1 if stale or found else 0
    CONSTRAINTS.write_text(constraints)
    LICENSES_DOC.write_text(doc)
    print(f"wrote {CONSTRAINTS.relative_to(ROOT)} and {LICENSES_DOC.relative_to(ROOT)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
