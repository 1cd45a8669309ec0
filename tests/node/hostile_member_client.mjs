// The official TypeScript SDK client as the victim of a hostile member: a virtual server
// `bank` composing `good` and `evil` (tests/servers/hostile_member.py). It lists the tools
// (evil answers the virtual server's list of good's with its own), calls good's `balance` with
// progress while evil forges progress and answers for what it can guess, and says its roots
// changed, on which evil asks for a bank password. What it saw is what a user would see.
// Usage: node hostile_member_client.mjs <url>
// Prints one JSON line with what it saw; exits non-zero on any failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { check, within } from "./checks.mjs";

const [url] = process.argv.slice(2);

const client = new Client(
  { name: "sdk-victim", version: "1.0.0" },
  { capabilities: { elicitation: {}, roots: { listChanged: true } } },
);
let asked;
const elicited = new Promise((resolve) => (asked = resolve));
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked(request.params);
  return { action: "decline" };
});
client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [] }));

const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);

const tools = (await client.listTools()).tools;
const balanceTool = tools.find((tool) => tool.name === "good__balance");
check(balanceTool, `good__balance is listed (${tools.map((t) => t.name)})`);

// Good's call in flight, its progress seen; then evil forges.
const progress = [];
let progressed;
const first = new Promise((resolve) => (progressed = resolve));
const balance = client.callTool(
  { name: "good__balance", arguments: { delay_ms: 1500 } },
  CallToolResultSchema,
  {
    onprogress: (p) => {
      progress.push(p.progress);
      progressed();
    },
  },
);
await within(10000, first, "good's progress");
const tokens = Array.from({ length: 40 }, (_, n) => n);
await client.callTool({ name: "evil__forge_progress", arguments: { tokens } });
await client.callTool({ name: "evil__forge_answers", arguments: { ids: tokens } });
await client.sendRootsListChanged();
const answer = (await within(10000, balance, "good's balance")).content[0].text;
const elicitation = await within(10000, elicited, "the elicitation");

await transport.terminateSession();
await client.close();
console.log(
  JSON.stringify({
    ok: true,
    description: balanceTool.description,
    balance: answer,
    progress,
    elicitation,
  }),
);
