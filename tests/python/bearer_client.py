"""The official Python MCP client (PyPI `mcp`) with a bearer token, in front of a proxy that is an
OAuth resource server.

Usage: python bearer_client.py <url> legacy|2026-07-28 [token]. Every request carries
`Authorization: Bearer <token>` (the headers of the httpx client handed to the transport). In
`legacy` mode the client initializes with the handshake; pinned to `2026-07-28` it has none.
Lists tools, calls echo and a tool that reports progress. Prints one JSON line: what it saw and
the HTTP statuses the proxy answered, or, when it is refused, the error it raised too (`failed`).
Any wait is bounded: a client that hangs ends with a `timed out` error in its report.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def session(url: str, mode: str, token: str | None, report: dict) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def record(response: httpx2.Response) -> None:
        report["statuses"].append(response.status_code)
        challenge = response.headers.get("www-authenticate")
        if challenge:
            report["challenge"] = challenge

    async with httpx2.AsyncClient(headers=headers, event_hooks={"response": [record]}) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode) as client:
            report["version"] = client.protocol_version
            tools = await client.list_tools()
            report["tools"] = sorted(tool.name for tool in tools.tools)
            echoed = await client.call_tool("echo", {"text": f"python {mode}"})
            report["echoed"] = echoed.content[0].text
            progress = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(value)

            result = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
            report["progressText"] = result.content[0].text
            report["progress"] = progress


async def main(url: str, mode: str, token: str | None) -> None:
    report: dict = {"statuses": []}
    try:
        await asyncio.wait_for(session(url, mode, token, report), 10)
    except TimeoutError:
        report["failed"] = "timed out"
    except Exception as error:  # noqa: BLE001 - the report says what was raised
        report["failed"] = describe(error)
    print(json.dumps(report))


def describe(error: BaseException) -> str:
    """The error, and those of an exception group, one per line."""
    if isinstance(error, BaseExceptionGroup):
        return "\n".join(describe(inner) for inner in error.exceptions)
    return f"{type(error).__name__}: {error}"


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
