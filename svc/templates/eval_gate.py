"""Where evals (svc/evals, docs/evals.md) meet the template lifecycle: the publish gate's shape,
and a scorecard shown with the published version it scored."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from svc.core import Document, Store
from svc.identity import Principal

# Asked before a publish with the record being published: refuses it (Conflict) when a required
# suite fails; answers the scorecard summary the version is published with (or None).
PublishGate = Callable[[Principal, Document], Awaitable["dict[str, Any] | None"]]


async def note_scorecard(store: Store, template_id: str, version: int, card: dict[str, Any]) -> None:
    """A scorecard of a published version: shown with it (the template while that version is
    current, and the version's snapshot)."""
    current = {"_id": template_id, "status": "published", "version": version}
    await store["templates"].update_one(current, {"$set": {"evalScorecard": card}})
    await store["template_versions"].update_one(
        {"_id": f"{template_id}:{version}"}, {"$set": {"evalScorecard": card}}
    )
