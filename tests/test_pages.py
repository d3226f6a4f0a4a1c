"""The operator dashboard over real HTTP: sessions, CSRF, headers, reach rules on every page,
live runs over server-sent events, actions, and the schedule preview across a DST change."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime
from typing import Any

from api.pages.schedule import fire_times
from tests.support.accounts import Caller, app_store, bearer, create_key, own_origin, signup
from tests.support.orgs import invitation_token, invite, world
from tests.support.runtime import member, provider_settings, start_llm, svc_install
from tests.support.templates import publish_template

CSRF = re.compile(r'<meta name="csrf-token" content="([0-9a-f]+)">')
SECRET_VALUE = "sk-very-secret-value-123"


async def page(client: Any, caller: Caller | None, path: str) -> Any:
    """GET a page as the caller (or as nobody), without following redirects."""
    headers = caller.cookie if caller else {}
    return await client.get(path, headers=headers, allow_redirects=False)


async def csrf_of(client: Any, caller: Caller) -> str:
    """The caller's CSRF token, read from a page as a browser would."""
    html = await (await page(client, caller, "/keys")).text()
    match = CSRF.search(html)
    assert match is not None, html[:500]
    return match.group(1)


async def submit(client: Any, caller: Caller, path: str, data: dict[str, Any], **headers: str) -> Any:
    """POST a form with the caller's session and CSRF token, from the page's own origin (as a browser)."""
    token = await csrf_of(client, caller)
    return await client.post(
        path,
        data={"_csrf": token, **data},
        headers={**caller.cookie, **own_origin(client), **headers},
        allow_redirects=False,
    )


async def test_headers_html_404_and_the_api_unchanged(client):
    anonymous = await page(client, None, "/")
    assert anonymous.status == 303 and anonymous.headers["Location"] == "/signin?next=/"
    signin = await page(client, None, "/signin")
    assert signin.status == 200 and signin.content_type == "text/html"
    csp = signin.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "'unsafe-inline'" not in csp and "frame-ancestors 'none'" in csp
    assert signin.headers["X-Frame-Options"] == "DENY"
    assert signin.headers["Cache-Control"] == "no-store"
    assert "<script>" not in await signin.text()  # no inline script anywhere
    missing = await page(client, None, "/no/such/page")
    assert missing.status == 404 and missing.content_type == "text/html"
    api_missing = await client.get("/api/no/such/route")
    assert api_missing.status == 404 and await api_missing.json() == {"error": "Not found"}
    assert "Content-Security-Policy" not in api_missing.headers


async def test_static_assets_are_versioned_and_cached(client):
    html = await (await page(client, None, "/signin")).text()
    paths = re.findall(r'(?:href|src)="(/static/[0-9a-f]{12}/[a-z.]+)"', html)
    assert {p.rsplit("/", 1)[1] for p in paths} == {"app.css", "app.js"}
    total = len(html.encode())
    for path in paths:
        asset = await client.get(path)
        assert asset.status == 200
        assert "immutable" in asset.headers["Cache-Control"]
        total += len(await asset.read())
    assert total < 300_000  # the first load of a page, everything included
    assert (await client.get("/static/000000000000/../../app.py")).status == 404


async def test_sign_up_sign_in_sign_out(client):
    response = await client.post(
        "/signup",
        data={"email": "ada@example.com", "password": "correct horse battery", "name": "Ada"},
        headers=own_origin(client),
        allow_redirects=False,
    )
    assert response.status == 303 and response.headers["Location"] == "/"
    session = response.cookies["svc_session"].value
    ada = Caller("", "ada@example.com", "correct horse battery", session)
    home = await page(client, ada, "/")
    assert home.status == 200 and "ada@example.com" in await home.text()
    taken = await client.post(
        "/signup",
        data={"email": "ada@example.com", "password": "another password"},
        headers=own_origin(client),
    )
    assert taken.status == 409
    client.session.cookie_jar.clear()
    wrong = await client.post(
        "/signin", data={"email": "ada@example.com", "password": "nope nope nope"}, headers=own_origin(client)
    )
    assert wrong.status == 401 and "Invalid email or password" in await wrong.text()
    client.session.cookie_jar.clear()
    # The next parameter is followed to local paths only.
    signed_in = await client.post(
        "/signin?next=//evil.example/x",
        data={"email": "ada@example.com", "password": "correct horse battery"},
        headers=own_origin(client),
        allow_redirects=False,
    )
    assert signed_in.status == 303 and signed_in.headers["Location"] == "/"
    client.session.cookie_jar.clear()
    out = await client.post(
        "/signout", data={}, headers={**ada.cookie, **own_origin(client)}, allow_redirects=False
    )
    assert out.status == 403  # no CSRF token
    out = await submit(client, ada, "/signout", {})
    assert out.status == 303
    assert (await page(client, ada, "/")).status == 303  # the session is gone server-side


