// The page of tests/node/browser_client.mjs, bundled for the browser at test time: the official
// TypeScript SDK client in a page, talking to the proxy at the URL after `#` (another origin).
// It connects, calls a tool, makes a call whose stream the proxy closes mid-call (the client
// resumes it with Last-Event-ID on its own), ends the session, and leaves what it saw in
// `window.report`; `{ connected: false, error }` when it could not connect.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL(decodeURIComponent(location.hash.slice(1)));

// The statuses of the client's resumptions: its GETs with Last-Event-ID.
const resumptions = [];
function watchedFetch(input, init) {
  const resuming = new Headers(init?.headers).has("last-event-id");
  return fetch(input, init).then((response) => {
    if (resuming) resumptions.push(response.status);
    return response;
  });
}

async function run() {
  const client = new Client({ name: "browser-page", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(url, {
    fetch: watchedFetch,
    // A header a page sets itself (never an ambient credential): the preflight must allow it.
    requestInit: { headers: { Authorization: "Bearer page-token" } },
  });
  try {
    await client.connect(transport);
  } catch (error) {
    return { connected: false, error: String(error) };
  }
  const sessionId = transport.sessionId;
  const protocolVersion = transport.protocolVersion;
  const tools = (await client.listTools()).tools.map((tool) => tool.name);
  const echo = await client.callTool({ name: "echo", arguments: { text: "from a page" } });
  const resumed = await client.callTool({ name: "test_reconnection", arguments: {} });
  await transport.terminateSession();
  const terminated = transport.sessionId === undefined;
  await client.close();
  return {
    connected: true,
    sessionId,
    protocolVersion,
    tools,
    echoed: echo.content[0].text,
    resumed: resumed.content[0].text,
    resumptions,
    terminated,
  };
}

window.report = run().catch((error) => ({ connected: true, error: String(error?.stack ?? error) }));
