// Drives Debian's chromium (headless, via playwright-core) against a real server started by
// tests/tests/e2e/dashboard.rs:
//   node dashboard.mjs web <base-url> <token> <computer-id-prefix> <artifact-dir>
//   node dashboard.mjs app <base-url> <token> <computer-id-prefix> <artifact-dir>
// `web` loads /dashboard and uses the page's own HTTP bridge; `app` plays an MCP Apps host
// (spec 2026-01-26): it reads the ui:// resource from the server, renders it in a sandboxed
// iframe under the spec's default CSP, answers the postMessage protocol and forwards the
// view's tools/call to the real server. Exits non-zero with a message on any failure.

import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const [mode, base, token, prefix, artifacts] = process.argv.slice(2);
if (!["web", "app"].includes(mode) || !base || !token || !prefix || !artifacts) {
  console.error("usage: node dashboard.mjs (web|app) BASE_URL TOKEN ID_PREFIX ARTIFACT_DIR");
  process.exit(2);
}
mkdirSync(artifacts, { recursive: true });
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const TIMEOUT = 60_000;

function check(cond, message) {
  if (!cond) throw new Error(message);
}

/** One MCP request to the real server (stateless 2026-07-28), as a host would send it. */
async function mcp(method, params) {
  const meta = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {
      extensions: { "io.modelcontextprotocol/ui": { mimeTypes: ["text/html;profile=mcp-app"] } },
    },
  };
  const headers = {
    "content-type": "application/json",
    accept: "application/json",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": method,
    authorization: "Bearer " + token,
  };
  if (params && params.name) headers["mcp-name"] = params.name;
  if (params && params.uri) headers["mcp-name"] = params.uri;
  const resp = await fetch(base + "/mcp", {
    method: "POST",
    headers,
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params: { ...params, _meta: meta } }),
  });
  const msg = await resp.json();
  if (msg.error) throw new Error(`${method}: ${JSON.stringify(msg.error)}`);
  return msg.result;
}

async function web(page) {
  const cspErrors = [];
  page.on("console", (m) => {
    if (/Content[- ]Security[- ]Policy/i.test(m.text())) cspErrors.push(m.text());
  });
  const resp = await page.goto(base + "/dashboard");
  check(resp.ok(), `/dashboard answered ${resp.status()}`);
  check(
    (resp.headers()["content-security-policy"] || "").includes("script-src 'sha256-"),
    "the page comes with a hash-based CSP",
  );
  // No token yet: the page asks for one (401 from /mcp) and keeps it out of the URL.
  await page.locator("#auth").waitFor({ state: "visible" });
  await page.fill("#token", token);
  await page.click("#token-save");
  await page.locator("#auth").waitFor({ state: "hidden" });
  check(!page.url().includes(token), "the token is not in the URL");
  check(
    (await page.evaluate(() => sessionStorage.getItem("msc-dashboard-token"))) === token,
    "the token is kept in session storage",
  );

  // Error path first: a bad id shows the server's actionable message where the person looks.
  await page.fill("#new-id", "Bad_ID!");
  await page.click("#create");
  await page.locator("#create-error").filter({ hasText: /computer_id/ }).waitFor();

  const id = `${prefix}-web`;
  await page.fill("#new-id", id);
  await page.click("#create");
  const row = page.locator(`#computers tr[data-id="${id}"]`);
  await row.waitFor();
  check((await row.getAttribute("aria-selected")) === "true", "the new computer is selected");
  check(await page.locator("#create-error").evaluate((e) => e.textContent === ""), "the old error is cleared");

  await page.fill("#command", "echo hello; echo oops >&2; exit 3");
  await page.press("#command", "Control+Enter");
  await page.locator("#stdout").filter({ hasText: "hello" }).waitFor();
  check((await page.textContent("#stderr")).includes("oops"), "stderr is shown");
  check((await page.textContent("#exit")) === "3", "the exit code is shown");
  check(/\d+ ms/.test(await page.textContent("#duration")), "the duration is shown");
  await page.locator("#history li code").filter({ hasText: "echo hello" }).first().waitFor();

  // A timed-out command is marked as such.
  await page.fill("#command", "echo slow; sleep 30");
  await page.fill("#timeout", "1");
  await page.click("#run");
  await page.locator("#markers").filter({ hasText: "timed out" }).waitFor();
  await page.fill("#timeout", "");

  // The file browser: list through exec, view, upload (PUT /v1/files), download (GET).
  await page.fill("#command", "mkdir -p /tmp/fb/sub && printf 'abc\\n' > /tmp/fb/a.txt && echo made-fb");
  await page.click("#run");
  await page.locator("#stdout").filter({ hasText: "made-fb" }).waitFor();
  await files(page, "/tmp/fb");

  // Jobs (where the server serves them): one an agent started shows with its command;
  // Tail follows its output, Stop ends it.
  const listed = await mcp("tools/list", {});
  if (listed.tools.some((t) => t.name === "terminal_job")) await jobs(page, id);
  else check(await page.locator("#jobs-section").isHidden(), "no jobs section without the jobs tools");

  await page.screenshot({ path: `${artifacts}/dashboard-web.png`, fullPage: true });
  await page.emulateMedia({ colorScheme: "dark" });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: `${artifacts}/dashboard-web-dark-narrow.png`, fullPage: true });
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 1280, height: 800 });

  // Delete asks first; Cancel keeps it, Yes removes it.
  await page.click("#delete");
  await page.locator("#confirm").waitFor({ state: "visible" });
  await page.click("#confirm-no");
  check(await row.isVisible(), "cancel keeps the computer");
  await page.click("#delete");
  await page.click("#confirm-yes");
  await row.waitFor({ state: "detached" });
  check(cspErrors.length === 0, "CSP violations: " + cspErrors.join("; "));
}

