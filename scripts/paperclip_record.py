"""Record what the real Paperclip answers, for the fake the fast tests use (tests/fakes/orch_a.py).

    python scripts/paperclip_record.py      # writes tests/fakes/paperclip_recorded/*.json

Starts the pinned Paperclip (scripts/paperclip.py), then makes each call the orchA driver and the
managed runtime make, the way they make it, and stores the status and body of each answer, plus
one real heartbeat an `http` agent receives when an issue is assigned to it (caught by a small
receiver on 127.0.0.1, which writes the outcome back as the runtime does). Tokens and secrets are
replaced by `<redacted>`. Re-run it when PAPERCLIP_VERSION changes and commit the result.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.paperclip import PAPERCLIP_VERSION, Paperclip, free_port

OUT = Path(__file__).resolve().parent.parent / "tests" / "fakes" / "paperclip_recorded"
SECRET_KEYS = {"token", "bearerToken", "x-svc-webhook-secret", "authorization"}
UNKNOWN = "00000000-0000-4000-8000-000000000000"


def redact(value: Any) -> Any:
    """The value with every token and secret replaced."""
    if isinstance(value, dict):
        return {
            k: "<redacted>" if k.lower() in {s.lower() for s in SECRET_KEYS} else redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


class Receiver(BaseHTTPRequestHandler):
    """Catches heartbeats; writes the outcome back as the agent before answering 200."""

    heartbeats: list[dict[str, Any]] = []
    writebacks: list[dict[str, Any]] = []
    base = ""
    agent_key = ""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"null")
        Receiver.heartbeats.append({"headers": dict(self.headers), "body": body})
        issue = (body.get("context") or {}).get("issueId")
        if issue and Receiver.agent_key:
            status, answer = _request_with_run(
                "PATCH",
                f"{Receiver.base}/api/issues/{issue}",
                {"status": "done", "comment": "Recorded write-back."},
                Receiver.agent_key,
                body["runId"],
            )
            Receiver.writebacks.append({"status": status, "body": answer})
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"ok":true}')

    def log_message(self, *args: Any) -> None:
        pass


def _request_with_run(method: str, url: str, body: Any, key: str, run_id: str) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method=method,
        headers={
            "content-type": "application/json",
            "authorization": f"Bearer {key}",
            "x-paperclip-run-id": run_id,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def wait_for(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise TimeoutError("Paperclip did not do what was expected in time")


def main() -> int:
    port = free_port()
    receiver = ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    server = Paperclip(allow_origins=[f"http://127.0.0.1:{port}"])
    server.start()
    recorded: dict[str, dict[str, Any]] = {}

    def record(name: str, method: str, path: str, body: Any = None, key: str | None = None) -> Any:
        status, answer = server.request(method, path, body, key)
        recorded[name] = {"method": method, "path": path, "status": status, "body": redact(answer)}
        return answer

    try:
        key = server.board_key()
        Receiver.base = server.base_url
        record("wrong_key", "GET", "/api/companies", key="pcp_board_wrong")
        record("whoami", "GET", "/api/cli-auth/me", key=key)
        record("board_keys_listed", "GET", "/api/board-api-keys", key=key)
        company = record("company_created", "POST", "/api/companies", {"name": "Recorded Co"}, key)
        record("company_read", "GET", f"/api/companies/{company['id']}", key=key)
        record(
            "unknown_company",
            "POST",
            f"/api/companies/{UNKNOWN}/agents",
            {"name": "X", "adapterType": "http", "adapterConfig": {"url": f"http://127.0.0.1:{port}/"}},
            key,
        )
        agent = record(
            "agent_created",
            "POST",
            f"/api/companies/{company['id']}/agents",
            {
                "name": "Writer",
                "role": "security",
                "title": "Writer",
                "capabilities": "writes",
                "reportsTo": None,
                "adapterType": "http",
                "adapterConfig": {
                    "url": f"http://127.0.0.1:{port}/hook",
                    "headers": {"X-Svc-Webhook-Secret": "s"},
                    "payloadTemplate": {"installId": "inst", "agentKey": "writer"},
                    "timeoutMs": 120000,
                },
                "runtimeConfig": {"heartbeat": {"enabled": False, "wakeOnDemand": True}},
            },
            key,
        )
        status, made = server.request("POST", f"/api/agents/{agent['id']}/keys", {"name": "svc-runtime"}, key)
        recorded["agent_key_created"] = {
            "method": "POST",
            "path": f"/api/agents/{agent['id']}/keys",
            "status": status,
            "body": redact(made),
        }
        Receiver.agent_key = made["token"]
        record("plugins_listed", "GET", "/api/plugins", key=key)
        issue = record(
            "issue_created",
            "POST",
            f"/api/companies/{company['id']}/issues",
            {
                "title": "Write the launch note",
                "description": "Two sentences about Monday's launch.",
                "assigneeAgentId": agent["id"],
                "status": "todo",
            },
            key,
        )
        wait_for(lambda: Receiver.writebacks)
        beat = Receiver.heartbeats[0]
        recorded["heartbeat_issue_assigned"] = {
            "headers": redact(beat["headers"]),
            "body": redact(beat["body"]),
        }
        recorded["issue_written_back"] = {
            "method": "PATCH",
            "path": f"/api/issues/{issue['id']}",
            **Receiver.writebacks[0],
            "body": redact(Receiver.writebacks[0]["body"]),
        }
        wait_for(lambda: server.request("GET", f"/api/issues/{issue['id']}", key=key)[1]["status"] == "done")
        record("issue_read", "GET", f"/api/issues/{issue['id']}", key=key)
        record(
            "wakeup",
            "POST",
            f"/api/agents/{agent['id']}/wakeup",
            {"source": "on_demand", "reason": "manual"},
            key,
        )
        wait_for(lambda: len(Receiver.heartbeats) >= 2)
        recorded["heartbeat_on_demand"] = {
            "headers": redact(Receiver.heartbeats[1]["headers"]),
            "body": redact(Receiver.heartbeats[1]["body"]),
        }
        time.sleep(1)  # let the on-demand run finish before the agent is deleted
        record("agent_deleted", "DELETE", f"/api/agents/{agent['id']}", key=key)
        record("agent_not_found", "DELETE", f"/api/agents/{agent['id']}", key=key)
        record("company_deleted", "DELETE", f"/api/companies/{company['id']}", key=key)
    finally:
        server.stop()
        receiver.shutdown()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, value in recorded.items():
        (OUT / f"{name}.json").write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")
    (OUT / "VERSION").write_text(PAPERCLIP_VERSION + "\n")
    print(f"recorded {len(recorded)} answers of Paperclip {PAPERCLIP_VERSION} into {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
