// The official TypeScript client of the 2026-07-28 revision (@modelcontextprotocol/client 2.x),
// pinned to 2026-07-28, against a proxy that is an OAuth resource server, authorizing itself
// with its ClientCredentialsProvider (client id and secret only: the 401, the Protected Resource
// Metadata, the issuer's metadata and the token request with its resource indicator are the
// SDK's). Lists tools, calls echo, a tool with progress notifications, and the demo's counter
// twice. This script never fetches a token: it watches, through the transport's `fetch`, what
// the SDK sends.
// Usage: node modern_oauth_client.mjs <mcp-url> <client-id> <client-secret> <issuer>
// Prints one JSON line with what it saw; exits non-zero on any failure.
import { Client, ClientCredentialsProvider, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { check, within } from "./checks.mjs";

const [url, clientId, clientSecret, issuer] = process.argv.slice(2);

const trail = [];
function watchedFetch(input, init) {
  const headers = new Headers(init?.headers);
  const entry = { method: init?.method ?? "GET", url: String(input) };
  if (headers.has("authorization")) entry.scheme = headers.get("authorization").split(" ")[0];
  if (entry.url.startsWith(issuer) && init?.body instanceof URLSearchParams) {
    entry.grant = init.body.get("grant_type");
    entry.resource = init.body.get("resource");
    entry.scope = init.body.get("scope");
  }
  trail.push(entry);
  return fetch(input, init).then((response) => {
    entry.status = response.status;
    const challenge = response.headers.get("www-authenticate");
    if (challenge) entry.challenge = challenge;
    return response;
  });
}

const provider = new ClientCredentialsProvider({ clientId, clientSecret, expectedIssuer: issuer, scope: "mcp:tools" });
const client = new Client(
  { name: "modern-oauth", version: "1.0.0" },
  { versionNegotiation: { mode: { pin: "2026-07-28" } } },
);
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: watchedFetch });
await within(20000, client.connect(transport), "connecting");

const text = (result) => result.content.map((c) => c.text ?? "").join("\n");
const call = async (name, args = {}, options) => text(await client.callTool({ name, arguments: args }, options));
const report = { version: client.getNegotiatedProtocolVersion() };
report.tools = (await within(20000, client.listTools(), "tools/list")).tools.map((t) => t.name);
check(report.tools.includes("echo"), `echo is listed (${report.tools})`);
check(provider.tokens()?.access_token, "the provider holds a token");
report.echoed = await call("echo", { text: "modern oauth" });
let progress = 0;
report.progressText = await within(
  20000,
  call("progress", { steps: 3 }, { onprogress: () => (progress += 1) }),
  "the progress call",
);
report.progress = progress;
report.counts = [await call("counter"), await call("counter")];
await client.close();

const tokens = trail.filter((e) => e.grant !== undefined);
report.tokenRequests = tokens.length;
report.tokenRequest = tokens[0];
report.firstStatus = trail[0].status;
report.firstChallenge = trail[0].challenge;
report.discovery = trail.filter((e) => e.url.includes("/.well-known/")).map((e) => `${new URL(e.url).pathname} ${e.status}`);
report.bearerRequests = trail.filter((e) => e.url === url && e.scheme === "Bearer" && e.status === 200).length;
report.unauthorized = trail.filter((e) => e.status === 401).length;
console.log(JSON.stringify(report));