async def test_the_sign_in_page_has_the_api_s_rate_limit(client):
    await signup(client, email="rl@example.com")  # one /api/auth request counted already
    statuses = []
    for _ in range(20):
        response = await client.post(
            "/signin",
            data={"email": "rl@example.com", "password": "wrong password!"},
            headers=own_origin(client),
        )
        statuses.append(response.status)
    assert statuses[:19] == [401] * 19 and statuses[19] == 429
    assert response.content_type == "text/html" and int(response.headers["Retry-After"]) > 0
    api = await client.post(
        "/api/auth/login", json={"email": "rl@example.com", "password": "wrong password!"}
    )
    assert api.status == 429  # one budget for the page and the API


async def test_csrf_needs_the_origin_and_the_token(client):
    ada = await signup(client)
    token = await csrf_of(client, ada)
    mine = {**ada.cookie, **own_origin(client)}
    no_token = await client.post("/keys", data={"label": "x"}, headers=mine)
    assert no_token.status == 403 and "CSRF" in await no_token.text()
    wrong_token = await client.post("/keys", data={"_csrf": "0" * 64, "label": "x"}, headers=mine)
    assert wrong_token.status == 403
    # A forged Origin, an opaque one (a sandboxed or data: page) or none at all: refused, token or not.
    for origin in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {}):
        refused = await client.post(
            "/keys", data={"_csrf": token, "label": "x"}, headers={**ada.cookie, **origin}
        )
        assert refused.status == 403, origin
    other = await signup(client)
    stolen = await client.post(
        "/keys", data={"_csrf": token, "label": "x"}, headers={**other.cookie, **own_origin(client)}
    )
    assert stolen.status == 403  # a token is bound to its session
    made = await client.post("/keys", data={"_csrf": token, "label": "ok"}, headers=mine)
    assert made.status == 200
    assert made.headers["Cache-Control"] == "no-store"
    html = await made.text()
    raw = re.search(r'<code id="new-key">([^<]+)</code>', html)
    assert raw is not None and raw.group(1).startswith("svc_")
    # The list afterwards never shows the value again.
    assert raw.group(1) not in await (await page(client, ada, "/keys")).text()


async def test_with_no_public_url_the_dashboard_works_on_the_address_it_is_opened_on(client):
    """SVC_PUBLIC_URL unset: the request's own origin is same-origin on any port, on 127.0.0.1
    and on localhost; a DNS name re-pointed at this machine is not (DNS rebinding)."""
    port = client.make_url("/").port
    form = {"email": "", "password": "correct horse battery", "name": "Ada"}
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        form["email"] = f"ada-{host.split(':')[0]}@example.com"
        headers = {"Host": host, "Origin": f"http://{host}"}
        made = await client.post("/signup", data=form, headers=headers, allow_redirects=False)
        assert made.status == 303, (host, await made.text())
        client.session.cookie_jar.clear()
        signed_in = await client.post(
            "/signin",
            data={k: form[k] for k in ("email", "password")},
            headers=headers,
            allow_redirects=False,
        )
        assert signed_in.status == 303 and "svc_session" in signed_in.cookies
        client.session.cookie_jar.clear()
    # Another port of the same host is another origin.
    elsewhere = {"Host": f"127.0.0.1:{port}", "Origin": f"http://127.0.0.1:{port + 1}"}
    form["email"] = "eve@example.com"
    assert (await client.post("/signup", data=form, headers=elsewhere)).status == 403
    for headers in ({}, {"Origin": "https://evil.example"}, {"Origin": "null"}):
        refused = await client.post("/signup", data=form, headers=headers)
        assert refused.status == 403 and refused.content_type == "text/html", headers
    rebound = {"Host": f"rebind.example:{port}", "Origin": f"http://rebind.example:{port}"}
    refused = await client.post("/signin", data=form, headers=rebound)
    assert refused.status == 403 and "SVC_PUBLIC_URL" in await refused.text()
    assert await app_store(client).users.count_documents({"email": "eve@example.com"}) == 0


