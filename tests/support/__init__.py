"""Helpers shared by the test modules: one definition of each, acting like a real client over HTTP."""
