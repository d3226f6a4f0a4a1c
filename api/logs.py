"""Structured JSON logs, one object per line, carrying the request id."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime

from svc.core import DRIVER_LOGGER

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

# Path parameters that are credentials: a path carrying one is logged with `{name}` in its place.
CREDENTIAL_PARAMS = ("token",)
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::[^}]*)?\}")


class PathRedactor:
    """Rewrites request paths so that no credential carried in a path reaches a log line.

    Built from the route templates: for each template with a credential parameter,
    any path containing its prefix (matched or not, so a mistyped `/api/webhook/TOKEN/x`
    or `//api/webhook/TOKEN` that 404s is covered too) has that prefix logged as the
    template's text, credential segment included as `{name}`.
    """

    def __init__(self, templates: Iterable[str]) -> None:
        self._patterns: list[tuple[re.Pattern[str], str]] = []
        for template in templates:
            found = [m for m in _PARAM.finditer(template) if m.group(1) in CREDENTIAL_PARAMS]
            if not found:
                continue
            last = found[-1]
            head = template[: last.end()]
            regex = ""
            position = 0
            for match in _PARAM.finditer(head):
                regex += re.escape(head[position : match.start()]) + "[^/]*"
                position = match.end()
            self._patterns.append((re.compile(regex), head))

    def __call__(self, path: str) -> str:
        """The path with every credential segment replaced by its parameter name."""
        for pattern, redacted in self._patterns:
            # Backslashes doubled: the text as is (a template's `{name:regex}` may hold some).
            path = pattern.sub(redacted.replace("\\", r"\\"), path)
        return path


# Attributes of a LogRecord that are not extra fields.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Formats a record as JSON: time, level, logger, message, requestId and any extras."""

    def format(self, record: logging.LogRecord) -> str:
        """One line of JSON."""
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = request_id_var.get()
        if request_id:
            entry["requestId"] = request_id
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str = "INFO") -> None:
    """Send every logger's records to stderr as JSON."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").disabled = True
    # The driver's command log at DEBUG carries whole documents (hashes, ciphertexts): never emit it.
    logging.getLogger(DRIVER_LOGGER).setLevel(max(logging.INFO, root.level))
