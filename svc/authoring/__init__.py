"""Assisted authoring: generate, assist and test-chat over the model catalogue."""

from svc.authoring.authoring import AssistBody, Authoring, GenerateBody, TestChatBody

__all__ = [
    "AssistBody",
    "Authoring",
    "GenerateBody",
    "TestChatBody",
]
