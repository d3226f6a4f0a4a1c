"""The Ray side: the only package that imports `ray`."""

import sys

# httpx imports its command-line client (click, rich, pygments: about 5 MB per process) whenever
# click is installed, which it is for `svc`'s own CLI. An install actor never runs a CLI, and
# this package is the first thing a Ray worker imports to build an actor, so mark the module
# absent here: httpx then defines its stub `main` instead (docs/bench.md, "What an actor imports").
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None marks a module absent; typeshed allows only modules
