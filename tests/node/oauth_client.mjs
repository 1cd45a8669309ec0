// The official TypeScript SDK client (1.x) against a proxy that is an OAuth resource server,
// authorizing itself: its ClientCredentialsProvider, given only a client id and secret, takes
// the proxy's 401, follows WWW-Authenticate to the Protected Resource Metadata, finds the
// issuer's metadata, asks the token endpoint for a client-credentials token for the resource
// (RFC 8707) and retries. This script never fetches a token: it only watches, through the
// transport's `fetch`, what the SDK sends.
//
// flow:    tools/list; a tool call with progress notifications whose stream the proxy closes
//          mid-call (the SDK resumes it with Last-Event-ID); test_reconnection, resumed too.
// refresh: a call; the stored token replaced by one the proxy refuses (as if revoked), so the
//          SDK gets a new one on the 401 and goes on in the same session; then a new transport
//          with a new provider and the same session id takes over a call the first left
//          mid-stream, resuming its stream from the last event id it saw.
//
// Usage: node oauth_client.mjs <mcp-url> <client-id> <client-secret> <issuer> flow|refresh
// Prints one JSON line with what it saw; exits non-zero on any failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ClientCredentialsProvider } from "@modelcontextprotocol/sdk/client/auth-extensions.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";
import { check, within } from "./checks.mjs";

const [url, clientId, clientSecret, issuer, mode] = process.argv.slice(2);

// Every request the SDK makes, in order: method, URL, status, and what a token request asked.
const trail = [];
function watchedFetch(input, init) {
  const headers = new Headers(init?.headers);
  const entry = { method: init?.method ?? "GET", url: String(input) };
  if (headers.has("authorization")) entry.scheme = headers.get("authorization").split(" ")[0];
  if (headers.has("last-event-id")) entry.lastEventId = headers.get("last-event-id");
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

function provider() {
  return new ClientCredentialsProvider({ clientId, clientSecret, expectedIssuer: issuer, scope: "mcp:tools" });
}

function transportFor(authProvider, sessionId) {
  return new StreamableHTTPClientTransport(new URL(url), {
    authProvider,
    sessionId,
    fetch: watchedFetch,
    reconnectionOptions: {
      initialReconnectionDelay: 100,
      maxReconnectionDelay: 1000,
      reconnectionDelayGrowFactor: 1.5,
      maxRetries: 5,
    },
  });
}

const text = (result) => result.content.map((c) => c.text ?? "").join("\n");
const tokenRequests = () => trail.filter((e) => e.grant !== undefined);

const first = provider();
const client = new Client({ name: "sdk-oauth", version: "1.0.0" });
const transport = transportFor(first);
const errors = [];
transport.onerror = (error) => errors.push(String(error));
await within(20000, client.connect(transport), "the authorized initialize");
const sessionId = transport.sessionId;
check(typeof sessionId === "string" && sessionId.length > 0, "a session id");
check(first.tokens()?.access_token, "the provider holds a token after connecting");
const report = { sessionId };

if (mode === "flow") {
  report.tools = (await client.listTools()).tools.map((t) => t.name).sort();
  let progress = 0;
  const progressed = await within(
    20000,
    client.callTool({ name: "progress", arguments: { steps: 4, delay_ms: 250 } }, CallToolResultSchema, {
      onprogress: () => (progress += 1),
    }),
    "the progress call",
  );
  report.progressText = text(progressed);
  report.progress = progress;
  report.resumed = text(
    await within(20000, client.callTool({ name: "test_reconnection", arguments: {} }), "the resumed call"),
  );
  report.resumes = trail.filter((e) => e.lastEventId !== undefined && e.status === 200).length;
  await transport.terminateSession();
  check(transport.sessionId === undefined, "the session is terminated");
  await client.close();
} else if (mode === "refresh") {
  report.before = text(await client.callTool({ name: "echo", arguments: { text: "first token" } }));
  const firstToken = first.tokens().access_token;

  // The proxy refuses the stored token from now on (its signature no longer verifies): the SDK
  // must get a new one on the 401 and retry, in the same session.
  const [header, payload, signature] = firstToken.split(".");
  const refused = `${header}.${payload}.${signature.slice(0, -4)}AAAA`;
  first.saveTokens({ ...first.tokens(), access_token: refused });
  report.after = text(await client.callTool({ name: "echo", arguments: { text: "second token" } }));
  const secondToken = first.tokens().access_token;
  check(secondToken !== refused && secondToken !== firstToken, "the SDK fetched a new token");
  check(transport.sessionId === sessionId, "the same session after the refresh");
  report.refusedWith = trail.find((e) => e.status === 401 && e.challenge?.includes("invalid_token"))?.challenge;

  // A call whose stream this client leaves after its first progress notification...
  let lastEventId;
  let seen = 0;
  let firstProgress;
  const progressed = new Promise((resolve) => (firstProgress = resolve));
  const abandoned = client
    .request({ method: "tools/call", params: { name: "progress", arguments: { steps: 3, delay_ms: 300 } } }, CallToolResultSchema, {
      onprogress: () => {
        seen += 1;
        firstProgress();
      },
      onresumptiontoken: (token) => (lastEventId = token),
    })
    .catch((error) => String(error));
  await within(10000, progressed, "the first progress notification");
  check(lastEventId, "an event id on the call's stream");
  await client.close();
  report.abandoned = await abandoned;

  // ...taken over by a new transport with a new provider (no token yet) and the session id.
  const second = provider();
  const next = new Client({ name: "sdk-oauth", version: "1.0.0" });
  const nextTransport = transportFor(second, sessionId);
  nextTransport.setProtocolVersion(transport.protocolVersion);
  await next.connect(nextTransport);
  check(nextTransport.sessionId === sessionId, "reconnected to the same session");
  // A request first, so the new provider has its token before the resumption: after a 401 on a
  // GET, the SDK (1.x, _authThenStart) reopens the stream without the Last-Event-ID it had.
  report.reconnected = (await next.listTools()).tools.length > 0;
  const thirdToken = second.tokens()?.access_token;
  check(thirdToken && thirdToken !== secondToken, "the new provider got a token of its own");
  // The SDK's resumption: no POST, a GET with Last-Event-ID whose answer stands for this request.
  const resumed = await within(
    20000,
    next.request({ method: "tools/call", params: { name: "progress", arguments: { steps: 3, delay_ms: 300 } } }, CallToolResultSchema, {
      resumptionToken: lastEventId,
    }),
    "the call resumed on the new transport",
  );
  report.resumedText = text(resumed);
  report.progressBeforeLeaving = seen;
  report.lastEventId = lastEventId;
  report.resumedWith = trail.find((e) => e.lastEventId === lastEventId);
  await nextTransport.terminateSession();
  await next.close();
  report.tokens = new Set([firstToken, secondToken, thirdToken]).size;
} else {
  throw new Error(`unknown mode ${mode}`);
}

const tokens = tokenRequests();
report.tokenRequests = tokens.length;
report.tokenRequest = tokens[0];
report.firstStatus = trail[0].status;
report.firstChallenge = trail[0].challenge;
report.discovery = trail.filter((e) => e.url.includes("/.well-known/")).map((e) => `${new URL(e.url).pathname} ${e.status}`);
report.unauthorized = trail.filter((e) => e.status === 401).length;
report.errors = errors;
console.log(JSON.stringify(report));
process.exit(0);
