"""The service on a real multi-node Ray cluster (issue #14, items 4 and 5).

One cluster per module (`ray.cluster_utils.Cluster`: a head and a worker node, its temp dir
private through RAY_TMPDIR so it never joins another Ray on the machine) and two `svc serve`
processes joined to it exactly as docker-compose.yml joins the API: as Ray Clients
(`SVC_RAY_ADDRESS=ray://<head>:<client port>`), sharing one database (the same data directory:
the first API starts the embedded server, the second joins it).

The head node has no room for an install actor (its `memory` resource is below
SVC_ACTOR_MEMORY_MB) and a worker node has room for two, so every install actor runs on a
worker node: removing that node interrupts a run, and two busy installs fill the cluster.
Every process is stopped by its PID; `ray stop` is never run.

Scenarios: runs through both APIs; a cancel and a continue sent to the other API than the
start; a full cluster (the actor queues, the sync run answers 503 with Retry-After, the retry
runs once there is room); a worker node removed mid-run, gracefully and by killing its raylet
(the run resumes from its journal on a new node and the waiting caller gets its end, no orphan
acts); six installs spread over two roomy workers (never packed on one), the raylet of one
killed with their calls in flight (their runs resume on the other and complete, one scheduler
actor lives on); an install actor killed with `kill -9` during a webhook run, a scheduled run
(fired with `schedule/trigger`, as the scheduler fires it) and a continued pipeline run (each
resumes and completes). Not covered here:
the scheduler firing once per minute while API processes stop and start (it needs the
scheduler's minute clock).

The module runs in a pytest process of its own (tests/test_cluster_suite.py starts it): a
`Cluster` built in a process shares Ray's process-wide state (its key-value client and
address) with that process's own Ray connection, and removing the cluster's nodes cuts it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography.fernet import Fernet
from ray.cluster_utils import Cluster

from actors.capacity import NO_ROOM
from svc.core.store import Store
from svc.subprocesses.embedded_db import EmbeddedMongo, free_port
from tests.fakes.llm import DEFAULT_KEY, FakeLLM
from tests.support.processes import ApiProcess, ThreadServer, start_api
from tests.support.runtime import member, svc_install, webhook_token
from tests.support.waiting import wait_for

# Set by tests/test_cluster_suite.py, which runs this module in a process of its own.
OWN_PROCESS_VARIABLE = "SVC_CLUSTER_TESTS"
pytestmark = pytest.mark.skipif(
    os.environ.get(OWN_PROCESS_VARIABLE) != "1", reason="runs in its own process (test_cluster_suite.py)"
)

ACTOR_MB = 64
MB = 1024 * 1024
HEAD_MEMORY = 48 * MB  # below one actor: no install actor is placed on the head
WORKER_MEMORY = 2 * ACTOR_MB * MB  # room for exactly two install actors
PLACEMENT_S = 20  # longer than a cold actor's start on a loaded 2-core machine
SLOW_S = 6.0  # a provider call long enough to act on a run while it is in flight


@dataclass
class Callbacks:
    """A callback receiver: what each run's callback said."""

    received: list[dict[str, Any]] = field(default_factory=list)

    def app(self) -> web.Application:
        async def hook(request: web.Request) -> web.Response:
            self.received.append(await request.json())
            return web.Response(status=204)

        app = web.Application()
        app.router.add_post("/hook", hook)
        return app

    def of(self, run_id: str) -> dict[str, Any] | None:
        return next((body for body in self.received if body.get("runId") == run_id), None)


@dataclass
class World:
    """The module's cluster, its two APIs, the fakes and direct database access."""

    cluster: Cluster
    ray_tmp: Path
    apis: tuple[ApiProcess, ApiProcess]
    llm: FakeLLM
    callbacks: Callbacks
    callback_url: str
    data_dir: Path
    llm_port: int
    worker: Any = None

    def add_worker(self) -> None:
        self.worker = self.cluster.add_node(num_cpus=1, memory=WORKER_MEMORY)
        self.cluster.wait_for_nodes()