/** The jobs view on computer `id`: an agent's job listed, followed by Tail (which takes
 * nothing from the agent), ended by Stop (the agent still reads the end). */
async function jobs(page, id) {
  const started = await mcp("tools/call", {
    name: "terminal_execute",
    arguments: { computer_id: id, command: "sleep 1; echo tick; sleep 300", yield_ms: 0 },
  });
  check(started.structuredContent && started.structuredContent.running === true, "the job runs");
  await page.click("#refresh");
  const jobRow = page.locator("#jobs li").filter({ hasText: "sleep 300" });
  await jobRow.waitFor();
  await jobRow.locator("button", { hasText: "Tail" }).click();
  await page.locator("#job-out").filter({ hasText: "tick" }).waitFor();
  // Watching took nothing: the agent's own read still gets the tick.
  const jobId = started.structuredContent.job_id;
  const read = await mcp("tools/call", { name: "terminal_job", arguments: { computer_id: id, job_id: jobId, wait_ms: 0 } });
  check(read.structuredContent && read.structuredContent.stdout.includes("tick"), "Tail took the agent's output: " + JSON.stringify(read));
  await jobRow.locator("button", { hasText: "Stop" }).click();
  await page.locator("#job-meta").filter({ hasText: "exit 143" }).waitFor();
  check((await page.locator("#job-out").textContent()).includes("tick"), "Tail shows output already read");
  // The end waits for the agent's read, which forgets the job.
  const last = await mcp("tools/call", { name: "terminal_job", arguments: { computer_id: id, job_id: jobId, wait_ms: 2000 } });
  check(last.structuredContent && last.structuredContent.running === false && last.structuredContent.exit_code === 143, "the agent reads the end: " + JSON.stringify(last));
}

