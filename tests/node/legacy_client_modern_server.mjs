// The official TypeScript SDK 1.32.2 client (a legacy-era client: initialize, sessions,
// resources/subscribe) through the proxy in front of tests/node/modern_server.mjs, a 2026-07-28
// server: calls `echo`, `progress` (collecting its progress notifications), `greet` (answering
// the elicitation the server asks for through input_required), subscribes to note://current and
// calls `touch` (waiting for notifications/resources/updated on the GET stream), and with
// "resume" calls `slow`, whose stream the proxy cuts mid-call: the client resumes it with
// Last-Event-ID on its own.
// Usage: node legacy_client_modern_server.mjs <url> [resume]
// Prints one JSON line with what it saw; exits non-zero on any failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  ElicitRequestSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { check, within } from "./checks.mjs";

const [url, mode] = process.argv.slice(2);
const NOTE = "note://current";

// Counts the streams the client resumed (a GET with Last-Event-ID), and those that resumed the
// stream of the cut call (an event id seen on that call's stream).
let resumptions = 0;
let resumedTheCutCall = 0;
const cutCallEventIds = new Set();
const countingFetch = (input, init) => {
  const lastEventId = new Headers(init?.headers).get("last-event-id");
  if ((init?.method ?? "GET") === "GET" && lastEventId !== null) {
    resumptions += 1;
    if (cutCallEventIds.has(lastEventId)) resumedTheCutCall += 1;
  }
  return fetch(input, init);
};

const client = new Client(
  { name: "ts-sdk-1.x-legacy-client", version: "1.0.0" },
  { capabilities: { elicitation: {} } },
);
const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: countingFetch });
const errors = [];
client.onerror = (error) => errors.push(String(error));

let notifyUpdate;
const updated = new Promise((resolve) => (notifyUpdate = resolve));
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => notifyUpdate(n.params.uri));
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  return { action: "accept", content: { name: "Ada" } };
});

await client.connect(transport);
check(typeof transport.sessionId === "string", "the proxy gave a session id");
check(client.getServerVersion()?.name === "typescript-modern-server", "the server's name");

// Every response the transport hands over, by id: a replayed answer would show up twice.
const responses = new Map();
const deliver = transport.onmessage;
transport.onmessage = (message, extra) => {
  if ("id" in message && !("method" in message)) {
    responses.set(message.id, (responses.get(message.id) ?? 0) + 1);
  }
  deliver(message, extra);
};

const tools = (await client.listTools()).tools.map((t) => t.name).sort();

const echo = await client.callTool({ name: "echo", arguments: { text: "through the proxy" } });
const echoed = echo.content[0].text;

const progress = [];
const counted = await client.callTool({ name: "progress", arguments: { steps: 3 } }, undefined, {
  onprogress: (p) => progress.push(p.progress),
});
const progressed = counted.content[0].text;

const greeted = await within(10000, client.callTool({ name: "greet", arguments: {} }), "greet");
const elicited = greeted.content[0].text;

await client.subscribeResource({ uri: NOTE });
await client.callTool({ name: "touch", arguments: { text: "changed" } });
const uri = await within(10000, updated, "notifications/resources/updated");
const read = (await client.readResource({ uri: NOTE })).contents[0].text;

let resumed, slowId;
if (mode === "resume") {
  const before = new Set(responses.keys());
  const slow = await within(
    20000,
    client.callTool({ name: "slow", arguments: { ms: 1500 } }, undefined, {
      onresumptiontoken: (id) => cutCallEventIds.add(id),
    }),
    "the cut call",
  );
  resumed = slow.content[0].text;
  slowId = [...responses.keys()].find((id) => !before.has(id));
}

await transport.terminateSession();
await client.close();
console.log(
  JSON.stringify({
    tools,
    echoed,
    progress,
    progressed,
    asked,
    elicited,
    updated: uri,
    read,
    resumed,
    resumedTimes: slowId === undefined ? 0 : responses.get(slowId),
    duplicates: [...responses.values()].filter((n) => n > 1).length,
    resumptions,
    resumedTheCutCall,
    errors,
  }),
);
