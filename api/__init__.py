"""The HTTP front end (aiohttp): routing, credentials, rate limits, error bodies.

The application is `api.app.create_app`. Nothing is imported here: the `svc` command's modules
live in this package too, and `svc --version` or an HTTP-client command such as `svc templates
export` should not pay for the whole application (Ray, aiohttp, every capability package).
"""