def stop_nodes(cluster: Cluster) -> None:
    """`Cluster.shutdown()` without its last steps: it also resets this process's Ray key-value
    client and address, which would cut the suite's own (session) Ray connection off."""
    for node in list(cluster.worker_nodes):
        cluster.remove_node(node)
    if cluster.head_node is not None:
        cluster.remove_node(cluster.head_node)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    # A short private temp dir: Ray's socket paths must stay under the kernel's length limit.
    ray_tmp = Path(tempfile.mkdtemp(prefix="svcrc", dir="/tmp"))
    kept = {name: os.environ.get(name) for name in ("RAY_TMPDIR", "RAY_ADDRESS")}
    os.environ["RAY_TMPDIR"] = str(ray_tmp)
    os.environ.pop("RAY_ADDRESS", None)
    client_port = free_port()
    llm = FakeLLM("providerA", default_text="done")
    llm_server = ThreadServer(llm.app())
    callbacks = Callbacks()
    hook_server = ThreadServer(callbacks.app())
    cluster = None
    apis: list[ApiProcess] = []
    try:
        llm_server.start()
        hook_server.start()
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "memory": HEAD_MEMORY,
                "ray_client_server_port": client_port,
                "include_dashboard": False,
                # A killed raylet is declared dead after 3 missed 1 s health checks instead of
                # Ray's 5 missed 3 s ones: the scenarios measure what happens once a node is gone,
                # not Ray's detection, and an operator may tune the same settings the same way.
                "_system_config": {
                    "health_check_initial_delay_ms": 1000,
                    "health_check_period_ms": 1000,
                    "health_check_timeout_ms": 1000,
                    "health_check_failure_threshold": 3,
                },
            },
        )
        data_dir = tmp_path_factory.mktemp("cluster-data")
        env = {
            # The way docker-compose.yml connects the API: a Ray Client of the head.
            "SVC_RAY_ADDRESS": f"ray://127.0.0.1:{client_port}",
            "SVC_DATA_DIR": str(data_dir),
            "SVC_SECRET_KEYS": Fernet.generate_key().decode(),
            "SVC_PROVIDERA_API_KEY": DEFAULT_KEY,
            "SVC_PROVIDERA_BASE_URL": llm_server.base + ("/v1" if llm.wire_format == "openai-chat" else ""),
            "SVC_RATE_LIMITS": "off",
            # These scenarios measure placement and resumption, not the database's timeout: with
            # `make test`'s other process busy on the same two cores, the one embedded database
            # of a 3-node cluster and two API processes answered a request past the 10 s default.
            "SVC_DB_TIMEOUT_SECONDS": "30",
            # The scheduler runs (its jobs hand runs over and sweep them); no warm pool, so every
            # install actor here is one placed by Ray's own scheduling (SPREAD).
            "SVC_ACTOR_SPARES": "0",
            "SVC_EGRESS_ALLOW_PRIVATE": "true",
            "SVC_ACTOR_MEMORY_MB": str(ACTOR_MB),
            "SVC_ACTOR_PLACEMENT_SECONDS": str(PLACEMENT_S),
            "SVC_ACTOR_IDLE_SECONDS": "5",  # scenarios that need free places wait for idle actors to leave
            "RAY_TMPDIR": str(ray_tmp),
        }
        log_dir = tmp_path_factory.mktemp("cluster-logs")
        apis.append(start_api(env, log_dir, "api-a", attempts=3))
        apis.append(start_api(env, log_dir, "api-b", attempts=3))
        world = World(
            cluster,
            ray_tmp,
            (apis[0], apis[1]),
            llm,
            callbacks,
            f"{hook_server.base}/hook",
            data_dir,
            llm_server.port,
        )
        world.add_worker()
        yield world
    finally:
        for api in apis:
            api.stop()
        if cluster is not None:
            stop_nodes(cluster)
        hook_server.stop()
        llm_server.stop()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        for name, value in kept.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
async def store(world: World) -> AsyncIterator[Store]:
    """The APIs' database (joining the embedded server they share)."""
    server = EmbeddedMongo(world.data_dir)
    uri = await server.start()
    store = Store.connect(uri)
    yield store
    await store.close()
    await server.stop()


@pytest.fixture
async def remotes(world: World) -> AsyncIterator[tuple[Remote, Remote]]:
    """HTTP clients of API A and API B."""
    a = Remote(aiohttp.ClientSession(base_url=world.apis[0].base))
    b = Remote(aiohttp.ClientSession(base_url=world.apis[1].base))
    yield a, b
    await a.session.close()
    await b.session.close()


@pytest.fixture(autouse=True)
def quick_provider(world: World) -> Iterator[None]:
    """Every test starts with a fast provider and ends with one."""
    world.llm.latency_s = 0.0
    yield
    world.llm.latency_s = 0.0


