"""The official Python MCP client (PyPI `mcp`) as a 2026-07-28 client through the proxy.

Usage: python modern_client.py <url> <mode> [credential]. `mode` is `2026-07-28` (pinned) or
`auto` (the client discovers the server and must pick 2026-07-28). Calls a tool, lists tools,
reads a resource, calls the demo's counter twice (the same principal: one server) while
listening for its updates, and answers an elicitation and a sampling request through
input_required. Prints one JSON line; exits non-zero on any failure.
"""

import asyncio
import json
import sys

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def on_elicit(context, params):
    return types.ElicitResult(action="accept", content={"name": "Grace"})


async def on_sample(context, params):
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="Lyon"), model="test-model"
    )


async def main(url: str, mode: str, credential: str | None) -> None:
    headers = {"Authorization": f"Bearer {credential}"} if credential else {}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(
            transport, mode=mode, elicitation_callback=on_elicit, sampling_callback=on_sample
        ) as client:
            report = {"version": client.protocol_version}
            echoed = await client.call_tool("echo", {"text": "modern python"})
            report["echoed"] = echoed.content[0].text
            tools = await client.list_tools()
            report["tools"] = sorted(tool.name for tool in tools.tools)
            read = await client.read_resource("demo://greeting")
            report["read"] = read.contents[0].text
            counts = []
            if credential:
                # A listen hears what the principal's other calls cause (without a principal,
                # each request has a server of its own: nothing to hear).
                async with client.listen(resource_subscriptions=["demo://counter"]) as listening:
                    for _ in range(2):
                        counted = await client.call_tool("counter", {})
                        counts.append(counted.content[0].text)
                    event = await asyncio.wait_for(listening.__anext__(), 10)
                    report["updated"] = str(getattr(event, "uri", event))
            else:
                for _ in range(2):
                    counted = await client.call_tool("counter", {})
                    counts.append(counted.content[0].text)
            report["counts"] = counts
            elicited = await client.call_tool("test_input_required_result_elicitation", {})
            report["elicited"] = elicited.content[0].text
            sampled = await client.call_tool("test_input_required_result_sampling", {})
            report["sampled"] = sampled.content[0].text
            report["server"] = client.server_info.name if client.server_info else None
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
