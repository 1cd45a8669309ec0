// A 2026-07-28 MCP server written with the official TypeScript server package
// (`@modelcontextprotocol/server` 2.x, `createMcpHandler` with `legacy: "reject"`: an `initialize`
// is refused), served over Streamable HTTP on 127.0.0.1 with plain `node:http`.
// Tools: `echo`; `progress` (a few progress notifications, then its answer); `greet` (asks the
// user's name through input_required, answers "Hello, <name>!"); `touch` (changes the resource
// `note://current` and publishes notifications/resources/updated for it); `slow` (answers after
// `ms` milliseconds).
// Usage: node modern_server.mjs. Prints one line, the endpoint's URL, once it listens; exits when
// its stdin closes or on SIGTERM.
import http from "node:http";
import {
  McpServer,
  acceptedContent,
  createMcpHandler,
  fromJsonSchema,
  inputRequired,
} from "@modelcontextprotocol/server";

const NOTE = "note://current";
let note = { version: 0, text: "nothing yet" };

const schema = (properties, required = []) =>
  fromJsonSchema({ type: "object", properties, required });
const text = (value) => ({ content: [{ type: "text", text: value }] });

function server() {
  const mcp = new McpServer(
    { name: "typescript-modern-server", version: "1.0.0" },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
      },
      instructions: "A 2026-07-28 server of the official TypeScript SDK.",
    },
  );
  mcp.registerTool(
    "echo",
    { description: "Echoes its text", inputSchema: schema({ text: { type: "string" } }, ["text"]) },
    async ({ text: said }) => text(said),
  );
  mcp.registerTool(
    "progress",
    {
      description: "Reports `steps` progress notifications, then answers",
      inputSchema: schema({ steps: { type: "integer" } }, ["steps"]),
    },
    async ({ steps }, ctx) => {
      const progressToken = ctx.mcpReq._meta?.progressToken;
      for (let step = 1; step <= steps; step++) {
        if (progressToken !== undefined) {
          await ctx.mcpReq.notify({
            method: "notifications/progress",
            params: { progressToken, progress: step, total: steps, message: `step ${step}` },
          });
        }
      }
      return text(`done after ${steps} steps`);
    },
  );
  mcp.registerTool(
    "greet",
    { description: "Asks the user's name, then greets them", inputSchema: schema({}) },
    async (_args, ctx) => {
      const answered = acceptedContent(ctx.mcpReq.inputResponses, "name");
      if (typeof answered?.name !== "string") {
        return inputRequired({
          inputRequests: {
            name: inputRequired.elicit({
              message: "What is your name?",
              requestedSchema: {
                type: "object",
                properties: { name: { type: "string" } },
                required: ["name"],
              },
            }),
          },
          requestState: "greet-1",
        });
      }
      const state = ctx.mcpReq.requestState();
      if (state !== "greet-1") {
        throw new Error(`the requestState came back as ${JSON.stringify(state)}`);
      }
      return text(`Hello, ${answered.name}!`);
    },
  );
  mcp.registerTool(
    "touch",
    {
      description: `Changes ${NOTE} and notifies its subscribers`,
      inputSchema: schema({ text: { type: "string" } }, ["text"]),
    },
    async ({ text: written }) => {
      note = { version: note.version + 1, text: written };
      handler.notify.resourceUpdated(NOTE);
      return text(`version ${note.version}`);
    },
  );
  mcp.registerTool(
    "slow",
    {
      description: "Answers after `ms` milliseconds",
      inputSchema: schema({ ms: { type: "integer" } }, ["ms"]),
    },
    async ({ ms }) => {
      await new Promise((resolve) => setTimeout(resolve, ms));
      return text(`slept ${ms} ms`);
    },
  );
  mcp.registerResource(
    "note",
    NOTE,
    { description: "A note the `touch` tool changes", mimeType: "text/plain" },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: note.text }] }),
  );
  return mcp;
}

const handler = createMcpHandler(server, {
  legacy: "reject",
  onerror: (error) => console.error(`modern_server: ${error.message}`),
});

// node:http → the handler's fetch face (what `toNodeHandler` of `@modelcontextprotocol/node` does).
const listener = http.createServer(async (req, res) => {
  const aborted = new AbortController();
  res.on("close", () => aborted.abort());
  try {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = chunks.length > 0 ? Buffer.concat(chunks) : undefined;
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      for (const each of [value].flat()) headers.append(name, each);
    }
    const request = new Request(new URL(req.url, `http://${req.headers.host}`), {
      method: req.method,
      headers,
      body: req.method === "GET" || req.method === "HEAD" ? undefined : body,
      signal: aborted.signal,
    });
    const response = await handler.fetch(request);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.flushHeaders();
    if (response.body) {
      for await (const chunk of response.body) res.write(chunk);
    }
    res.end();
  } catch (error) {
    if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
    res.end(String(error));
  }
});

function stop() {
  listener.closeAllConnections();
  listener.close();
  handler.close().finally(() => process.exit(0));
}
process.on("SIGTERM", stop);
process.stdin.on("end", stop);
process.stdin.on("close", stop);
process.stdin.resume();

listener.listen(0, "127.0.0.1", () => {
  console.log(`http://127.0.0.1:${listener.address().port}/mcp`);
});
