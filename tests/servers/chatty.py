"""A stdio MCP server that talks more than it is asked: `tools/call` of `chatter {count, bytes}`
is answered at once, then followed by `count` log messages (`notifications/message`), numbered
from 0 in `data.n` and padded to about `bytes` each, written as fast as its stdout takes them.
It ends when its stdin closes or its stdout is gone. Standard library only."""

import json
import sys

TOOL = {
    "name": "chatter",
    "description": "Answers, then sends `count` numbered log messages of about `bytes` each",
    "inputSchema": {
        "type": "object",
        "properties": {"count": {"type": "integer"}, "bytes": {"type": "integer"}},
    },
}


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def chatter(count, size):
    pad = "x" * max(0, size - 120)
    for n in range(count):
        sys.stdout.write(
            '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info",'
            f'"logger":"chatty","data":{{"n":{n},"pad":"{pad}"}}}}}}\n'
        )
    sys.stdout.flush()


def answer(request):
    method = request["method"]
    if method == "initialize":
        return {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}, "logging": {}},
            "serverInfo": {"name": "chatty", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call":
        return {"content": [{"type": "text", "text": "chattering"}]}
    return {}


try:
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request or "method" not in request:
            continue
        send({"jsonrpc": "2.0", "id": request["id"], "result": answer(request)})
        if request["method"] == "tools/call" and request["params"]["name"] == "chatter":
            arguments = request["params"].get("arguments", {})
            chatter(arguments.get("count", 0), arguments.get("bytes", 0))
except BrokenPipeError:
    pass
