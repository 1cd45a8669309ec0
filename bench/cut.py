#!/usr/bin/env python3
"""A POST stream cut mid-call, then resumed with Last-Event-ID: what a target replays.

The demo's `progress` tool sends ten progress notifications 100 ms apart, then answers. The
client reads the POST's stream until three notifications came (or 300 ms passed, for a target
that answers with JSON only at the end), drops the connection, waits until the call is over,
and asks for the rest with GET + `Last-Event-ID` (the last event id it saw, as the spec's
resumption says). Reported: what came before the cut, what the resume replayed, whether the
answer arrived.

    bench/cut.py URL     one target serving the demo at URL
"""

import http.client
import json
import socket
import sys
import time
import urllib.parse

STEPS, DELAY_MS = 10, 100
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           "MCP-Protocol-Version": "2025-06-18"}


def post(url, body, session=None, timeout=10):
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    headers = dict(HEADERS, **({"Mcp-Session-Id": session} if session else {}))
    connection.request("POST", parts.path, json.dumps(body), headers)
    return connection, connection.getresponse()


def events(response, until):
    """SSE events of `response` as (id, message) until `until(message)` or the stream ends."""
    event_id, data = None, []
    while True:
        line = response.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and data:
            message = json.loads("\n".join(data))
            yield event_id, message
            data = []
            if until(message):
                return


def cut_and_resume(url):
    connection, answer = post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "cut", "version": "1"}}})
    session = answer.getheader("Mcp-Session-Id")
    answer.read()
    connection.close()
    connection, answer = post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    answer.read()
    connection.close()

    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "progress", "arguments": {"steps": STEPS, "delay_ms": DELAY_MS},
        "_meta": {"progressToken": "cut"}}}
    before, last_id, answered = 0, None, False
    try:
        connection, answer = post(url, call, session, timeout=0.3)
        if "text/event-stream" in (answer.getheader("Content-Type") or ""):
            for event_id, message in events(answer, lambda m: False):
                last_id = event_id or last_id
                if message.get("method") == "notifications/progress":
                    before += 1
                if "result" in message:
                    answered = True
                if before >= 3 or answered:
                    break
        else:
            answered = "result" in json.loads(answer.read())
    except (socket.timeout, TimeoutError):
        pass
    connection.close()  # the cut
    time.sleep(STEPS * DELAY_MS / 1000 + 0.5)

    parts = urllib.parse.urlsplit(url)
    resumed = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    headers = {"Accept": "text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    if session:
        headers["Mcp-Session-Id"] = session
    if last_id:
        headers["Last-Event-ID"] = last_id
    resumed.request("GET", parts.path, headers=headers)
    answer = resumed.getresponse()
    replayed, resumed_answer = 0, False
    if answer.status == 200 and "text/event-stream" in (answer.getheader("Content-Type") or ""):
        try:
            for _, message in events(answer, lambda m: m.get("id") == 2):
                if message.get("method") == "notifications/progress":
                    replayed += 1
                if message.get("id") == 2 and "result" in message:
                    resumed_answer = True
        except (socket.timeout, TimeoutError):
            pass
    resumed.close()
    return {"session": bool(session), "event_ids": last_id is not None, "before_cut": before,
            "answered_before_cut": answered, "resume_status": answer.status, "replayed_progress": replayed,
            "replayed_answer": resumed_answer, "lost": STEPS - before - replayed}


if __name__ == "__main__":
    print(json.dumps(cut_and_resume(sys.argv[1])))
