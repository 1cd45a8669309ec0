"""The official Python MCP client (PyPI `mcp`) against a virtual server composing the demo
("demo"), server-everything ("everything") and the demo's 2026-07-28 mode over HTTP ("remote").

Usage: python virtual_client.py <url>. Lists the tools and calls one of each member, reads a
resource of two members whose URIs share a scheme, gets a member's prompt. Prints one JSON line;
exits non-zero on any failure.
"""

import asyncio
import json
import sys

from mcp import Client


async def main(url: str) -> None:
    async with Client(url, mode="legacy") as client:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        for name in ("demo__echo", "everything__echo", "remote__echo"):
            assert name in tools, (name, tools)
        echoes = [
            (await client.call_tool("demo__echo", {"text": "py"})).content[0].text,
            (await client.call_tool("everything__echo", {"message": "py"})).content[0].text,
            (await client.call_tool("remote__echo", {"text": "py"})).content[0].text,
        ]
        assert echoes == ["py", "Echo: py", "py"], echoes
        greeting = (await client.read_resource("demo://greeting")).contents[0].text
        templated = (await client.read_resource("demo://resource/dynamic/text/5")).contents[0].text
        assert "5" in templated, templated
        prompt = await client.get_prompt("demo__greet", {"name": "Py"})
        text = prompt.messages[0].content.text
        assert "Py" in text, text
    print(json.dumps({"ok": True, "tools": len(tools), "echoes": echoes, "greeting": greeting}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