async def test_with_a_public_url_only_that_origin_is_same_origin(make_client):
    client = await make_client(public_url="https://svc.example.com")
    form = {"email": "bo@example.com", "password": "correct horse battery", "name": "Bo"}
    own = await client.post("/signup", data=form, headers=own_origin(client))
    assert own.status == 403  # the address the request reached is not the public one
    public = await client.post(
        "/signup", data=form, headers={"Origin": "https://svc.example.com"}, allow_redirects=False
    )
    assert public.status == 303 and public.cookies["svc_session"]["secure"]


async def test_every_page_as_stranger_member_and_admin(make_client, aiohttp_server):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    w = await world(client, pro=True)
    # The owner's personal install with a secret, and an org secret.
    key = await create_key(client, w.owner)
    team = {"version": "v1", "agents": [member("lead")], "requiredSecrets": ["API_TOKEN"]}
    template = await publish_template(client, key, visibility="public", definition=team)
    created = await client.post(
        "/api/installs", json={"templateId": template["id"], "platform": "svc"}, headers=bearer(key)
    )
    assert created.status == 201, await created.text()
    install_id = (await created.json())["installId"]
    secrets = await client.patch(
        f"/api/installs/{install_id}/secrets", json={"API_TOKEN": SECRET_VALUE}, headers=bearer(key)
    )
    assert secrets.status == 200
    secret = await client.post(
        f"/api/orgs/{w.slug}/secrets",
        json={"key": "ORG_TOKEN", "value": SECRET_VALUE},
        headers=w.owner.cookie,
    )
    assert secret.status == 200
    llm.script(text="hello")
    await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=bearer(key))
    run = await app_store(client)["pipeline_runs"].find_one({"installId": install_id})
    install_pages = [
        f"/installs/{install_id}",
        f"/installs/{install_id}/runs/{run['_id']}",
        f"/installs/{install_id}/schedule",
        f"/installs/{install_id}/settings",
        f"/installs/{install_id}/security",
        f"/installs/{install_id}/usage",
        f"/installs/{install_id}/schedule/preview?cron=0+9+*+*+*&timezone=UTC",
    ]
    template_pages = [f"/templates/{template['id']}", f"/templates/{template['id']}/analytics"]
    org_pages = [
        f"/orgs/{w.slug}",
        f"/orgs/{w.slug}/approvals",
        f"/orgs/{w.slug}/secrets",
        f"/orgs/{w.slug}/audit",
        f"/orgs/{w.slug}/analytics",
        f"/orgs/{w.slug}/billing",
    ]
    own_pages = [
        "/",
        "/installs",
        "/browse",
        "/browse?q=team",
        "/templates",
        "/templates/new",
        "/orgs",
        "/keys",
    ]
    for path in [*install_pages, *template_pages[1:], *org_pages, *own_pages, template_pages[0]]:
        anonymous = await page(client, None, path)
        assert anonymous.status == 303 and anonymous.headers["Location"].startswith("/signin?next="), path
    for path in install_pages + org_pages:
        stranger = await page(client, w.outsider, path)
        assert stranger.status == 404, (path, stranger.status)
        if "preview" not in path:
            assert stranger.content_type == "text/html" and "not found" in (await stranger.text()).lower()
    # A plain member reaches the org's pages but not the owner's personal install.
    for path in org_pages:
        response = await page(client, w.member, path)
        assert response.status == 200, (path, response.status)
        assert SECRET_VALUE not in await response.text()
    audit_html = await (await page(client, w.member, f"/orgs/{w.slug}/audit")).text()
    assert "member.joined" not in audit_html  # members do not read the audit log (as in the API)
    for path in install_pages:
        assert (await page(client, w.member, path)).status == 404, path
    for caller in (w.member, w.outsider):
        assert (await page(client, caller, f"/installs/{install_id}/live")).status == 404
    # The owner (an admin of the org) sees everything, and no secret value anywhere.
    for path in [*install_pages, *template_pages, *org_pages, *own_pages]:
        response = await page(client, w.owner, path)
        assert response.status == 200, (path, response.status, (await response.text())[:300])
        assert SECRET_VALUE not in await response.text(), path
    owner_audit = await (await page(client, w.owner, f"/orgs/{w.slug}/audit")).text()
    assert "member.joined" in owner_audit
    # An org admin (not the owner) manages the org but reaches no one's personal install.
    for path in org_pages:
        response = await page(client, w.admin, path)
        assert response.status == 200, (path, response.status)
        assert SECRET_VALUE not in await response.text()
    assert "member.joined" in await (await page(client, w.admin, f"/orgs/{w.slug}/audit")).text()
    assert (await page(client, w.admin, install_pages[0])).status == 404
    # Governance (Pro): an admin makes new deployments need approval.
    governed = await submit(client, w.admin, f"/orgs/{w.slug}/governance", {"enabled": "true"})
    assert governed.status == 303
    org_now = await (await client.get(f"/api/orgs/{w.slug}", headers=w.member.cookie)).json()
    assert org_now["org"]["governanceEnabled"] is True
    assert (await submit(client, w.member, f"/orgs/{w.slug}/governance", {"enabled": "false"})).status == 403
    # Org keys: an admin creates one (shown once); a member sees the list, not the form.
    made = await submit(client, w.admin, f"/orgs/{w.slug}/keys", {"label": "ci"})
    assert made.status == 200 and made.headers["Cache-Control"] == "no-store"
    raw = re.search(r'<code id="new-org-key">([^<]+)</code>', await made.text())
    assert raw is not None
    member_view = await (await page(client, w.member, f"/orgs/{w.slug}")).text()
    assert ">ci<" in member_view and raw.group(1) not in member_view
    assert "Create organisation key" not in member_view
    refused = await submit(client, w.member, f"/orgs/{w.slug}/keys", {"label": "x"})
    assert refused.status == 403
    settings_html = await (await page(client, w.owner, f"/installs/{install_id}/settings")).text()
    assert "API_TOKEN" in settings_html and ">set<" in settings_html
    secrets_html = await (await page(client, w.member, f"/orgs/{w.slug}/secrets")).text()
    assert "ORG_TOKEN" in secrets_html
    # The stranger cannot act either: 404 through the same reach check.
    acted = await submit(client, w.outsider, f"/installs/{install_id}/run", {"task": "x"})
    assert acted.status == 404


