// The official TypeScript SDK client against a virtual server composing the demo (stdio, as
// "demo"), server-everything (stdio, as "everything") and the demo's 2026-07-28 mode over HTTP
// (as "remote"): one session, every member's tools, resources, prompts and completions; a
// subscription's update from one member; an elicitation of a member's answered by the client;
// each member's own state; a stream the proxy closes mid-call resumed.
// Usage: node virtual_client.mjs <url>
// Prints one JSON line with what it saw; exits non-zero on any failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  ElicitRequestSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { check, watchingResumptions, within } from "./checks.mjs";

const [url] = process.argv.slice(2);

// The statuses of the SDK's resumptions: its GETs with Last-Event-ID.
const { resumptions, fetch: watchedFetch } = watchingResumptions();

const client = new Client(
  { name: "sdk-through-virtual-server", version: "1.0.0" },
  { capabilities: { elicitation: {} } },
);
let elicited;
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  elicited = request.params.message;
  return { action: "accept", content: { name: "Ada", check: true, email: "ada@example.com", integer: 7 } };
});
let notifyUpdate;
const updated = new Promise((resolve) => (notifyUpdate = resolve));
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => notifyUpdate(n.params.uri));

const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: watchedFetch });
await client.connect(transport);
const server = client.getServerVersion();
const instructions = client.getInstructions() ?? "";

const tools = (await client.listTools()).tools.map((t) => t.name);
for (const name of ["demo__echo", "everything__echo", "remote__echo", "demo__counter", "remote__counter"]) {
  check(tools.includes(name), `${name} is listed (${tools})`);
}
check(!tools.includes("echo"), "no tool without its member");

const text = (result) => result.content[0].text;
const echoes = {
  demo: text(await client.callTool({ name: "demo__echo", arguments: { text: "to demo" } })),
  everything: text(await client.callTool({ name: "everything__echo", arguments: { message: "to everything" } })),
  remote: text(await client.callTool({ name: "remote__echo", arguments: { text: "to remote" } })),
};

// Each member's state is its own: two counters.
const counters = [];
for (const name of ["demo__counter", "demo__counter", "remote__counter"]) {
  counters.push(text(await client.callTool({ name, arguments: {} })));
}

// Resources of two members whose URIs share a scheme (demo://).
const resources = [];
let cursor;
do {
  const page = await client.listResources(cursor ? { cursor } : {});
  resources.push(...page.resources.map((r) => r.uri));
  cursor = page.nextCursor;
} while (cursor);
check(resources.includes("demo://greeting"), `the demo's resources are listed (${resources.length})`);
const everythingResource = resources.find((uri) => uri.startsWith("demo://resource/"));
check(everythingResource, "server-everything's resources are listed");
const greeting = (await client.readResource({ uri: "demo://greeting" })).contents[0].text;
const templated = (await client.readResource({ uri: "demo://resource/dynamic/text/3" })).contents[0].text;
const document = (await client.readResource({ uri: everythingResource })).contents[0].uri;

// Prompts, and a completion of a member's prompt argument.
const prompts = (await client.listPrompts()).prompts.map((p) => p.name);
check(prompts.includes("demo__greet") && prompts.includes("everything__completable-prompt"), `prompts (${prompts})`);
const prompt = (await client.getPrompt({ name: "demo__greet", arguments: { name: "Ada" } })).messages[0].content.text;
const completed = (
  await client.complete({
    ref: { type: "ref/prompt", name: "everything__completable-prompt" },
    argument: { name: "department", value: "Eng" },
  })
).completion.values;

// A subscription's update from one member.
await client.subscribeResource({ uri: "demo://counter" });
await client.callTool({ name: "demo__counter", arguments: {} });
const update = await within(10000, updated, "notifications/resources/updated");

// A member's elicitation reaches this client, and its answer goes back to that member.
const elicitation = await within(
  20000,
  client.callTool({ name: "everything__trigger-elicitation-request", arguments: {} }),
  "the elicitation call",
);
const elicitationText = JSON.stringify(elicitation.content);

// Progress on a stream the proxy closes mid-call: resumed with Last-Event-ID.
let progress = 0;
const progressed = await within(
  20000,
  client.callTool({ name: "demo__progress", arguments: { steps: 4, delay_ms: 250 } }, CallToolResultSchema, {
    onprogress: () => (progress += 1),
  }),
  "the progress call",
);

// An unknown tool is refused by the virtual server, naming it.
let unknown;
try {
  await client.callTool({ name: "nobody__echo", arguments: {} });
} catch (error) {
  unknown = String(error.message);
}

await transport.terminateSession();
await client.close();
console.log(
  JSON.stringify({
    ok: true,
    server: server?.name,
    instructions,
    tools: tools.length,
    echoes,
    counters,
    greeting,
    templated,
    document,
    prompt,
    completed,
    update,
    elicited,
    elicitationText,
    progress,
    progressText: text(progressed),
    resumptions,
    unknown,
  }),
);
