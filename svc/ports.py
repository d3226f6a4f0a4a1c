"""What the domain needs from the outside, as Protocols (implemented in actors/, plugins/, ...)."""

from __future__ import annotations

from typing import Protocol


class Runtime(Protocol):
    """The actor runtime (Ray) as the domain sees it."""

    async def ping(self) -> bool:
        """True when the runtime answers."""
        ...
