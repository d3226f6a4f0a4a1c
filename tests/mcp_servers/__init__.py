"""MCP servers the tests run: our own small one (exact.py, built with the SDK's MCPServer, the
FastMCP of mcp 2.x) and the installers of real ones from the registries (scripts/mcp_servers.py)."""
