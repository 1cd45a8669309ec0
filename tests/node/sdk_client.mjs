// The official TypeScript SDK client through the proxy: initialize, call a tool, subscribe,
// receive resources/updated, terminate; with "resume", also a call whose stream the proxy
// closes mid-call (the client must resume it with Last-Event-ID on its own); with "progress"
// (demo), a call reporting progress, counted as it comes (on a stream the client may have to
// resume too). The report counts the resumptions the proxy answered (GET with Last-Event-ID).
// With "legacy", the client speaks the 2024-11-05 HTTP+SSE transport to <url> (the /sse path).
// Usage: node sdk_client.mjs <url> demo|everything [resume|legacy|progress[,...]]
// Prints one JSON line with what it saw; exits non-zero on any failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { CallToolResultSchema, ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { check, watchingResumptions, within } from "./checks.mjs";

const [url, server, mode] = process.argv.slice(2);
const modes = new Set((mode ?? "").split(",").filter(Boolean));
const legacy = modes.has("legacy");

// The statuses of the SDK's resumptions: its GETs with Last-Event-ID.
const { resumptions, fetch: watchedFetch } = watchingResumptions();

const client = new Client({ name: "sdk-through-proxy", version: "1.0.0" });
const transport = legacy
  ? new SSEClientTransport(new URL(url))
  : new StreamableHTTPClientTransport(new URL(url), { fetch: watchedFetch });
let notifyUpdate;
const updated = new Promise((resolve) => (notifyUpdate = resolve));
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => notifyUpdate(n.params.uri));

await client.connect(transport);
const sessionId = transport.sessionId;
check(legacy || (typeof sessionId === "string" && sessionId.length >= 22), "a proxy session id");

const tools = (await client.listTools()).tools.map((t) => t.name);
check(tools.includes("echo"), `echo is listed (${tools})`);

let echoed, subscribed;
if (server === "demo") {
  const result = await client.callTool({ name: "echo", arguments: { text: "hi" } });
  echoed = result.content[0].text;
  check(echoed === "hi", `echo answered ${echoed}`);
  subscribed = "demo://counter";
  await client.subscribeResource({ uri: subscribed });
  await client.callTool({ name: "counter", arguments: {} });
} else {
  const result = await client.callTool({ name: "echo", arguments: { message: "hi" } });
  echoed = result.content[0].text;
  check(echoed === "Echo: hi", `echo answered ${echoed}`);
  const resources = (await client.listResources()).resources;
  check(resources.length > 0, "resources are listed");
  subscribed = resources[0].uri;
  await client.subscribeResource({ uri: subscribed });
  await client.callTool({ name: "toggle-subscriber-updates", arguments: {} });
}
const uri = await within(10000, updated, "notifications/resources/updated");
check(uri === subscribed, `the update is for ${subscribed}, got ${uri}`);

let progress, progressText;
if (modes.has("progress")) {
  progress = 0;
  const result = await within(
    20000,
    client.callTool({ name: "progress", arguments: { steps: 4, delay_ms: 250 } }, CallToolResultSchema, {
      onprogress: () => (progress += 1),
    }),
    "the progress call",
  );
  progressText = result.content[0].text;
}

let resumed;
if (modes.has("resume")) {
  const result = await within(20000, client.callTool({ name: "test_reconnection", arguments: {} }), "the resumed call");
  resumed = result.content[0].text;
  check(resumed === "Reconnection test completed", `test_reconnection answered ${resumed}`);
}

if (!legacy) {
  await transport.terminateSession();
  check(transport.sessionId === undefined, "the session is terminated");
}
await client.close();
const resumes = resumptions.filter((status) => status === 200).length;
console.log(JSON.stringify({ ok: true, sessionId, echoed, updated: uri, resumed, progress, progressText, resumes, resumptions }));
