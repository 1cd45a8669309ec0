// A WebSocket MCP client from another ecosystem: Node 22's built-in WebSocket (WHATWG API).
// Starts a protocol-level session, works in it, closes the connection, resumes the session on a
// new connection with catch-up, and prints one JSON report.
//
//   node ws_client.mjs ws://127.0.0.1:PORT/mcp

const url = process.argv[2];

function open(url) {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, "mcp");
    const inbox = [];
    const waiters = [];
    socket.addEventListener("message", (event) => {
      const message = JSON.parse(event.data);
      const waiter = waiters.findIndex((w) => w.matches(message));
      if (waiter >= 0) waiters.splice(waiter, 1)[0].resolve(message);
      else inbox.push(message);
    });
    socket.addEventListener("open", () => resolve({ socket, next }));
    socket.addEventListener("error", () => reject(new Error(`cannot connect to ${url}`)));
    function next(matches) {
      const at = inbox.findIndex(matches);
      if (at >= 0) return Promise.resolve(inbox.splice(at, 1)[0]);
      return new Promise((resolve) => waiters.push({ matches, resolve }));
    }
  });
}

let id = 0;
async function request(connection, method, params) {
  const mine = ++id;
  connection.socket.send(JSON.stringify({ jsonrpc: "2.0", id: mine, method, params }));
  const reply = await connection.next((m) => m.id === mine && !("method" in m));
  if (reply.error) throw new Error(`${method}: ${JSON.stringify(reply.error)}`);
  return reply.result;
}

const timer = setTimeout(() => {
  console.error("timed out");
  process.exit(2);
}, 15000);

const first = await open(url);
const { sessionId } = await request(first, "session/start", {});
const initialized = await request(first, "initialize", {
  protocolVersion: "2025-11-25",
  capabilities: {},
  clientInfo: { name: "node-websocket", version: "1" },
});
first.socket.send(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }));
const echo = await request(first, "tools/call", { name: "echo", arguments: { text: "over ws" } });
await request(first, "tools/call", { name: "emit_updates", arguments: { uris: ["n://1"], count: 1 } });
const update = await first.next((m) => m.method === "notifications/resources/updated");
const protocol = first.socket.protocol;
first.socket.close();

const second = await open(url);
const resumed = await request(second, "session/resume", {
  sessionId,
  lastSessionEventId: update.params.sessionEventId,
});
const again = await request(second, "tools/call", { name: "echo", arguments: { text: "resumed" } });
second.socket.close();
clearTimeout(timer);

console.log(
  JSON.stringify({
    protocol,
    sessionId,
    announced: initialized.capabilities.experimental?.sessions?.resume === true,
    echo: echo.content[0].text,
    sessionEventId: update.params.sessionEventId,
    resumed,
    again: again.content[0].text,
  }),
);
