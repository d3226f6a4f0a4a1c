"""Pipelines: a team with declared gates runs its agents in definition order as steps.

Each step's output is the next step's input. After a step with a gate (and unless
the run bypasses gates) the run pauses: its state (the next step and the output
to pass on) is stored in MongoDB, so a paused pipeline survives any restart and
continues later in whatever process holds the install's actor.

The outreach gates work on records that steps produce through structured output
(docs/pipelines.md): a step whose final answer is a JSON object with `targets`
and/or `drafts` adds them to the install's queues. An agent with role `sender`
is a built-in step that mails every approved draft exactly once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Literal

from svc.core import Document, Mailer, Store, increment_exactly, new_id, utcnow
from svc.runtime.agent_loop import GateReached, RunScope, TeamRunner
from svc.runtime.steps import AgentStep, TeamResult, agent_entry

log = logging.getLogger(__name__)

SENDER_ROLE = "sender"
DraftStatus = Literal["pending_approval", "approved", "rejected", "sent", "archived"]


def structured(output: str | None) -> dict[str, Any]:
    """The JSON object at the heart of a step's answer, or {} when there is none."""
    if not output or "{" not in output:
        return {}
    try:
        value = json.loads(output[output.index("{") : output.rindex("}") + 1])
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def score(value: Any) -> int:
    """A priority score from agent output (0 when it is not a number)."""
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return 0


MAX_DRAFT_ID = 2**63 - 1


