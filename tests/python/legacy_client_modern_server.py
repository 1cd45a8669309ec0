"""The official Python MCP client (PyPI `mcp`) in legacy mode through the proxy in front of
tests/node/modern_server.mjs, a 2026-07-28 server of the official TypeScript SDK.

Usage: python legacy_client_modern_server.py <url> [resume]. Initializes with the legacy
handshake, calls `echo`, `progress` (collecting its progress notifications), `greet` (answering
the elicitation the server asks for through input_required), subscribes to note://current and
calls `touch` (waiting for notifications/resources/updated on the GET stream); with `resume`,
calls `slow`, whose stream the proxy cuts mid-call: the client must resume it with Last-Event-ID
on its own. Prints one JSON line; exits non-zero on any failure.
"""

import asyncio
import json
import logging
import sys
import warnings

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

# resources/subscribe is deprecated in 2026-07-28, but it is what a legacy session offers.
warnings.filterwarnings("ignore", message="resources/subscribe is removed")

NOTE = "note://current"


class LateAnswers(logging.Handler):
    """Counts the answers the client dropped because their request was already answered."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "unknown/late request id" in record.getMessage():
            self.count += 1


async def main(url: str, resume: bool) -> None:
    updates: asyncio.Queue[str] = asyncio.Queue()
    errors: list[str] = []
    asked: list[str] = []
    resumptions = 0

    async def count_resumptions(request) -> None:
        nonlocal resumptions
        if request.method == "GET" and "last-event-id" in request.headers:
            resumptions += 1

    async def on_message(message) -> None:
        if isinstance(message, Exception):
            errors.append(repr(message))
            return
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            await updates.put(str(root.params.uri))

    async def on_elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Grace"})

    late = LateAnswers()
    dispatcher = logging.getLogger("mcp.shared.jsonrpc_dispatcher")
    dispatcher.setLevel(logging.DEBUG)
    dispatcher.addHandler(late)
    dispatcher.propagate = False

    report = {}
    async with httpx2.AsyncClient(event_hooks={"request": [count_resumptions]}) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(
            transport, mode="legacy", message_handler=on_message, elicitation_callback=on_elicit
        ) as client:
            report["version"] = client.protocol_version
            report["server"] = client.server_info.name if client.server_info else None
            report["tools"] = sorted(tool.name for tool in (await client.list_tools()).tools)

            echoed = await client.call_tool("echo", {"text": "from python"})
            report["echoed"] = echoed.content[0].text

            progress: list[float] = []

            async def on_progress(value, total, message) -> None:
                progress.append(value)

            counted = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
            report["progress"] = progress
            report["progressed"] = counted.content[0].text

            greeted = await asyncio.wait_for(client.call_tool("greet", {}), 10)
            report["asked"] = asked
            report["elicited"] = greeted.content[0].text

            await client.subscribe_resource(NOTE)
            await client.call_tool("touch", {"text": "changed by python"})
            report["updated"] = await asyncio.wait_for(updates.get(), 10)
            read = await client.read_resource(NOTE)
            report["read"] = read.contents[0].text

            if resume:
                slow = await asyncio.wait_for(client.call_tool("slow", {"ms": 1500}), 20)
                report["resumed"] = slow.content[0].text
    report["resumptions"] = resumptions
    report["duplicates"] = late.count
    report["errors"] = errors
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:] == ["resume"]))
