"""The project is Apache-2.0 and everything the Docker image installs may be shipped with it.

The image cannot be built here, so its install set is derived the way `docker build` gets it:
the Dockerfile's `pip install` line (extras and constraints file) over this environment's
installed metadata, which `make install` pins with the same constraints file.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import platform
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from scripts import licenses
from scripts.licenses import InstallSet, License, Package

ROOT = Path(__file__).resolve().parents[1]
# sha256 of the canonical https://www.apache.org/licenses/LICENSE-2.0.txt
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


@pytest.fixture(scope="module")
def image() -> InstallSet:
    return licenses.image_set()


def test_the_project_is_apache_2():
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_SHA256
    with (ROOT / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    assert project["license"] == "Apache-2.0"
    assert "LICENSE" in project["license-files"]
    # The build backend understood PEP 639: the installed metadata carries the expression and the file.
    dist = md.distribution("svc-registry")
    assert dist.metadata["License-Expression"] == "Apache-2.0"
    assert "LICENSE" in (dist.metadata.get_all("License-File") or [])
    assert "Apache-2.0" in (ROOT / "README.md").read_text()


def test_every_package_of_the_image_is_installed_and_allowed(image: InstallSet):
    assert licenses.problems(image) == []
    assert image.packages, "the image installs nothing?"


def test_the_image_never_installs_the_embedded_database(image: InstallSet):
    extras, constraints = licenses.dockerfile_install()
    assert "embedded" not in extras
    assert constraints == ["constraints.txt"]
    assert "secantusdb" not in image.packages
    pinned_image, _ = licenses.read_constraints()
    assert "secantusdb" not in pinned_image
    # The extra exists and brings it, so the check above is about something real.
    assert "secantusdb" in licenses.resolve(licenses.requirements_of(["embedded"])).packages


# The image is Linux: its install set (markers evaluated here) can only be derived on Linux.
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="the image's install set is derived on Linux")


@linux_only
def test_constraints_pin_exactly_what_the_image_installs(image: InstallSet):
    pinned_image, pinned_make = licenses.read_constraints()
    installed = {name: pkg.version for name, pkg in image.packages.items()}
    assert pinned_image == installed, "constraints.txt is stale: run .venv/bin/python scripts/licenses.py"
    make_only = licenses.make_only_set(image)
    assert make_only.missing == []
    assert pinned_make == {name: pkg.version for name, pkg in make_only.packages.items()}


@linux_only
def test_the_generated_files_are_current():
    constraints, doc, found = licenses.generate()
    assert found == []
    stale = "stale: run .venv/bin/python scripts/licenses.py"
    assert (ROOT / "constraints.txt").read_text() == constraints, f"constraints.txt is {stale}"
    assert (ROOT / "docs" / "licenses.md").read_text() == doc, f"docs/licenses.md is {stale}"


def test_the_dockerfile_and_make_install_with_the_constraints():
    dockerfile = (ROOT / "Dockerfile").read_text()
    # The base image is pinned to a patch release of the Python the suite runs on.
    pinned = licenses.image_python()
    assert pinned.split(".")[:2] == platform.python_version().split(".")[:2], (
        f"the image runs Python {pinned}, the suite {platform.python_version()}"
    )
    assert re.search(r"^COPY\s.*\bconstraints\.txt\b", dockerfile, re.MULTILINE)
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line and "-e " in line]
    assert installs and all("-c constraints.txt" in line for line in installs)
    # Ray as tested, with the client extra the API joins the cluster with.
    pinned_image, _ = licenses.read_constraints()
    assert pinned_image["ray"] == md.version("ray")
    assert "grpcio" in pinned_image


def test_tzdata_is_a_dependency():
    names = {Requirement(r).name for r in licenses.project()["dependencies"]}  # type: ignore[union-attr]
    assert "tzdata" in names


# ---- bad input: the checks catch what they exist for ----


def write_dist(root: Path, name: str, version: str, *headers: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal installed distribution (dist-info) with the given metadata headers."""
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}", *headers]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    return info


def test_a_package_without_license_metadata_is_named(tmp_path: Path):
    dist = md.PathDistribution(write_dist(tmp_path, "mystery", "1.0", "Summary: no license said"))
    assert licenses.license_of(dist) == License(None, "none")
    found = licenses.problems(InstallSet({"mystery": Package("mystery", "1.0", License(None, "none"), "x")}))
    assert len(found) == 1 and found[0].startswith("mystery 1.0 has no usable license metadata")
    # Free text and the ambiguous BSD classifier are not guessed at either.
    vague = write_dist(
        tmp_path,
        "vague",
        "2.0",
        "License: Dual License",
        "Classifier: License :: OSI Approved :: BSD License",
    )
    assert licenses.license_of(md.PathDistribution(vague)).spdx is None


def test_a_copyleft_package_is_refused_and_named(tmp_path: Path):
    gpl = md.PathDistribution(write_dist(tmp_path, "copyleft", "3.1", "License-Expression: GPL-3.0-only"))
    lic = licenses.license_of(gpl)
    found = licenses.problems(InstallSet({"copyleft": Package("copyleft", "3.1", lic, "svc-registry")}))
    assert found == ["copyleft 3.1 is GPL-3.0-only, outside the allow-list (required by svc-registry)"]
    # A copyleft License field spelled as SPDX is recognised as such, not as "unknown".
    field = md.PathDistribution(write_dist(tmp_path, "field", "1.0", "License: LGPL-2.1-or-later"))
    assert licenses.license_of(field) == License("LGPL-2.1-or-later", "License")


def test_the_embedded_extra_in_the_image_would_fail():
    extras, _ = licenses.dockerfile_install(
        "FROM x\nRUN pip install --no-cache-dir -c constraints.txt '.[embedded]'\n"
    )
    assert extras == ["embedded"]
    found = licenses.problems(licenses.resolve(licenses.requirements_of(extras)))
    assert any(line.startswith("secantusdb ") and "outside the allow-list" in line for line in found)


def test_metadata_is_read_in_order(tmp_path: Path):
    cases = {
        "a": (("License-Expression: MIT", "License: GPL-3.0-only"), License("MIT", "License-Expression")),
        "b": (("License: Apache 2.0",), License("Apache-2.0", "License: Apache 2.0")),
        "c": (("Classifier: License :: OSI Approved :: MIT License",), License("MIT", "classifier")),
    }
    for name, (headers, expected) in cases.items():
        assert licenses.license_of(md.PathDistribution(write_dist(tmp_path, name, "1", *headers))) == expected


@pytest.mark.parametrize(
    ("expression", "ok"),
    [
        ("Apache-2.0 OR GPL-3.0-only", True),
        ("MIT AND GPL-2.0-only", False),
        ("(MIT OR GPL-3.0-only) AND BSD-3-Clause", True),
        ("GPL-2.0-only AND CC-BY-4.0", False),
        ("Apache-2.0 WITH LLVM-exception", True),
        ("MIT-0", True),
        ("BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0", False),
    ],
)
def test_spdx_expressions(expression: str, ok: bool):
    assert licenses.acceptable(expression) is ok


def test_missing_requirements_are_reported(tmp_path: Path):
    found = licenses.resolve([Requirement("surely-not-installed-anywhere>=1")])
    assert found.missing == ["surely-not-installed-anywhere (required by svc-registry)"]
    assert licenses.problems(found)[0].startswith("not installed here: surely-not-installed-anywhere")