class Remote:
    """An HTTP client of one API process, shaped like aiohttp's TestClient (`post`, `get`,
    `session`), so the shared helpers of tests/support work against it."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.session.post(path, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.session.get(path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> Any:
        return self.session.patch(path, **kwargs)


async def run_status(store: Store, install_id: str, status: str) -> dict[str, Any] | None:
    return await store["pipeline_runs"].find_one({"installId": install_id, "status": status})


async def running_run(store: Store, install_id: str) -> dict[str, Any]:
    """The install's run once it is running (AssertionError after a deadline)."""
    found: dict[str, Any] = {}

    async def started() -> bool:
        run = await run_status(store, install_id, "running")
        if run is not None:
            found.update(run)
        return run is not None

    assert await wait_for(started, 90), "the run never started"
    return found


def cluster_pids(world: World, marker: str) -> list[int]:
    """PIDs of this cluster's processes whose command line contains `marker` (processes are
    told apart from other Rays on the machine by the private RAY_TMPDIR in their environment)."""
    needle = f"RAY_TMPDIR={world.ray_tmp}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker not in cmdline:
                continue
            if needle in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def pids_connected_to(pids: list[int], port: int) -> list[int]:
    """Those of `pids` holding an established TCP connection to 127.0.0.1:`port` (/proc/net/tcp):
    the actor with a model call in flight to the fake provider."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
            inodes.add(f"socket:[{fields[9]}]")
    found = []
    for pid in pids:
        try:
            if any(os.readlink(fd) in inodes for fd in Path(f"/proc/{pid}/fd").iterdir()):
                found.append(pid)
        except OSError:
            continue
    return found


async def sync_run(remote: Remote, install_id: str, key: dict[str, str], task: str = "go") -> tuple[int, Any]:
    response = await remote.post(f"/api/installs/{install_id}/run", json={"task": task}, headers=key)
    body = await response.json()
    return response.status, (body, response.headers.get("Retry-After"))


async def run_once_placed(remote: Remote, install_id: str, key: dict[str, str]) -> tuple[int, Any]:
    """A sync run, sent again after each 503 No room for up to 3 minutes (each such answer comes
    after the API waited the placement bound for the actor); the last answer."""
    last: list[tuple[int, Any]] = []

    async def placed() -> bool:
        last.append(await sync_run(remote, install_id, key))
        status, (body, _) = last[-1]
        return not (status == 503 and body == {"error": NO_ROOM})

    await wait_for(placed, 180)
    return last[-1]


async def test_runs_go_through_either_api_to_one_actor_per_install(world, remotes, store):
    a, b = remotes
    _, key, install_id = await svc_install(a, [member("lead")])
    status, (first, _) = await sync_run(a, install_id, key)
    assert status == 200 and first["status"] == "completed", first.get("errorMessage")
    status, (second, _) = await sync_run(b, install_id, key)
    assert status == 200 and second["status"] == "completed", second
    assert await store["pipeline_runs"].count_documents({"installId": install_id, "status": "completed"}) == 2
    # Both runs were served by the one named actor, placed on the worker node (the head has no room).
    assert len(cluster_pids(world, "InstallActor")) >= 1


async def test_a_cancel_sent_to_the_other_api_stops_the_run(world, remotes, store):
    a, b = remotes
    _, key, install_id = await svc_install(a, [member("lead")])
    world.llm.latency_s = SLOW_S
    started = asyncio.ensure_future(sync_run(a, install_id, key, "slow"))
    run = await running_run(store, install_id)
    # Let the step reach its model call before cancelling (polled: the fake has the request).
    assert await wait_for(
        lambda: _true(any(r.body and "slow" in str(r.body) for r in world.llm.requests)), 30
    )
    cancelled = await b.post(f"/api/installs/{install_id}/cancel-run", headers=key)
    assert cancelled.status == 200, await cancelled.text()
    assert (await cancelled.json())["runId"] == run["_id"]
    status, (result, _) = await started
    assert status == 200 and result["status"] == "failed" and result["errorMessage"] == "Run cancelled", (
        result
    )
    stored = await store["pipeline_runs"].find_one({"_id": run["_id"]})
    assert stored["status"] == "failed"


async def _true(value: bool) -> bool:
    return value


async def test_a_full_cluster_queues_the_actor_and_answers_503_with_retry_after(world, remotes, store):
    a, b = remotes
    installs = [await svc_install(a, [member("lead")]) for _ in range(3)]
    (_, key1, busy1), (_, key2, busy2), (_, key3, waiting) = installs
    # The actors of earlier tests idle out, leaving the worker node's two places free.
    assert await wait_for(lambda: _true(not cluster_pids(world, "InstallActor")), 60), (
        "actors never idled out"
    )
    world.llm.holding = True  # both places stay taken until the third run has its answer
    first = asyncio.ensure_future(sync_run(a, busy1, key1))
    second = asyncio.ensure_future(sync_run(b, busy2, key2))
    await running_run(store, busy1)
    await running_run(store, busy2)
    # Both places taken: the third install's actor is pending; its run answers 503 within the bound.
    began = time.monotonic()
    status, (body, retry_after) = await sync_run(b, waiting, key3)
    assert status == 503, body
    assert body == {"error": NO_ROOM} and retry_after is not None and int(retry_after) > 0
    assert PLACEMENT_S <= time.monotonic() - began < PLACEMENT_S + 30, "the wait is bounded"
    world.llm.holding = False
    assert (await first)[0] == 200 and (await second)[0] == 200
    # The pending actor stays queued in Ray: once a busy actor idles out, it is placed, and a
    # retry runs.
    done: dict[str, Any] = {}

    async def retried() -> bool:
        status, (body, _) = await sync_run(a, waiting, key3)
        done.update(body)
        return status == 200

    assert await wait_for(retried, 90), done
    assert done["status"] == "completed"


@pytest.mark.parametrize("graceful", [True, False], ids=["graceful", "raylet-killed"])
async def test_a_worker_node_removed_mid_run_resumes_the_run_on_a_new_node(world, remotes, store, graceful):
    a, b = remotes
    _, key, install_id = await svc_install(a, [member("lead")])
    world.llm.holding = True
    task = f"moved-{uuid.uuid4().hex[:8]}"
    started = asyncio.ensure_future(sync_run(a, install_id, key, task))
    run = await running_run(store, install_id)
    # Remove the node while the run's model call is in flight (the fake has received it).
    assert await wait_for(lambda: _true(bool(calls_with(world, task))), 60), "the run's model call"
    gone = world.worker
    world.cluster.remove_node(gone, allow_graceful=graceful)
    world.add_worker()  # the only place with room: Ray restarts the install's actor there
    world.llm.holding = False
    # The new copy adopts the run and resumes it from its journal: the waiting caller gets its end.
    status, (body, _) = await started
    assert status == 200 and body["status"] == "completed", body
    assert body["runId"] == run["_id"]
    # Later runs on that install work, through either API, on the new node.
    status, (later, _) = await sync_run(b, install_id, key)
    assert status == 200 and later["status"] == "completed", later
    holder = await store["actor_incarnations"].find_one({"_id": install_id})
    assert holder["node"] == world.worker.node_id != gone.node_id
    # What any orphaned copy of the old actor did with the run once its call could have ended:
    # judged by test_no_orphan_acts_after_a_node_is_removed.
    orphan_done_by = time.monotonic() + 3
    assert await wait_for(lambda: _true(time.monotonic() > orphan_done_by), 10)
    ORPHANS[graceful] = {
        "model calls for the moved run": len(calls_with(world, task)),
        "final status": (await store["pipeline_runs"].find_one({"_id": run["_id"]}))["status"],
        "run records": await store["runs"].count_documents({"runId": run["_id"]}),
    }


def calls_with(world: World, task: str) -> list[Any]:
    """The model calls the fake received whose body carries this (unique) task."""
    return [r for r in world.llm.requests if r.body and task in str(r.body)]


# What each node-removal scenario saw of orphans (filled by the test above, judged below).
ORPHANS: dict[bool, dict[str, Any]] = {}


async def test_no_orphan_acts_after_a_node_is_removed() -> None:
    assert set(ORPHANS) == {True, False}, "the node-removal scenarios ran first"
    for graceful, seen in ORPHANS.items():
        # The call in flight when the node went and the resumed one (or only the first, when an
        # orphaned process of the old copy got its answer and ended the run before the takeover),
        # nothing more; the run stays completed, with one run record.
        calls = seen.pop("model calls for the moved run")
        assert calls in (1, 2) and seen == {"final status": "completed", "run records": 1}, (
            graceful,
            calls,
            seen,
        )


async def test_installs_spread_over_the_nodes_and_a_killed_raylet_s_runs_resume_on_the_others(
    world, remotes, store
):
    a, b = remotes
    # Earlier actors idle out; the small worker leaves; two workers with room for six each join,
    # so Ray could pack all six installs on one of them.
    assert await wait_for(lambda: _true(not cluster_pids(world, "InstallActor")), 60), (
        "actors never idled out"
    )
    world.cluster.remove_node(world.worker, allow_graceful=True)
    roomy = [world.cluster.add_node(num_cpus=1, memory=6 * ACTOR_MB * MB) for _ in range(2)]
    world.cluster.wait_for_nodes()
    world.worker = roomy[0]
    installs = [await svc_install(a, [member("lead")]) for _ in range(6)]
    tasks = [f"spread-{i}-{uuid.uuid4().hex[:8]}" for i in range(6)]
    world.llm.holding = True
    runs = []
    # One after another (each run's call held in flight before the next starts): six cold actors
    # started at once on two loaded cores can take longer than the placement bound, and Ray's
    # placement is what is measured here, not start-up under contention.
    for i, ((_, key, install_id), task) in enumerate(zip(installs, tasks, strict=True)):
        runs.append(asyncio.ensure_future(sync_run((a, b)[i % 2], install_id, key, task)))
        in_flight = await wait_for(lambda task=task: _true(bool(calls_with(world, task))), 60)
        assert in_flight, f"run {i} in flight"
    nodes = {}
    for _, _, install_id in installs:
        nodes[install_id] = (await store["actor_incarnations"].find_one({"_id": install_id}))["node"]
    placed = {node: sum(1 for n in nodes.values() if n == node) for node in set(nodes.values())}
    assert len(placed) >= 2 and set(placed) <= {n.node_id for n in roomy}, placed
    # The raylet of the node holding the most installs is killed while their calls are in flight.
    victim = max(roomy, key=lambda node: placed.get(node.node_id, 0))
    moved = [install_id for install_id, node in nodes.items() if node == victim.node_id]
    world.cluster.remove_node(victim, allow_graceful=False)
    survivor = next(node for node in roomy if node is not victim)
    world.worker = survivor
    world.llm.holding = False
    answers = await asyncio.gather(*runs)
    assert all(status == 200 and body["status"] == "completed" for status, (body, _) in answers), answers
    for task in tasks:  # each run's call made once, or twice where its node died under it
        assert 1 <= len(calls_with(world, task)) <= 2, task
    assert (
        await store["runs"].count_documents({"runId": {"$in": [body["runId"] for _, (body, _) in answers]}})
        == 6
    )
    # Exactly one scheduler actor lives on (restarted elsewhere if it was on the dead node).
    assert await wait_for(lambda: _true(len(cluster_pids(world, "SchedulerActor")) == 1), 60), cluster_pids(
        world, "SchedulerActor"
    )
    # No orphan stopped a healthy copy: every install runs again, on the nodes that live. A moved
    # install's actor may still be on its way to the survivor (Ray places its restart there, which
    # can outlast the placement bound on two loaded cores): its run then answers 503 No room with
    # Retry-After, and the caller sends it again, as a client is told to.
    again = await asyncio.gather(*(run_once_placed(b, install_id, key) for _, key, install_id in installs))
    assert all(status == 200 and body["status"] == "completed" for status, (body, _) in again), again
    # The installs of the dead node now live on the other one. (Their interrupted runs ended on
    # whichever copy got there first: a new one resuming from the journal, or the old process
    # finishing its call before the takeover; either way once, as counted above.)
    for install_id in moved:
        holder = await store["actor_incarnations"].find_one({"_id": install_id})
        assert holder["node"] == survivor.node_id, holder


async def test_an_actor_killed_during_a_webhook_run_resumes_it_and_the_callback_says_completed(
    world, remotes, store
):
    a, b = remotes
    caller, _key, install_id = await svc_install(a, [member("lead")])
    token = await webhook_token(a, caller, install_id)
    world.llm.holding = True
    token_task = f"webhook-{uuid.uuid4().hex[:8]}"
    fired = await b.post(
        f"/api/webhook/{token}", json={"inputText": token_task, "callbackUrl": world.callback_url}
    )
    assert fired.status == 200, await fired.text()
    run_id = (await fired.json())["runId"]
    await running_run(store, install_id)
    assert await wait_for(lambda: _true(bool(calls_with(world, token_task))), 60), "the run's model call"
    pids = pids_connected_to(cluster_pids(world, "InstallActor"), world.llm_port)
    assert pids, "the actor running the webhook run"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    world.llm.holding = False
    # Ray restarts the actor; the new copy resumes the run from its journal, without anyone
    # calling the install again, and the callback tells its real end.
    assert await wait_for(
        lambda: _true((world.callbacks.of(run_id) or {}).get("status") == "completed"), 90
    ), "the killed run was never resumed and reported"
    assert len(calls_with(world, token_task)) == 2  # the lost attempt and the resumed one
    again = await a.post(
        f"/api/webhook/{token}", json={"inputText": "again", "callbackUrl": world.callback_url}
    )
    next_id = (await again.json())["runId"]
    assert await wait_for(lambda: _true((world.callbacks.of(next_id) or {}).get("status") == "completed"), 90)


async def test_a_continue_sent_to_the_other_api_and_a_kill_during_the_continued_run(world, remotes, store):
    a, b = remotes
    _, key, install_id = await svc_install(a, [member("a"), member("b")], gates=[{"name": "g", "after": "a"}])
    status, (paused, _) = await sync_run(a, install_id, key)
    assert status == 200 and paused["status"] == "paused", paused
    # Continued through the other API: the install's actor holds the gate, wherever it runs.
    response = await b.post(f"/api/installs/{install_id}/continue", json={}, headers=key)
    assert response.status == 200, await response.text()

    async def status_of(run_id: str, wanted: str) -> bool:
        run = await store["pipeline_runs"].find_one({"_id": run_id})
        return run is not None and run["status"] == wanted

    assert await wait_for(lambda: status_of(paused["runId"], "completed"), 60)
    # Paused again; the continued run is killed (kill -9 of its actor) during its model call.
    status, (again, _) = await sync_run(a, install_id, key)
    assert status == 200 and again["status"] == "paused", again
    world.llm.holding = True
    calls = len(world.llm.requests)
    response = await b.post(f"/api/installs/{install_id}/continue", json={}, headers=key)
    assert response.status == 200, await response.text()
    assert await wait_for(lambda: _true(len(world.llm.requests) > calls), 60), "the continued step's call"
    pids = pids_connected_to(cluster_pids(world, "InstallActor"), world.llm_port)
    assert pids, "the actor running the continued pipeline"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    world.llm.holding = False
    # It resumes from its journal and completes without anyone calling the install again ...
    assert await wait_for(lambda: status_of(again["runId"], "completed"), 90), "the killed run never resumed"
    settled = await store["pipeline_runs"].find_one({"_id": again["runId"]})
    assert settled["resumes"] == 1, settled.get("resumes")
    # ... and the install runs again.
    status, (third, _) = await sync_run(b, install_id, key)
    assert status == 200 and third["status"] == "paused", third


async def test_an_actor_killed_during_a_scheduled_run_resumes_it_and_the_next_fire_runs(
    world, remotes, store
):
    a, b = remotes
    _, key, install_id = await svc_install(a, [member("lead")])
    schedule = {"cronExpression": "0 0 1 1 *"}  # far away: the fires below are triggered by hand
    assert (await a.patch(f"/api/installs/{install_id}/schedule", json=schedule, headers=key)).status == 200
    world.llm.holding = True
    calls = len(world.llm.requests)
    fired = await b.post(f"/api/installs/{install_id}/schedule/trigger", headers=key)
    assert fired.status == 200, await fired.text()
    run_id = (await fired.json())["runId"]
    assert await wait_for(lambda: _true(len(world.llm.requests) > calls), 60), "the scheduled run's call"
    pids = pids_connected_to(cluster_pids(world, "InstallActor"), world.llm_port)
    assert pids, "the actor running the scheduled run"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    world.llm.holding = False

    async def ended(run_id: str, status: str) -> bool:
        run = await store["pipeline_runs"].find_one({"_id": run_id})
        return run is not None and run["status"] == status

    assert await wait_for(lambda: ended(run_id, "completed"), 90), "the killed scheduled run never resumed"
    # The next fire runs (the install is not left busy, so the backlog policy does not skip it).
    again = await a.post(f"/api/installs/{install_id}/schedule/trigger", headers=key)
    assert again.status == 200, await again.text()
    next_id = (await again.json())["runId"]
    assert next_id != run_id
    assert await wait_for(lambda: ended(next_id, "completed"), 90), "the next fire did not run"