/** Lists `dir` in the file browser of `ui` (a page or a frame), views, uploads, downloads. */
async function files(ui, dir, page = ui) {
  await ui.locator("#dir").fill(dir);
  await ui.locator("#ls").click();
  const row = ui.locator("#files tr").filter({ hasText: "a.txt" });
  await row.waitFor();
  await ui.locator("#files tr").filter({ hasText: "sub/" }).waitFor();
  await row.locator("button", { hasText: "View" }).click();
  await ui.locator("#file-text").filter({ hasText: "abc" }).waitFor();
  check((await ui.locator("#file-meta").textContent()).includes("4 bytes"), "the size is shown");
  // Bytes that are not text, every value, through the upload.
  const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  await ui.locator("#upload").setInputFiles({ name: "bin.dat", mimeType: "application/octet-stream", buffer: bytes });
  const up = ui.locator("#files tr").filter({ hasText: "bin.dat" });
  await up.waitFor();
  check((await up.textContent()).includes("256"), "the uploaded file has 256 bytes: " + (await up.textContent()));
  const [dl] = await Promise.all([
    page.waitForEvent("download"),
    up.locator("button", { hasText: "Download" }).click(),
  ]);
  const path = await dl.path();
  const { readFileSync } = await import("node:fs");
  check(Buffer.compare(readFileSync(path), bytes) === 0, "the download is the uploaded bytes");
  check(dl.suggestedFilename() === "bin.dat", "download name " + dl.suggestedFilename());
  // A directory that is not there: the shell's words.
  await ui.locator("#dir").fill(dir + "/nope");
  await ui.locator("#ls").click();
  await ui.locator("#files-error").filter({ hasText: /nope/ }).waitFor();
}

