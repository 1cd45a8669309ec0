"""The official Python MCP client (PyPI `mcp`) through the proxy.

Usage: python client.py <url>. Initializes with the legacy handshake (pinned: in `auto` mode the
client now finds the proxy's 2026-07-28 face, which has no resumable streams), calls a tool, subscribes and receives `resources/updated`, then
calls `test_reconnection`, whose stream the proxy closes mid-call: the client must resume it with
Last-Event-ID on its own. Prints one JSON line; exits non-zero on any failure.
"""

import asyncio
import json
import sys
import warnings

from mcp import Client

# resources/subscribe is deprecated in 2026-07-28, but it is what legacy servers offer.
warnings.filterwarnings("ignore", message="resources/subscribe is removed")


async def main(url: str) -> None:
    updates: asyncio.Queue[str] = asyncio.Queue()

    async def on_message(message) -> None:
        if isinstance(message, Exception):
            print(f"transport error: {message!r}", file=sys.stderr)
            return
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            await updates.put(str(root.params.uri))

    async with Client(url, mode="legacy", message_handler=on_message) as client:
        echoed = await client.call_tool("echo", {"text": "from python"})
        text = echoed.content[0].text
        assert text == "from python", text

        await client.subscribe_resource("demo://counter")
        await client.call_tool("counter", {})
        updated = await asyncio.wait_for(updates.get(), 10)
        assert updated == "demo://counter", updated

        resumed = await asyncio.wait_for(client.call_tool("test_reconnection", {}), 20)
        resumed_text = resumed.content[0].text
        assert resumed_text == "Reconnection test completed", resumed_text

    print(json.dumps({"ok": True, "echoed": text, "updated": updated, "resumed": resumed_text}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
