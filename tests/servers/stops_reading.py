"""A stdio MCP server that answers `initialize` and `ping`, and at any other request stops
reading its stdin for good (it sleeps until killed): writes to it block once the pipe's buffer
is full. Appends its process id to the file its argument names. Standard library only."""

import json
import os
import sys
import time

with open(sys.argv[1], "a") as pids:
    pids.write(f"{os.getpid()}\n")

for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request or "method" not in request:
        continue
    if request["method"] == "initialize":
        result = {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stops-reading", "version": "1"},
        }
    elif request["method"] == "ping":
        result = {}
    else:
        while True:
            time.sleep(3600)
    print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}), flush=True)