async function app(page) {
  // What a host does: discover the tool's UI resource and read it from the server.
  const tools = await mcp("tools/list", {});
  const dash = tools.tools.find((t) => t.name === "computer_dashboard");
  check(dash, "computer_dashboard is listed");
  const uri = dash._meta && dash._meta.ui && dash._meta.ui.resourceUri;
  check(uri === "ui://kilntainers/computers", "resourceUri: " + uri);
  const read = await mcp("resources/read", { uri });
  const res = read.contents[0];
  check(res.mimeType === "text/html;profile=mcp-app", "mime " + res.mimeType);
  // The spec's default CSP for a resource that declares no domains.
  const csp =
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; " +
    "img-src 'self' data:; media-src 'self' data:; connect-src 'none';";
  const html = res.text.replace(
    "<head>",
    `<head><meta http-equiv="Content-Security-Policy" content="${csp}">`,
  );

  await page.exposeFunction("forwardToServer", (method, params) => mcp(method, params));
  await page.setContent(`<!doctype html><html><body>
    <iframe id="view" sandbox="allow-scripts allow-downloads" style="width:1000px;height:900px;border:1px solid #888"></iframe>
    <script>
      window.log = [];
      const view = document.getElementById("view");
      const send = (m) => view.contentWindow.postMessage(m, "*");
      let initialized = false;
      window.teardown = () => new Promise((resolve) => {
        window.teardownResolve = resolve;
        send({ jsonrpc: "2.0", id: 9001, method: "ui/resource-teardown", params: { reason: "test over" } });
      });
      window.addEventListener("message", async (ev) => {
        if (ev.source !== view.contentWindow) return;
        const m = ev.data;
        window.log.push(m);
        if (m.id === 9001 && !m.method) { window.teardownResolve(m); return; }
        if (m.method === "ui/initialize") {
          send({ jsonrpc: "2.0", id: m.id, result: {
            protocolVersion: "2026-01-26",
            hostInfo: { name: "msc-test-host", version: "1.0.0" },
            hostCapabilities: { serverTools: {}, serverResources: {}, logging: {} },
            hostContext: { theme: "dark", displayMode: "inline", platform: "web",
                           containerDimensions: { width: 1000, maxHeight: 900 } } } });
        } else if (m.method === "ui/notifications/initialized") {
          initialized = true;
          // The model called computer_dashboard: the host shows its input and result.
          const result = await window.forwardToServer("tools/call", { name: "computer_dashboard", arguments: {} });
          send({ jsonrpc: "2.0", method: "ui/notifications/tool-input", params: { arguments: {} } });
          send({ jsonrpc: "2.0", method: "ui/notifications/tool-result", params: result });
        } else if (m.method === "tools/call" || m.method === "resources/read") {
          if (!initialized) { send({ jsonrpc: "2.0", id: m.id, error: { code: -32000, message: "not initialized" } }); return; }
          try {
            send({ jsonrpc: "2.0", id: m.id, result: await window.forwardToServer(m.method, m.params) });
          } catch (e) {
            send({ jsonrpc: "2.0", id: m.id, error: { code: -32000, message: String(e.message || e) } });
          }
        }
      });
      window.loadView = (html) => { view.srcdoc = html; };
    </script></body></html>`);
  const cspErrors = [];
  page.on("console", (m) => {
    if (/Content[- ]Security[- ]Policy/i.test(m.text())) cspErrors.push(m.text());
  });
  await page.evaluate((h) => window.loadView(h), html);
  const v = page.frameLocator("#view");
  await v.locator("#status").filter({ hasText: /connected to the host|updated/ }).waitFor();
  check(
    (await v.locator("html").getAttribute("data-theme")) === "dark",
    "the host's theme is applied",
  );

  const id = `${prefix}-app`;
  await v.locator("#new-id").fill(id);
  await v.locator("#new-temp").uncheck();
  await v.locator("#create").click();
  const row = v.locator(`#computers tr[data-id="${id}"]`);
  await row.waitFor();
  check((await row.textContent()).includes("permanent"), "a permanent computer is shown as such");
  await v.locator("#command").fill("echo hello-from-the-app");
  await v.locator("#command").press("Control+Enter");
  await v.locator("#stdout").filter({ hasText: "hello-from-the-app" }).waitFor();
  await v.locator("#command").fill("mkdir -p /tmp/fb/sub && printf 'abc\\n' > /tmp/fb/a.txt && echo made-fb");
  await v.locator("#run").click();
  await v.locator("#stdout").filter({ hasText: "made-fb" }).waitFor();
  await files(v, "/tmp/fb", page);
  await page.screenshot({ path: `${artifacts}/dashboard-app.png`, fullPage: true });
  await v.locator("#delete").click();
  await v.locator("#confirm-yes").click();
  await row.waitFor({ state: "detached" });

  const reply = await page.evaluate(() => window.teardown());
  check(JSON.stringify(reply.result) === "{}", "teardown answered {}: " + JSON.stringify(reply));
  const log = await page.evaluate(() => window.log);
  const first = log[0];
  check(first.method === "ui/initialize", "the view starts with ui/initialize");
  check(first.params.protocolVersion === "2026-01-26", "MCP Apps revision 2026-01-26");
  check(first.params.appInfo && first.params.appInfo.name && first.params.appInfo.version, "appInfo");
  check(first.params.appCapabilities, "appCapabilities");
  check(log.some((m) => m.method === "ui/notifications/initialized"), "initialized sent");
  check(log.some((m) => m.method === "ui/notifications/size-changed" && m.params.height > 0), "size-changed sent");
  const calls = log.filter((m) => m.method === "tools/call").map((m) => m.params.name);
  for (const t of ["computer_list", "computer_create", "terminal_execute", "computer_delete", "computer_file_read", "computer_file_write"]) {
    check(calls.includes(t), `the view called ${t} through the host: ${calls}`);
  }
  check(cspErrors.length === 0, "CSP violations: " + cspErrors.join("; "));
}

const browser = await chromium.launch({
  executablePath,
  headless: true,
  args: ["--no-sandbox", "--disable-background-networking", "--disable-dev-shm-usage", "--disable-gpu"],
});
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.setDefaultTimeout(TIMEOUT);
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  await (mode === "web" ? web(page) : app(page));
  check(pageErrors.length === 0, "page errors: " + pageErrors.join("; "));
  console.log(`${mode}: ok`);
} catch (e) {
  failed = true;
  console.error(`${mode}: ${e.stack || e}`);
  try {
    const pages = browser.contexts().flatMap((c) => c.pages());
    if (pages[0]) await pages[0].screenshot({ path: `${artifacts}/dashboard-${mode}-failure.png`, fullPage: true });
    if (pages[0] && mode === "app") {
      const log = await pages[0].evaluate(() => window.log);
      console.error("messages from the view:\n" + log.map((m) => JSON.stringify(m).slice(0, 300)).join("\n"));
    }
  } catch (_) { /* best effort */ }
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