async def test_runs_arrive_live_and_gates_are_decided(make_client, aiohttp_server, store):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    gates = [{"name": "review", "after": "a"}]
    caller, _, install_id = await svc_install(client, [member("a"), member("b")], gates=gates)
    stream = await client.get(f"/installs/{install_id}/live", headers=caller.cookie)
    assert stream.status == 200 and stream.headers["Content-Type"] == "text/event-stream"

    async def next_event() -> dict[str, Any]:
        while True:
            line = (await asyncio.wait_for(stream.content.readline(), 30)).decode()
            if line.startswith("data: "):
                return dict(json.loads(line[6:]))

    first = await next_event()
    assert "No runs yet" in first["runs"] and "No run is waiting" in first["gates"]
    llm.script(text="A out")
    started = await submit(
        client, caller, f"/installs/{install_id}/run", {"task": "go"}, Accept="application/json"
    )
    assert started.status == 200, await started.text()
    run_id = (await started.json())["runId"]
    while run_id not in (await next_event()).get("gates", ""):
        pass  # the paused run appears in the gate panel without a reload
    llm.script(text="B out")
    resumed = await submit(
        client, caller, f"/installs/{install_id}/continue", {"runId": run_id}, Accept="application/json"
    )
    assert resumed.status == 200, await resumed.text()
    while True:
        event = await next_event()
        if f'data-run="{run_id}" data-status="completed"' in event.get("runs", ""):
            break
    stream.close()
    nothing = await submit(client, caller, f"/installs/{install_id}/continue", {}, Accept="application/json")
    assert (
        nothing.status == 409 and (await nothing.json())["error"] == "No pending gate found for this install"
    )


