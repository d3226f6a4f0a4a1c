"""The peer's graph (bench/peer.py): one node that makes ONE chat-completions call.

Loaded by LangGraph's own server (`langgraph dev`, scripts/langgraph_peer.py) inside its venv
under `.cache/peer/`, never by the service: `langchain_openai` and `langgraph` are installed
there only. The model is the bench's fake (tests/fakes/llm.py, openai-chat wire format) at
PEER_MODEL_URL with the key PEER_MODEL_KEY, the same fake and latency our runs call.
"""

from __future__ import annotations

import os
from typing import TypedDict

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    task: str
    answer: str


# Built at import, as an app would: the client is created once, not per run.
model = ChatOpenAI(
    model="gpt-5.4-mini",  # what our providerB:code-small sends
    base_url=os.environ["PEER_MODEL_URL"],
    api_key=os.environ["PEER_MODEL_KEY"],
    max_retries=0,
    timeout=120,
)


async def lead(state: State) -> State:
    """The single agent: its prompt and the task, one model call, the answer kept in the state."""
    reply = await model.ainvoke([("system", "Lead."), ("user", state.get("task") or "go")])
    return {"answer": str(reply.content)}


graph = StateGraph(State).add_node("lead", lead).add_edge(START, "lead").add_edge("lead", END).compile()
