// The official TypeScript client of the 2026-07-28 revision (@modelcontextprotocol/client 2.x)
// through the proxy, in front of a legacy server: pinned to 2026-07-28 or in auto mode (it must
// pick 2026-07-28). Calls tools, reads a resource, listens for an update, answers an
// elicitation and a sampling request through input_required, counts on the server twice.
// In front of npm server-everything (stdio) it uses that server's tools instead.
// Usage: node modern_client.mjs <url> pin|auto demo|everything [credential]
// Prints one JSON line with what it saw; exits non-zero on any failure.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { check, within } from "./checks.mjs";

const [url, mode, server, credential] = process.argv.slice(2);

const client = new Client(
  { name: "modern-through-proxy", version: "1.0.0" },
  {
    capabilities: { elicitation: {}, sampling: {}, roots: {} },
    versionNegotiation: mode === "auto" ? { mode: "auto" } : { mode: { pin: "2026-07-28" } },
  },
);
client.setRequestHandler("elicitation/create", async () => ({
  action: "accept",
  content: { name: "Ada" },
}));
client.setRequestHandler("sampling/createMessage", async () => ({
  role: "assistant",
  content: { type: "text", text: "Paris" },
  model: "test-model",
}));
client.setRequestHandler("roots/list", async () => ({ roots: [{ uri: "file:///work", name: "work" }] }));
let notifyUpdate;
const updated = new Promise((resolve) => (notifyUpdate = resolve));
client.setNotificationHandler("notifications/resources/updated", (n) => notifyUpdate(n.params.uri));

const headers = credential ? { Authorization: `Bearer ${credential}` } : {};
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
await client.connect(transport);
const report = { version: client.getNegotiatedProtocolVersion() };

const text = (result) => result.content.map((c) => c.text ?? "").join("\n");
const call = async (name, args = {}) => text(await client.callTool({ name, arguments: args }));
const tools = (await client.listTools()).tools.map((t) => t.name);
check(tools.includes("echo"), `echo is listed (${tools})`);

if (server === "demo") {
  report.echoed = await call("echo", { text: "modern ts" });
  report.read = (await client.readResource({ uri: "demo://greeting" })).contents[0].text;
  const subscription = await client.listen({ resourceSubscriptions: ["demo://counter"] });
  report.honored = subscription.honoredFilter;
  report.counts = [await call("counter")];
  report.updated = await within(10000, updated, "resources/updated on the listen");
  report.counts.push(await call("counter"));
  await subscription.close();
  report.elicited = await call("test_input_required_result_elicitation");
  report.sampled = await call("test_input_required_result_sampling");
  report.multiple = await call("test_input_required_result_multiple_inputs");
} else {
  report.echoed = await call("echo", { message: "modern ts" });
  const resources = (await client.listResources()).resources;
  check(resources.length > 0, "resources are listed");
  const uri = resources[0].uri;
  report.read = (await client.readResource({ uri })).contents[0].text?.slice(0, 40);
  const subscription = await client.listen({ resourceSubscriptions: [uri] });
  report.honored = subscription.honoredFilter;
  await call("toggle-subscriber-updates");
  report.updated = await within(10000, updated, "resources/updated on the listen");
  await subscription.close();
  report.elicited = await call("trigger-elicitation-request");
  report.sampled = await call("trigger-sampling-request", { prompt: "The capital of France?", maxTokens: 10 });
}
await client.close();
console.log(JSON.stringify(report));