async def test_drafts_approve_reject_with_note_and_bulk(make_client, aiohttp_server, store):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    agents = [member("writer", prompt="Write."), member("sender", role="sender")]
    gates = [{"name": "draft-approval", "after": "writer", "kind": "draft-approval"}]
    caller, key, install_id = await svc_install(client, agents, gates=gates)
    drafts = {
        "drafts": [{"recipientEmail": f"p{n}@example.com", "subject": f"S{n}", "body": "B"} for n in range(3)]
    }
    llm.script(text=json.dumps(drafts))
    await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    html = await (await page(client, caller, f"/installs/{install_id}")).text()
    ids = [int(i) for i in re.findall(r'data-draft="(\d+)"', html)]
    assert len(ids) == 3 and "<strong>review</strong>" not in html
    base = f"/installs/{install_id}/drafts"
    edited = await submit(client, caller, f"{base}/{ids[0]}/edit", {"subject": "<b>New</b>", "body": "Body"})
    assert edited.status == 303
    rejected = await submit(client, caller, f"{base}/{ids[0]}/reject", {"note": "too long"})
    assert rejected.status == 303
    bulk = await submit(
        client, caller, f"{base}/bulk", {"action": "approve", "scope": "selected", "ids": str(ids[1])}
    )
    assert bulk.status == 303
    empty = await submit(client, caller, f"{base}/bulk", {"action": "approve", "scope": "selected"})
    assert empty.status == 400 and "Tick at least one draft" in await empty.text()
    html = await (await page(client, caller, f"/installs/{install_id}")).text()
    assert "&lt;b&gt;New&lt;/b&gt;" in html and "<b>New</b>" not in html  # escaped
    assert "note: too long" in html
    statuses = dict(re.findall(r'data-draft="(\d+)" data-status="([a-z_]+)"', html))
    assert statuses == {str(ids[0]): "rejected", str(ids[1]): "approved", str(ids[2]): "pending_approval"}
    recalled = await submit(client, caller, f"{base}/{ids[1]}/recall", {})
    assert recalled.status == 303
    again = await submit(client, caller, f"{base}/{ids[0]}/approve", {})
    assert again.status == 409 and "Cannot approve a draft that is rejected" in await again.text()


def test_fire_times_follow_daylight_saving():
    # New York springs forward on 14 March 2027: 02:30 does not exist that night, so the
    # schedule fires at the first moment after it (03:00 EDT), then at 02:30 EDT again.
    times = fire_times("30 2 * * *", "America/New_York", now=datetime(2027, 3, 12, 12, tzinfo=UTC))
    assert [(t["local"], t["offset"]) for t in times[:3]] == [
        ("Sat 2027-03-13 02:30", "-05:00"),
        ("Sun 2027-03-14 03:00", "-04:00"),
        ("Mon 2027-03-15 02:30", "-04:00"),
    ]
    assert [t["utc"] for t in times[:3]] == [
        "2027-03-13 07:30 UTC",
        "2027-03-14 07:00 UTC",
        "2027-03-15 06:30 UTC",
    ]
    weekly = fire_times("0 9 * * 1", "Europe/Berlin", now=datetime(2027, 3, 20, tzinfo=UTC))
    assert [t["utc"][11:16] for t in weekly][:2] == ["08:00", "07:00"]  # CET, then CEST from 28 March


