// The official TypeScript SDK client in a web page, in headless Debian Chromium, served from
// origins other than the proxy's. Bundles browser_page.mjs with esbuild, serves it on
// 127.0.0.1 (a port of its own) and prints `{"port": P}`; then reads the proxy's MCP URL from
// stdin and loads the page from `http://<host>:P` for each host named on the command line
// (Chromium resolves them all to 127.0.0.1, so each is an origin of its own and none is a
// loopback name). Prints one JSON line: each host's page report and the browser's console
// errors. Bounded: past its deadline it closes Chromium and the server and exits non-zero.
// Usage: node browser_client.mjs <host>...   (stdin: the proxy's URL)
import { createServer } from "node:http";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { build, stop as stopEsbuild } from "esbuild";
import { chromium } from "playwright-core";

const DEADLINE_MS = 45_000;
const PAGE_MS = 20_000;
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const hosts = process.argv.slice(2);
if (hosts.length === 0) throw new Error("usage: node browser_client.mjs <host>...");

const bundled = await build({
  entryPoints: [fileURLToPath(new URL("./browser_page.mjs", import.meta.url))],
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  write: false,
  logLevel: "error",
});
const script = bundled.outputFiles[0].contents;
await stopEsbuild();
const html = '<!doctype html><meta charset="utf-8"><title>MCP page</title><script type="module" src="/page.js"></script>';

const server = createServer((request, response) => {
  const [status, type, body] =
    request.url === "/page.js"
      ? [200, "text/javascript", script]
      : request.url === "/"
        ? [200, "text/html; charset=utf-8", html]
        : request.url === "/favicon.ico"
          ? [204, "image/x-icon", ""]
          : [404, "text/plain", "not found\n"];
  response.writeHead(status, { "content-type": type, "cache-control": "no-store" });
  response.end(body);
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const port = server.address().port;

let browser;
async function cleanUp() {
  await browser?.close().catch(() => {});
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
}
const deadline = setTimeout(() => {
  console.error(`browser_client: past its ${DEADLINE_MS} ms deadline`);
  cleanUp().finally(() => process.exit(2));
}, DEADLINE_MS);

console.log(JSON.stringify({ port }));
const lines = createInterface({ input: process.stdin });
const proxyUrl = (await lines[Symbol.asyncIterator]().next()).value?.trim();
lines.close();
if (!proxyUrl) throw new Error("no proxy URL on stdin");

const report = {};
try {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    timeout: PAGE_MS,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      `--host-resolver-rules=${hosts.map((host) => `MAP ${host} 127.0.0.1`).join(", ")}`,
    ],
  });
  for (const host of hosts) {
    const context = await browser.newContext();
    const page = await context.newPage();
    const consoleErrors = [];
    page.on("console", (message) => {
      if (message.type() === "error") consoleErrors.push(message.text());
    });
    page.on("pageerror", (error) => consoleErrors.push(String(error)));
    await page.goto(`http://${host}:${port}/#${encodeURIComponent(proxyUrl)}`, { timeout: PAGE_MS });
    await page.waitForFunction(() => window.report !== undefined, null, { timeout: PAGE_MS });
    const result = await page.evaluate(() => Promise.race([
      window.report,
      new Promise((resolve) => setTimeout(() => resolve({ timedOut: true }), 15_000)),
    ]));
    report[host] = { origin: `http://${host}:${port}`, ...result, consoleErrors };
    await context.close();
  }
} finally {
  clearTimeout(deadline);
  await cleanUp();
}
console.log(JSON.stringify(report));
