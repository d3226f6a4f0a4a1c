"""`svc keys rotate`: re-encrypt every stored secret under the newest key (svc/key_rotation.py).

Progress goes to stderr, one line per batch, so an operator watching a long run sees it move;
the report is the command's JSON on stdout. The exit status is 0 only when the old keys can be
dropped: every value is under the newest key and none was left undecryptable or changing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from config.settings import Settings
from svc.core import REKEY_BATCH, Document, Store, Vault

NOT_YET = (
    "error: the old keys are still needed: {undecryptable} value(s) no configured key decrypts, "
    "{changing} document(s) kept changing during the run; keep every key and run svc keys rotate again"
)


def add_parser(commands: Any) -> None:
    """The `keys` command and its action."""
    keys = commands.add_parser("keys", help="the Fernet keys of SVC_SECRET_KEYS (operators)")
    actions = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    rotate = actions.add_parser(
        "rotate", help="re-encrypt every stored secret under the first key (resumable, audited)"
    )
    rotate.add_argument(
        "--batch",
        type=batch_size,
        default=REKEY_BATCH,
        help=f"documents read and written per step (default {REKEY_BATCH})",
    )


def batch_size(raw: str) -> int:
    """A batch size from 1 to 10,000 (argparse refuses anything else with one line)."""
    if not raw.isdigit() or not 1 <= int(raw) <= 10_000:
        raise argparse.ArgumentTypeError("a whole number from 1 to 10000")
    return int(raw)


async def rotate(args: argparse.Namespace, settings: Settings, store: Store) -> Document:
    """Run (or continue) the re-encryption, printing each batch on stderr; the report."""
    from svc.key_rotation import rotate_keys  # its capability packages: only this command needs them

    def progress(step: Document) -> None:
        saved = step["checkpoint"]["tallies"].get(step["collection"], {})
        print(
            f"{step['collection']}: {saved.get('documents', 0)} documents read, "
            f"{saved.get('reencrypted', 0)} values re-encrypted",
            file=sys.stderr,
        )

    vault = Vault.from_settings(settings.secret_keys, settings.data_dir)
    return await rotate_keys(store, vault, args.batch, progress)


def outcome(report: Document) -> int:
    """The exit status of a finished run, with one line on stderr when the old keys must stay."""
    if report["oldKeysCanBeDropped"]:
        print("every stored secret is under the newest key: the old keys can be dropped", file=sys.stderr)
        return 0
    print(NOT_YET.format(**report["totals"]), file=sys.stderr)
    return 1
