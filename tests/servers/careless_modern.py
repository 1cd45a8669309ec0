"""A 2026-07-28 stdio server that asks the client for input without looking at the client's
declared capabilities (a careless server): `server/discover`, and one tool, `ask`, whose every
call answers input_required with an elicitation. Standard library only."""

import json
import sys

META = "io.modelcontextprotocol/serverInfo"
INFO = {"name": "careless-modern", "version": "1"}


def answer(request, result):
    result.setdefault("_meta", {})[META] = INFO
    print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}), flush=True)


for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request or "method" not in request:
        continue
    method = request["method"]
    if method == "server/discover":
        answer(request, {"resultType": "complete", "supportedVersions": ["2026-07-28"],
                         "capabilities": {"tools": {}}, "serverInfo": INFO})
    elif method == "tools/list":
        tool = {"name": "ask", "inputSchema": {"type": "object"}}
        answer(request, {"resultType": "complete", "tools": [tool]})
    elif method == "tools/call":
        question = {"method": "elicitation/create", "params": {
            "mode": "form", "message": "Your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}}
        answer(request, {"resultType": "input_required", "requestState": "asked",
                         "inputRequests": {"name": question}})
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": request["id"],
                          "error": {"code": -32601, "message": f"Method not found: {method}"}}),
              flush=True)