async def test_schedule_editor_saves_and_previews(make_client, aiohttp_server):
    _, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    caller, _, install_id = await svc_install(client, [member("lead")])
    base = f"/installs/{install_id}/schedule"
    # A new schedule's form is filled in and its fire times are shown on load.
    fresh = await (await page(client, caller, base)).text()
    assert 'value="0 9 * * 1-5"' in fresh and fresh.count("<time>") == 5
    # A refused value answers the form as typed, the message at its field, and saves nothing.
    typed = {
        "cronExpression": "15 7 * * *",
        "timezone": "Europe/Berln",
        "label": "morning",
        "jitterSeconds": "12",
    }
    refused = await submit(client, caller, base, {**typed, "enabled": "on", "onBacklog": "queue"})
    assert refused.status == 400 and refused.content_type == "text/html"
    html = await refused.text()
    assert 'value="Europe/Berln"' in html and 'value="15 7 * * *"' in html and 'value="morning"' in html
    assert 'value="12"' in html and 'value="queue" checked' in html
    assert re.search(r'id="timezone"[^>]*aria-invalid="true"', html)
    assert "unknown IANA time zone" in html and "did you mean Europe/Berlin" in html
    assert "<time>" not in html  # no fire times for a zone that does not exist
    api = await (await client.get(f"/api/installs/{install_id}/schedule", headers=caller.cookie)).json()
    assert api["schedule"] is None
    bad = await client.get(f"{base}/preview?cron=61+*+*+*+*&timezone=UTC", headers=caller.cookie)
    assert bad.status == 200 and "cronExpression" in (await bad.json())["error"]
    zone = await client.get(f"{base}/preview?cron=0+9+*+*+*&timezone=Mars/Base", headers=caller.cookie)
    assert zone.status == 200 and "timezone" in (await zone.json())["error"]
    good = await client.get(f"{base}/preview?cron=0+9+*+*+*&timezone=Europe/Paris", headers=caller.cookie)
    assert len((await good.json())["fireTimes"]) == 5
    saved = await submit(
        client,
        caller,
        base,
        {
            "cronExpression": "0 9 * * 1-5",
            "timezone": "Europe/Paris",
            "onBacklog": "queue",
            "enabled": "on",
            "jitterSeconds": "30",
            "pauseOnFailure": "3",
            "catchupWindowSeconds": "",
        },
    )
    assert saved.status == 303
    api = await (await client.get(f"/api/installs/{install_id}/schedule", headers=caller.cookie)).json()
    assert api["schedule"]["timezone"] == "Europe/Paris" and api["schedule"]["onBacklog"] == "queue"
    assert (api["schedule"]["jitterSeconds"], api["schedule"]["pauseOnFailure"]) == (30, 3)
    toggled = await submit(client, caller, f"{base}/toggle", {"enabled": "false"})
    assert toggled.status == 303
    html = await (await page(client, caller, base)).text()
    assert "disabled" in html and "Enable" in html


async def test_definition_editor_reports_errors_at_their_path(client):
    ada = await signup(client)
    token = await csrf_of(client, ada)
    cases = {
        "{not json": "line 1, column 2",
        json.dumps(
            {"version": "v1", "agents": [{"key": "a", "name": "A", "model": "nope", "prompt": "p"}]}
        ): ("definition.agents[0].model"),
        json.dumps(
            {
                "version": "v1",
                "agents": [
                    {"key": "a", "name": "A", "model": "providerA:small", "prompt": "p", "reportsTo": "zz"}
                ],
            }
        ): "definition.agents[0].reportsTo",
    }
    for text, path in cases.items():
        response = await client.post(
            "/templates/validate",
            data={"_csrf": token, "definition": text},
            headers={**ada.cookie, **own_origin(client)},
        )
        errors = (await response.json())["errors"]
        assert errors and errors[0]["path"] == path, errors
    valid = json.dumps(
        {"version": "v1", "agents": [{"key": "a", "name": "A", "model": "providerA:small", "prompt": "p"}]}
    )
    response = await client.post(
        "/templates/validate",
        data={"_csrf": token, "definition": valid},
        headers={**ada.cookie, **own_origin(client)},
    )
    report = await response.json()
    # Valid, with a warning: no provider has a key in these settings, so its runs would fail here.
    assert report["valid"] is True and report["errors"] == []
    assert [w["path"] for w in report["warnings"]] == ["definition.agents[0].model"]
    assert "providerA is not configured on this server" in report["warnings"][0]["message"]


