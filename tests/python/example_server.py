"""A stdio MCP server made with the official Python SDK (MCPServer), as its examples make one:
one tool, `add`, that answers the sum of its two numbers."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("python-example")


@server.tool()
def add(a: int, b: int) -> str:
    """Adds two numbers."""
    return str(a + b)


if __name__ == "__main__":
    server.run()
