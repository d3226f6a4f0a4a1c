"""The HTTP front end (aiohttp): routing, credentials, rate limits, error bodies."""

from api.app import create_app

__all__ = ["create_app"]
