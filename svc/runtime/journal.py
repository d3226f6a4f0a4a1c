"""A run's journal, and the recorder that writes it: one write per step, replay on resume.

Every model call and tool call of a run has a stable key, built from where it happens: the agent
invocation's path (the root agent `lead`; a delegate called by the lead's 3rd model answer's 2nd
tool call `lead/m2.t1>helper`; pipeline step 0 `p0.writer`), then `m<n>` for its n-th model call
and `m<n>.t<j>` for the j-th tool call of that answer. Replaying the same definition with the
same recorded answers visits the same keys in the same order, so:

- a model answer is journalled (with its tokens) before the run acts on it, and a tool call's
  result after it returns; the recorder queues both and writes them in ONE update of the run's
  document before the next action (a model call, or a tool call's side effect), together with the
  events a watcher needs (`ledger.step`);
- a run resumed by a new copy of the actor, or continued after a gate in the middle of an agent's
  loop, runs its team again from the start with `Journal` answering every call it recorded: no
  completed model or tool call is made twice, and no recorded token is counted twice;
- what was in flight when a crash hit is the only uncertainty: a model call is made again, an
  idempotent request is sent again, and a non-idempotent one marked `sending` stops the run at
  the outcome-unknown gate (svc/runtime/agent_loop.py).

Entries (`kind`): `model` (text, tool calls, tokens, model, attempt), `lost` (an attempt whose
answer died with its actor), `tool` (the result given to the model, with its security-log fields),
`sending` (a non-idempotent request about to leave: a crash after it means "outcome unknown"),
`agent` (an invocation's end: status, output, tokens: the step record), `decision` (how a person
settled a gate at a tool call).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from svc.core import Document, Store, iso, utcnow
from svc.runtime import ledger
from svc.runtime.faults import CrashPoints

# Text kept per entry: enough to rebuild any conversation a provider returns (a model answer is
# at most a few tens of thousands of tokens); a longer one is cut, and a resume then replays the
# cut text (documented in docs/runtime.md).
MAX_TEXT = 200_000


class RunTaken(Exception):
    """This copy of the actor no longer runs the run (superseded, cancelled or settled elsewhere):
    it stops without writing anything more."""


class ReplayMismatch(Exception):
    """The journal does not fit the team being resumed (its definition changed under a paused run,
    or an entry is corrupt): the run fails with this message instead of guessing."""


def model_key(path: str, n: int) -> str:
    return f"{path}/m{n}"


def tool_key(path: str, n: int, j: int) -> str:
    return f"{path}/m{n}.t{j}"


def delegate_path(tool: str, agent_key: str) -> str:
    """The path of the invocation a delegate tool call (`tool`, its key) starts."""
    return f"{tool}>{agent_key}"


def cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= MAX_TEXT else text[:MAX_TEXT]


class Journal:
    """What earlier attempts of the run recorded, by (kind, key)."""

    def __init__(self, entries: list[Document]) -> None:
        self.entries: dict[tuple[str, str], Document] = {}
        self.lost: dict[str, int] = {}
        for entry in entries:
            kind, key = entry.get("kind"), entry.get("key")
            if not isinstance(kind, str) or not isinstance(key, str):
                raise ReplayMismatch("Cannot resume the run: its journal has an unreadable entry")
            if kind == "lost":
                self.lost[key] = self.lost.get(key, 0) + 1
            else:
                self.entries[(kind, key)] = entry

    def get(self, kind: str, key: str) -> Document | None:
        return self.entries.get((kind, key))

    def attempts(self, key: str) -> int:
        """How many attempts of this model call were lost before (the next one is that plus one)."""
        return self.lost.get(key, 0)

    def decision(self, key: str) -> Document | None:
        return self.entries.get(("decision", key))


@dataclass
class Totals:
    """Tokens of the run so far (recorded and pending)."""

    input: int = 0
    output: int = 0


@dataclass
class RunRecorder:
    """The writer of one run while this actor runs it: queues journal entries, events and tokens,
    and writes them in one fenced update (`flush`) before the run acts; the run's end or pause
    takes what is still queued into its own write (`take`)."""

    store: Store
    run_id: str
    incarnation: str
    journal: Journal
    seq: int  # events already stored
    totals: Totals
    publish: Callable[[list[dict[str, Any]]], None] = lambda events: None
    resumed: bool = False  # adopted after a crash: the first live model call notes a lost attempt
    log: list[Document] = field(default_factory=list)  # the whole journal, in order
    _entries: list[Document] = field(default_factory=list)
    _events: list[Document] = field(default_factory=list)
    _in: int = 0
    _out: int = 0
    current_agent: str | None = None
    crash: CrashPoints = field(default_factory=CrashPoints)

    @classmethod
    def for_run(
        cls,
        store: Store,
        run: Document,
        incarnation: str,
        publish: Callable[[list[dict[str, Any]]], None],
        resumed: bool = False,
    ) -> RunRecorder:
        totals = Totals(int(run.get("inputTokens") or 0), int(run.get("outputTokens") or 0))
        journal = list(run.get("journal") or [])
        return cls(
            store,
            run["_id"],
            incarnation,
            Journal(journal),
            int(run.get("seq") or 0),
            totals,
            publish,
            resumed,
            journal,
        )

    # ---- queueing ------------------------------------------------------------------------------

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        """Queue an event; it is stored (and shown to watchers) with the next write."""
        self._events.append(ledger.event(kind, data))

    def note(self, entry: Document) -> None:
        """Queue a journal entry (it also answers a replay from now on)."""
        entry = {**entry, "at": entry.get("at") or utcnow()}
        self._entries.append(entry)
        self.log.append(entry)
        if entry["kind"] != "lost":
            self.journal.entries[(entry["kind"], entry["key"])] = entry

    def tokens(self, tokens_in: int, tokens_out: int) -> None:
        self._in += tokens_in
        self._out += tokens_out
        self.totals.input += tokens_in
        self.totals.output += tokens_out

    @property
    def pending(self) -> bool:
        return bool(self._entries)

    # ---- writing -------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Write what is queued in one fenced update, before the run acts; RunTaken when this copy
        no longer runs the run. Events alone wait for the next write."""
        if not self._entries:
            return
        entries, events, tokens_in, tokens_out = self.take()
        written = await ledger.step(
            self.store,
            self.run_id,
            self.incarnation,
            journal=entries,
            events=events,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
        )
        if not written:
            raise RunTaken(self.run_id)
        self.crash.reached("after-step")
        self.stored(events)

    def take(self) -> tuple[list[Document], list[Document], int, int]:
        """What is queued, for a write of the caller's (the end, a pause); the queue is emptied."""
        taken = (self._entries, self._events, self._in, self._out)
        self._entries, self._events, self._in, self._out = [], [], 0, 0
        return taken

    def stored(self, events: list[Document]) -> None:
        """The events were written: number them and show them to the run's live watchers."""
        wired = [wire(self.seq + n, e) for n, e in enumerate(events, 1)]
        self.seq += len(events)
        if wired:
            self.publish(wired)


class ScratchRecorder(RunRecorder):
    """A recorder that stores nothing: a run of the runtime's test endpoint, which has no
    document (its journal answers only its own replays)."""

    async def flush(self) -> None:
        self.take()


def scratch(run_id: str) -> RunRecorder:
    """A recorder for a run that is not stored (POST /api/runtime/webhook/test)."""
    return ScratchRecorder(None, run_id, "", Journal([]), 0, Totals())  # type: ignore[arg-type]


def wire(seq: int, event: Document) -> dict[str, Any]:
    """An event as clients see it: `{seq, type, at, ...data}`."""
    return {"seq": seq, "type": event["type"], "at": iso(event["at"]), **(event.get("data") or {})}
