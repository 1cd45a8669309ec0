"""The official Python MCP client (PyPI `mcp`) in 2026-07-28 mode on a server the proxy offers
state handles for: lists the tools, opens two handles with the open tool, counts with the demo's
counter in each (and once without a handle), closes one and calls with it again.

Usage: python handles_client.py <url> <credential>. Prints one JSON line; exits non-zero on any
failure.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def text(result) -> str:
    return result.content[0].text


async def main(url: str, credential: str) -> None:
    headers = {"Authorization": f"Bearer {credential}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="2026-07-28") as client:
            report = {"version": client.protocol_version}
            tools = (await client.list_tools()).tools
            report["tools"] = sorted(tool.name for tool in tools)
            counter = next(tool for tool in tools if tool.name == "counter")
            report["counter_arguments"] = sorted(counter.input_schema.get("properties", {}))
            handles = []
            for _ in range(2):
                opened = await client.call_tool("open_session_handle", {})
                handles.append(opened.structured_content["handle"])
            first, second = handles
            counts = {"first": [], "second": [], "none": []}
            for name, handle in [("first", first), ("first", first), ("second", second),
                                 ("none", None), ("first", first)]:
                arguments = {"session_handle": handle} if handle else {}
                counts[name].append(text(await client.call_tool("counter", arguments)))
            report["counts"] = counts
            closed = await client.call_tool("close_session_handle", {"session_handle": first})
            report["closed"] = [closed.is_error, text(closed)]
            after = await client.call_tool("counter", {"session_handle": first})
            report["after_close"] = [after.is_error, text(after)]
            report["distinct"] = first != second
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
