"""The official Python MCP client (PyPI `mcp`) as a 2026-07-28 client through the proxy.

Usage: python modern_client.py <url> <mode> [credential]. `mode` is `2026-07-28` (pinned) or
`auto` (the client discovers the server and must pick 2026-07-28). Calls a tool, lists tools,
reads a resource and calls the demo's counter twice (the same principal: one server). Prints one
JSON line; exits non-zero on any failure.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, mode: str, credential: str | None) -> None:
    headers = {"Authorization": f"Bearer {credential}"} if credential else {}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode) as client:
            report = {"version": client.protocol_version}
            echoed = await client.call_tool("echo", {"text": "modern python"})
            report["echoed"] = echoed.content[0].text
            tools = await client.list_tools()
            report["tools"] = sorted(tool.name for tool in tools.tools)
            read = await client.read_resource("demo://greeting")
            report["read"] = read.contents[0].text
            counts = []
            for _ in range(2):
                counted = await client.call_tool("counter", {})
                counts.append(counted.content[0].text)
            report["counts"] = counts
            report["server"] = client.server_info.name if client.server_info else None
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
