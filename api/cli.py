"""The `svc` command: `svc serve` starts the API, `svc users create` adds an account,
`svc orgs set-plan` sets an org's plan by hand, `svc runs rebuild-stats` recomputes the
hourly run counters from the run records, `svc doctor` checks every dependency.

Beyond the settings, the store (`svc.core`) and the embedded database's process control
(`svc.subprocesses`, the standard library only), each command imports what it needs when it runs:
`svc --version` and `--help` answer in under a second, an operator command against the database
never imports Ray, and only `serve` and `doctor` load the application and Ray (about 2 s of
imports).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from typing import Any, TypeVar

from api import cli_keys, cli_templates
from api.logs import configure_logging
from config.settings import Settings, settings_or_exit
from svc.core import ServiceError, Store, Vault
from svc.subprocesses import EmbeddedMongo, NoDatabaseError, require_database

log = logging.getLogger("svc")
T = TypeVar("T")


def build_parser() -> argparse.ArgumentParser:
    """Every command and its options (shown by `svc --help`)."""
    parser = argparse.ArgumentParser(prog="svc", description="Agent team registry and deployment service.")
    parser.add_argument("--version", action="version", version=f"svc {version()}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="DEBUG, INFO, WARNING or ERROR, any case (default INFO)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="start the HTTP API")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080; 0: any)")

    users = commands.add_parser("users", help="manage user accounts")
    users_commands = users.add_subparsers(dest="users_command", required=True, metavar="ACTION")
    create = users_commands.add_parser("create", help="create an account")
    create.add_argument("--email", required=True)
    create.add_argument(
        "--password",
        default=None,
        help="at least 8 characters; '-' reads it from stdin; omitted: prompted for on the terminal",
    )
    create.add_argument("--name", default=None)
    for action, text in (
        ("disable", "refuse the user's keys and end their sessions now"),
        ("enable", "let a disabled user's keys work again"),
        ("delete", "end the account; cancel personal installs, archive personal templates"),
    ):
        users_commands.add_parser(action, help=text).add_argument("user", metavar="EMAIL|ID")

    orgs = commands.add_parser("orgs", help="manage organisations (operators)")
    orgs_commands = orgs.add_subparsers(dest="orgs_command", required=True, metavar="ACTION")
    set_plan = orgs_commands.add_parser("set-plan", help="set an org's plan by hand (audited)")
    set_plan.add_argument("slug", metavar="SLUG")
    set_plan.add_argument("plan", choices=["pro", "free"])

    runs = commands.add_parser("runs", help="run records (operators)")
    runs_commands = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    rebuild = runs_commands.add_parser("rebuild-stats", help="recompute the hourly run counters")
    rebuild.add_argument("--template", default=None, help="only this template's runs (default: all)")

    commands.add_parser(
        "doctor", help="check the database, Ray, LLM providers, SMTP and the payment provider; print a table"
    )
    cli_templates.add_parser(commands)
    cli_keys.add_parser(commands)
    return parser


def version() -> str:
    """The installed package's version."""
    try:
        return metadata.version("svc-registry")
    except metadata.PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `svc` console script."""
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    if args.command == "templates":
        return cli_templates.run(args)  # an HTTP client of a running service: no settings needed
    settings = settings_or_exit()
    if args.command == "serve":
        return serve_command(args, settings)
    if args.command == "doctor":
        from api.doctor import doctor

        return asyncio.run(doctor(settings))
    if args.command == "users" and args.users_command == "create" and args.password is None:
        try:
            args.password = prompt_password()
        except PasswordPromptError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    try:
        result = asyncio.run(with_store(settings, lambda store: command(args, settings, store)))
    except ServiceError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except NoDatabaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return cli_keys.outcome(result) if args.command == "keys" else 0


def serve_command(args: argparse.Namespace, settings: Settings) -> int:
    """`svc serve`: bind first (a port in use fails before the database and Ray start), then run."""
    from api import metrics
    from api.app import create_app
    from api.lifecycle import ListenError, link_origin, listen_socket, serve

    try:
        sock = listen_socket(args.host, args.port)
    except ListenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    refused = metrics.open_to_network(settings, sock.getsockname()[0])
    if refused is not None:
        sock.close()
        print(f"error: {refused}", file=sys.stderr)
        return 2
    if settings.public_url is None:  # links in mails lead back to this very service
        settings = settings.model_copy(update={"local_url": link_origin(sock)})
    try:
        asyncio.run(serve(create_app(settings), sock, settings.shutdown_grace_seconds))
    except Exception as exc:  # start-up failed; everything started so far has been stopped
        log.debug("start-up failed", exc_info=True)
        print(f"error: start-up failed: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 1
    return 0


class PasswordPromptError(Exception):
    """The password could not be prompted for."""


def prompt_password() -> str:
    """Ask for the password twice on the terminal (never echoed)."""
    if not sys.stdin.isatty():
        raise PasswordPromptError("--password is required when stdin is not a terminal ('-' reads stdin)")
    first = getpass.getpass("Password: ")
    if getpass.getpass("Repeat password: ") != first:
        raise PasswordPromptError("the passwords do not match")
    return first


async def command(args: argparse.Namespace, settings: Settings, store: Store) -> Any:
    """One operator command against the store."""
    from svc.identity import Accounts, public_user
    from svc.runs import rebuild_run_stats
    from svc.wiring import build_services

    if args.command == "orgs":
        vault = Vault.from_settings(settings.secret_keys, settings.data_dir)
        services = build_services(settings, store, vault, runtime=None)
        return await services.org_plans.set_plan(args.slug, args.plan)
    if args.command == "keys":
        return await cli_keys.rotate(args, settings, store)
    if args.command == "runs":
        match = {"templateId": args.template} if args.template else {}
        return {"buckets": await rebuild_run_stats(store, match)}
    if args.users_command in ("disable", "enable", "delete"):
        vault = Vault.from_settings(settings.secret_keys, settings.data_dir)
        services = build_services(settings, store, vault, runtime=None)
        if args.users_command == "delete":
            return await services.delete_user(args.user)
        return await getattr(services.user_admin, args.users_command)(args.user)
    password = sys.stdin.readline().rstrip("\n") if args.password == "-" else args.password
    accounts = Accounts(store, settings.password_cost)
    return public_user(await accounts.create_user(args.email, password, args.name))


async def with_store(settings: Settings, work: Callable[[Store], Awaitable[T]]) -> T:
    """Run `work` on the configured database (joining a running embedded server if any)."""
    embedded = (
        None if settings.mongodb_uri else EmbeddedMongo(settings.data_dir, sync=settings.embedded_db_sync)
    )
    if embedded is not None:
        require_database(settings.data_dir)  # never a new, empty database where no service reads
    uri = settings.mongodb_uri or await embedded.start()  # type: ignore[union-attr]
    store = Store.connect(uri)
    try:
        await store.ensure_indexes()
        return await work(store)
    finally:
        await store.close()
        if embedded is not None:
            await embedded.stop()


if __name__ == "__main__":
    raise SystemExit(main())
