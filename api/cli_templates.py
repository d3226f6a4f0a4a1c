"""`svc templates export|import`: a template's export document from, and into, a running
service, with an API key: the same HTTP calls a script would make (docs/templates.md)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"
TIMEOUT_S = 30.0


def add_parser(commands: Any) -> None:
    """The `templates` command and its two actions."""
    templates = commands.add_parser("templates", help="export or import a template (with an API key)")
    actions = templates.add_subparsers(dest="templates_command", required=True, metavar="ACTION")
    export = actions.add_parser("export", help="print a template's export document (JSON)")
    export.add_argument("template_id", metavar="TEMPLATE_ID")
    export.add_argument("--history", action="store_true", help="include every published version")
    export.add_argument("--out", default="-", help="file to write ('-': standard output, the default)")
    imported = actions.add_parser("import", help="create a draft from an export document")
    imported.add_argument("file", metavar="FILE", help="the document ('-': standard input)")
    imported.add_argument("--pricing", action="store_true", help="take the document's pricing too")
    for action in (export, imported):
        action.add_argument(
            "--url", default=os.environ.get("SVC_URL", DEFAULT_URL), help="the service (SVC_URL)"
        )
        action.add_argument("--key", default=None, help="an API key (default: the SVC_API_KEY variable)")


def run(args: argparse.Namespace) -> int:
    """Carry out the action; one line on stderr and exit 1 when the service refuses."""
    key = args.key or os.environ.get("SVC_API_KEY")
    if not key:
        print("error: an API key is needed: --key or SVC_API_KEY", file=sys.stderr)
        return 1
    headers = {"Authorization": f"Bearer {key}"}
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per outcome, not per request
    base = args.url.rstrip("/")
    try:
        with httpx.Client(timeout=TIMEOUT_S, headers=headers) as client:
            if args.templates_command == "export":
                params = {"history": "true"} if args.history else {}
                response = client.get(f"{base}/api/templates/{args.template_id}/export", params=params)
            else:
                raw = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
                params = {"pricing": "true"} if args.pricing else {}
                response = client.post(
                    f"{base}/api/templates/import",
                    params=params,
                    content=raw.encode(),
                    headers={"Content-Type": "application/json"},
                )
    except (httpx.HTTPError, OSError) as exc:
        print(f"error: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 1
    if response.status_code >= 400:
        try:
            message = response.json().get("error", response.text)
        except ValueError:
            message = response.text
        print(f"error: {response.status_code} {message}", file=sys.stderr)
        return 1
    text = json.dumps(response.json(), indent=2) + "\n"
    if args.templates_command == "export" and args.out != "-":
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0