async def test_invitation_link_and_template_lifecycle(client):
    owner = await signup(client)
    org = await (await client.post("/api/orgs", json={"name": "Acme Pages"}, headers=owner.cookie)).json()
    slug = org["org"]["slug"]
    guest = await signup(client)
    await invite(client, owner, slug, guest.email)
    token = await invitation_token(client, guest.email)
    assert (await page(client, None, f"/invitations/{token}")).headers["Location"].startswith("/signin?next=")
    assert (await page(client, guest, f"/invitations/{token}")).status == 200
    accepted = await submit(client, guest, f"/invitations/{token}", {})
    assert accepted.status == 303 and accepted.headers["Location"] == f"/orgs/{slug}"
    again = await submit(client, guest, f"/invitations/{token}", {})
    assert again.status == 404
    # Builder: create, publish, new version, publish, diff.
    definition = {
        "version": "v1",
        "agents": [{"key": "a", "name": "A", "model": "providerA:small", "prompt": "p"}],
    }
    created = await submit(
        client,
        owner,
        "/templates/new",
        {
            "name": "Pages team",
            "slug": "pages-team-x1",
            "visibility": "public",
            "definition": json.dumps(definition),
        },
    )
    assert created.status == 303, await created.text()
    template_path = created.headers["Location"]
    assert (await submit(client, owner, f"{template_path}/publish", {"changeLog": "first"})).status == 303
    draft = await submit(client, owner, f"{template_path}/new-version", {})
    assert draft.status == 303
    definition["agents"].append({"key": "b", "name": "B", "model": "providerA:small", "prompt": "q"})
    saved = await submit(
        client, owner, f"{draft.headers['Location']}/save", {"definition": json.dumps(definition)}
    )
    assert saved.status == 303
    published = await submit(client, owner, f"{draft.headers['Location']}/publish", {"changeLog": "add b"})
    assert published.status == 303 and published.headers["Location"] == template_path
    diff = await (await page(client, owner, f"{template_path}/diff?from=1&to=2")).text()
    assert "MINOR" in diff and "1 agent(s) added" in diff and 'class="add"' in diff
    stranger = await signup(client)
    assert (await submit(client, stranger, f"{template_path}/archive", {})).status == 403
    forked = await submit(client, stranger, f"{template_path}/fork", {})
    assert forked.status == 303 and forked.headers["Location"] != template_path
    assert (
        "forkedFromId"
        in await (
            await client.get(
                f"/api/templates/{forked.headers['Location'][11:]}",
                headers=bearer(await create_key(client, stranger)),
            )
        ).text()
    )
    priced = await submit(
        client, owner, f"{template_path}/pricing", {"pricingModel": "per_run", "priceUsdCents": "50"}
    )
    assert priced.status == 303
    public = await (await client.get(f"/api/templates/{template_path[11:]}")).json()
    assert (public["pricingModel"], public["priceUsdCents"]) == ("per_run", 50)
    bad_price = await submit(
        client, owner, f"{template_path}/pricing", {"pricingModel": "per_run", "priceUsdCents": ""}
    )
    assert bad_price.status == 400
    rolled = await submit(client, owner, f"{template_path}/rollback", {"version": "1"})
    assert rolled.status == 303
    rollback_draft = await (await page(client, owner, rolled.headers["Location"])).text()
    assert "Version draft of" in rollback_draft and '"key": "b"' not in rollback_draft
    await submit(client, owner, f"{rolled.headers['Location']}/publish", {"changeLog": "back to one agent"})
    assert (await submit(client, owner, f"{template_path}/archive", {})).status == 303