class PipelineExecutor:
    """Runs pipeline steps inside the install's actor."""

    def __init__(self, store: Store, mailer: Mailer) -> None:
        self.store = store
        self.mailer = mailer

    async def run(
        self,
        install: Document,
        definition: dict[str, Any],
        scope: RunScope,
        runner: TeamRunner,
        payload: dict[str, Any],
    ) -> tuple[TeamResult, dict[str, Any] | None]:
        """Run from `fromStep`; the result, and the pause state when a gate stopped it.

        Step i runs at journal path `p<i>.<key>`, so a run resumed after a crash replays the steps
        its journal finished (their records and mails are not made again) and goes on from there."""
        agents = definition["agents"]
        gates = {gate["after"]: gate for gate in definition.get("gates") or []}
        carry: str = payload.get("input") or payload["task"]
        bypass = bool(payload.get("bypassGates"))
        recorder = runner.recorder
        last_key = agents[0]["key"]
        steps: list[AgentStep] = []
        for index in range(int(payload.get("fromStep") or 0), len(agents)):
            agent = agents[index]
            last_key = agent["key"]
            path = f"p{index}.{agent['key']}"
            done_before = recorder.journal.get("agent", path)
            if agent.get("role") == SENDER_ROLE:
                if done_before is not None:
                    output = str(done_before.get("output") or "")
                else:
                    recorder.current_agent = agent["key"]  # cancel-run names the step it stops
                    output = await self.send_approved(install["_id"], scope.run_id)
                    step = AgentStep(agent_key=agent["key"], path=path, output=output, ended_at=utcnow())
                    recorder.note(agent_entry(step))
            else:
                task = carry if done_before is not None else await self._input(install["_id"], agent, carry)
                try:
                    result = await runner.run_agent(scope, agent, task, path)
                except GateReached as reached:  # a tool call of this step waits for a person
                    reached.resume = {"fromStep": index, "input": carry}
                    raise
                steps += result.steps
                if result.status != "completed":
                    return TeamResult(
                        "failed",
                        None,
                        agent["key"],
                        result.input_tokens,
                        result.output_tokens,
                        steps,
                        result.error,
                    ), None
                output = result.response or ""
                if done_before is None:
                    await self._records(install["_id"], scope.run_id, agent["key"], output)
            carry = output
            gate = gates.get(agent["key"])
            if gate is not None and not bypass:
                pause = {"gate": gate["name"], "fromStep": index + 1, "input": carry, "stepKey": agent["key"]}
                return TeamResult("paused", None, agent["key"], 0, 0, steps), pause
        return TeamResult("completed", carry, last_key, 0, 0, steps), None

    async def _input(self, install_id: str, agent: dict[str, Any], carry: str) -> str:
        """The step's input, with reviewers' notes on this agent's rejected drafts fed back."""
        notes = (
            await self.store["drafts"]
            .find(
                {
                    "installId": install_id,
                    "stepKey": agent["key"],
                    "status": "rejected",
                    "rejectionNote": {"$nin": [None, ""]},
                    "noteDelivered": {"$ne": True},
                },
                {"rejectionNote": 1, "subject": 1},
            )
            .to_list(50)
        )
        if not notes:
            return carry
        await self.store["drafts"].update_many(
            {"_id": {"$in": [n["_id"] for n in notes]}}, {"$set": {"noteDelivered": True}}
        )
        feedback = "\n".join(f"- {n.get('subject') or 'a draft'}: {n['rejectionNote']}" for n in notes)
        return f"{carry}\n\nReviewers rejected earlier drafts with these notes:\n{feedback}"

    async def _records(self, install_id: str, run_id: str, step_key: str, output: str) -> None:
        """Targets and drafts from the step's structured output."""
        data = structured(output)
        now = utcnow()
        handles: dict[str, str] = {}
        for raw in data.get("targets") or []:
            if not isinstance(raw, dict) or not (raw.get("githubHandle") or raw.get("email")):
                continue
            new_target = new_id()
            handles[str(raw.get("githubHandle") or raw.get("email"))] = new_target
            await self.store["targets"].insert_one(
                {
                    "_id": new_target,
                    "installId": install_id,
                    "runId": run_id,
                    "stepKey": step_key,
                    "githubHandle": raw.get("githubHandle"),
                    "email": raw.get("email"),
                    "priorityScore": score(raw.get("priorityScore")),
                    "categoryFit": raw.get("categoryFit"),
                    "bio": raw.get("bio"),
                    "status": "pending",
                    "createdAt": now,
                }
            )
        for raw in data.get("drafts") or []:
            if not isinstance(raw, dict) or not raw.get("body"):
                continue
            recipient = raw.get("recipientEmail") or raw.get("email")
            target_id = handles.get(str(raw.get("targetHandle") or recipient))
            if target_id is None and raw.get("targetHandle"):
                found = await self.store["targets"].find_one(
                    {"installId": install_id, "githubHandle": raw["targetHandle"]}, sort=[("createdAt", -1)]
                )
                target_id = found["_id"] if found else None
            counter = await increment_exactly(self.store["counters"], "drafts", {"value": 1})
            await self.store["drafts"].insert_one(
                {
                    "_id": int(counter["value"]),
                    "installId": install_id,
                    "runId": run_id,
                    "stepKey": step_key,
                    "targetId": target_id,
                    "status": "pending_approval",
                    "subject": str(raw.get("subject") or ""),
                    "body": str(raw["body"]),
                    "recipientEmail": recipient,
                    "targetHandle": raw.get("targetHandle"),
                    "rejectionNote": None,
                    "editedAt": None,
                    "createdAt": now,
                }
            )

    async def send_approved(self, install_id: str, run_id: str) -> str:
        """Mail every approved draft once: each is claimed (approved -> sending, by this run) before
        it is sent, and recorded in the outbox under the draft's own id, so a draft this run was
        sending when its worker stopped is sent by the resumed run without a second mail."""
        sent = 0
        while drafts := await self._to_send(install_id, run_id):  # again: approved meanwhile
            for draft in drafts:
                if await self._mail(install_id, run_id, draft):
                    sent += 1
        return json.dumps({"sent": sent})

    async def _mail(self, install_id: str, run_id: str, draft: Document) -> bool:
        """Claim the draft for this run (one conditional update, which alone decides who takes it;
        one this run was sending already is its own), mail it and mark it sent; False when another
        run took it first."""
        drafts = self.store["drafts"]
        if draft["status"] == "approved":
            claim = {"$set": {"status": "sending", "sendingRun": run_id}}
            taken = await drafts.update_one({"_id": draft["_id"], "status": "approved"}, claim)
            if not taken.modified_count:
                return False
        try:
            await self.mailer.send(
                draft["recipientEmail"],
                draft["subject"],
                draft["body"],
                kind="outreach.draft",
                message_id=f"draft:{install_id}:{draft['_id']}",
            )
        except BaseException:
            # Not sent (failed, or the run was cancelled): back to approved, so a later Sender
            # step (or a recall) can act on it; a mail already recorded is not sent twice.
            back = {"$set": {"status": "approved"}}
            await asyncio.shield(drafts.update_one({"_id": draft["_id"], "status": "sending"}, back))
            raise
        await drafts.update_one(
            {"_id": draft["_id"], "status": "sending"}, {"$set": {"status": "sent", "sentAt": utcnow()}}
        )
        return True

    async def _to_send(self, install_id: str, run_id: str) -> list[Document]:
        """The drafts with a recipient this run mails now: the ones it was sending when its worker
        stopped, then the approved ones. Two reads by the (installId, status) index: the
        `find_one_and_update` this replaces read every draft of every install on the embedded
        server, once per mail."""
        drafts = self.store["drafts"]
        sending = await drafts.find({"installId": install_id, "status": "sending"}).to_list(None)
        approved = await drafts.find({"installId": install_id, "status": "approved"}).to_list(None)
        mine = [d for d in sending if d.get("sendingRun") == run_id]
        return [d for d in (*mine, *approved) if d.get("recipientEmail")]
