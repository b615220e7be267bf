// Issue 45's real-client matrix, Node side: the TypeScript MCP SDK v1
// (@modelcontextprotocol/sdk) and v2 (@modelcontextprotocol/client), driven through their
// public client APIs against the real server. One JSON line per check on stdout; exit 1
// when any check failed.
//
//   node matrix.mjs --client {sdk1,sdk2} --transport {stdio,http} [--era {session,stateless}]
//                   (--command BIN ARG... | --url URL) [--token T] [--big]
//
// Eras: `session` is the legacy `initialize` handshake (2025-11-25 / 2025-06-18);
// `stateless` is 2026-07-28 (no initialize, no session). v2 selects it with
// `versionNegotiation: {mode: {pin: '2026-07-28'}}` (its default is the legacy handshake);
// v1 (1.32.2) knows revisions up to 2025-11-25 only and prints a `skip-era` line.
// `--command` takes every remaining argument, so it comes last.

const TOOLS = [
  'terminal_execute', 'terminal_job', 'computer_file_read', 'computer_file_write',
  'computer_file_edit', 'computer_dashboard', 'computer_list', 'computer_create',
  'computer_restart', 'computer_factory_reset', 'computer_delete',
];
const BIG = 2 * 1024 * 1024;
const SESSION_VERSIONS = ['2025-11-25', '2025-06-18'];
const STATELESS_VERSION = '2026-07-28';
const TIMEOUT_MS = 180_000;

function parseArgs(argv) {
  const a = { era: 'session', big: false, command: null, url: null, token: null, backend: 'wasm' };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) usage(`${k} needs a value`);
      return argv[++i];
    };
    switch (k) {
      case '--client': a.client = val(); break;
      case '--transport': a.transport = val(); break;
      case '--era': a.era = val(); break;
      case '--url': a.url = val(); break;
      case '--token': a.token = val(); break;
      case '--big': a.big = true; break;
      case '--backend': a.backend = val(); break;
      case '--command': a.command = argv.slice(i + 1); i = argv.length; break;
      default: usage(`unknown argument ${k}`);
    }
  }
  if (!['sdk1', 'sdk2'].includes(a.client)) usage('--client is sdk1 or sdk2');
  if (!['stdio', 'http'].includes(a.transport)) usage('--transport is stdio or http');
  if (!['session', 'stateless'].includes(a.era)) usage('--era is session or stateless');
  if (a.transport === 'stdio' && !(a.command && a.command.length)) usage('stdio needs --command BIN ARG...');
  if (a.transport === 'http' && !a.url) usage('http needs --url');
  return a;
}

function usage(msg) {
  process.stderr.write(`matrix.mjs: ${msg}\nusage: node matrix.mjs --client {sdk1,sdk2} --transport {stdio,http} ` +
    '[--era {session,stateless}] (--command BIN ARG... | --url URL) [--token T] [--big] [--backend NAME]\n');
  process.exit(2);
}

const args = parseArgs(process.argv.slice(2));
let failed = false;

function report(check, ok, detail = '') {
  failed ||= !ok;
  const d = typeof detail === 'string' ? detail : JSON.stringify(detail);
  process.stdout.write(JSON.stringify({
    client: args.client, backend: args.backend, transport: args.transport, era: args.era, check, ok,
    detail: d.slice(0, 400),
  }) + '\n');
}

function errText(e) {
  return `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}${e?.code !== undefined ? ` (code ${e.code})` : ''}`;
}

// ---- what went over the wire (HTTP): the tools/call requests that carried a progress
// token, and the content type each was answered with, so big-with-progress verifies that the
// SDK really sent `_meta.progressToken` rather than assuming it.
const wire = [];
const observingFetch = async (url, init) => {
  let entry;
  try {
    const body = typeof init?.body === 'string' ? JSON.parse(init.body) : undefined;
    for (const m of [body].flat()) {
      if (m?.method === 'tools/call') {
        entry = { name: m.params?.name, progressToken: m.params?._meta?.progressToken };
        wire.push(entry);
      }
    }
  } catch { /* not JSON: not ours to look at */ }
  const res = await fetch(url, init);
  if (entry) entry.contentType = res.headers.get('content-type');
  return res;
};

// ---- the adapters: each gives connect() -> {client, negotiated(), era, call(name, args, opts), list(), close()} ----

async function sdk1Connect() {
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const client = new Client({ name: 'msc-matrix-sdk1', version: '1.32.2' });
  let transport;
  if (args.transport === 'http') {
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    transport = new StreamableHTTPClientTransport(new URL(args.url), {
      requestInit: args.token ? { headers: { Authorization: `Bearer ${args.token}` } } : undefined,
      fetch: observingFetch,
    });
  } else {
    const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
    transport = new StdioClientTransport({ command: args.command[0], args: args.command.slice(1), stderr: 'inherit' });
  }
  // v1 keeps the negotiated revision nowhere public; it hands it to the transport's optional
  // setProtocolVersion (the HTTP transport's sends it as MCP-Protocol-Version): record it there.
  let negotiated;
  const inner = transport.setProtocolVersion?.bind(transport);
  transport.setProtocolVersion = (v) => { negotiated = v; inner?.(v); };
  await client.connect(transport, { timeout: TIMEOUT_MS });
  return {
    client,
    negotiated: () => negotiated,
    era: 'legacy',
    call: (name, a, opts = {}) => client.callTool({ name, arguments: a }, undefined, { timeout: TIMEOUT_MS, ...opts }),
    list: () => client.listTools(undefined, { timeout: TIMEOUT_MS }),
    close: () => client.close(),
  };
}

async function sdk2Connect() {
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const options = args.era === 'stateless'
    ? { versionNegotiation: { mode: { pin: STATELESS_VERSION } } }
    : {};
  const client = new Client({ name: 'msc-matrix-sdk2', version: '2.4.0' }, options);
  let transport;
  if (args.transport === 'http') {
    transport = new StreamableHTTPClientTransport(new URL(args.url), {
      requestInit: args.token ? { headers: { Authorization: `Bearer ${args.token}` } } : undefined,
      fetch: observingFetch,
    });
  } else {
    const { StdioClientTransport } = await import('@modelcontextprotocol/client/stdio');
    transport = new StdioClientTransport({ command: args.command[0], args: args.command.slice(1), stderr: 'inherit' });
  }
  await client.connect(transport, { timeout: TIMEOUT_MS });
  return {
    client,
    negotiated: () => client.getNegotiatedProtocolVersion(),
    era: client.getProtocolEra(),
    call: (name, a, opts = {}) => client.callTool({ name, arguments: a }, { timeout: TIMEOUT_MS, ...opts }),
    list: () => client.listTools(undefined, { timeout: TIMEOUT_MS }),
    close: () => client.close(),
  };
}

const connect = args.client === 'sdk1' ? sdk1Connect : sdk2Connect;

// ---- helpers on results ----

function textOf(result) {
  return (result?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

// The structured content of a successful exec-like result, checked against its text block.
function structured(result, what) {
  if (result?.isError) throw new Error(`${what}: isError result: ${textOf(result).slice(0, 300)}`);
  const sc = result?.structuredContent;
  if (!sc || typeof sc !== 'object') throw new Error(`${what}: no structuredContent: ${JSON.stringify(result).slice(0, 300)}`);
  const texts = (result.content ?? []).filter((c) => c.type === 'text');
  if (texts.length !== 1) throw new Error(`${what}: ${texts.length} text blocks, expected 1`);
  let parsed;
  try { parsed = JSON.parse(texts[0].text); } catch (e) { throw new Error(`${what}: text block is not JSON: ${texts[0].text.slice(0, 200)}`); }
  if (JSON.stringify(sortKeys(parsed)) !== JSON.stringify(sortKeys(sc))) {
    throw new Error(`${what}: text block differs from structuredContent`);
  }
  return sc;
}

function sortKeys(v) {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object') return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys(v[k])]));
  return v;
}

async function check(name, fn) {
  try {
    const detail = await fn();
    report(name, true, detail ?? '');
  } catch (e) {
    report(name, false, errText(e));
  }
}

function expect(cond, msg) {
  if (!cond) throw new Error(msg);
}

// ---- the checks ----

async function main() {
  if (args.client === 'sdk1' && args.era === 'stateless') {
    report('skip-era', true, '@modelcontextprotocol/sdk 1.32.2 has no 2026-07-28 mode: its SUPPORTED_PROTOCOL_VERSIONS ' +
      'end at 2025-11-25 and connect() always runs the initialize handshake');
    return;
  }

  let s;
  await check('connect+list', async () => {
    s = await connect();
    const version = s.negotiated();
    const wantEra = args.era === 'stateless' ? 'modern' : 'legacy';
    expect(s.era === wantEra, `protocol era ${s.era}, expected ${wantEra}`);
    if (args.era === 'stateless') expect(version === STATELESS_VERSION, `negotiated ${version}, expected ${STATELESS_VERSION}`);
    else expect(SESSION_VERSIONS.includes(version), `negotiated ${version}, expected one of ${SESSION_VERSIONS}`);
    const { tools } = await s.list();
    const names = tools.map((t) => t.name);
    const missing = TOOLS.filter((t) => !names.includes(t));
    const extra = names.filter((t) => !TOOLS.includes(t));
    expect(missing.length === 0, `missing tools: ${missing.join(', ')}`);
    const noSchema = tools.filter((t) => !t.outputSchema).map((t) => t.name);
    return `protocol ${version} (${s.era}); ${names.length} tools${extra.length ? `, also ${extra.join(', ')}` : ''}` +
      `${noSchema.length ? `; without outputSchema: ${noSchema.join(', ')}` : ''}`;
  });
  if (!s) return;

  // First tool call of this connection (and, stateless, of this principal on a fresh server):
  // it makes the default computer, so it must say `created: true`.
  await check('default-kept', async () => {
    const mark = `kept-${Math.random().toString(36).slice(2, 10)}`;
    const first = structured(await s.call('terminal_execute', { command: `echo ${mark} > /tmp/f` }), 'write');
    expect(first.exit_code === 0, `write exit_code ${first.exit_code}: ${first.stderr}`);
    expect(first.created === true, `first call without computer_id: created=${JSON.stringify(first.created)}, expected true`);
    // Under 2026-07-28 over HTTP the default belongs to the principal (the token): a NEW
    // connection must find it. In the session era it belongs to the session (the stdio
    // process, or the legacy HTTP session), so the second call stays on this connection.
    const fresh = args.transport === 'http' && args.era === 'stateless';
    let t = s;
    if (fresh) {
      t = await connect();
      await t.list();
    }
    try {
      const second = structured(await t.call('terminal_execute', { command: 'cat /tmp/f' }), 'read');
      expect(second.stdout === `${mark}\n`, `cat /tmp/f gave ${JSON.stringify(second.stdout)} (stderr ${JSON.stringify(second.stderr)}), expected ${mark}`);
      expect(second.computer_id === first.computer_id, `computer ${second.computer_id}, first was ${first.computer_id}`);
      expect(second.created !== true, 'the second call says created: true');
      return `${first.computer_id}: created:true then kept (${fresh ? 'new connection, same token' : 'same connection'})`;
    } finally {
      if (fresh) await t.close();
    }
  });

  await check('exec', async () => {
    const sc = structured(await s.call('terminal_execute', { command: 'echo hi' }), 'exec');
    expect(sc.stdout === 'hi\n', `stdout ${JSON.stringify(sc.stdout)}`);
    expect(sc.exit_code === 0, `exit_code ${sc.exit_code}`);
    for (const k of ['computer_id', 'temporary', 'stdout', 'stderr', 'exit_code', 'exec_duration_ms']) {
      expect(k in sc, `structuredContent lacks ${k}`);
    }
    return `stdout "hi\\n", exit 0 on ${sc.computer_id} in ${sc.exec_duration_ms} ms`;
  });

  if (args.big) {
    await check('big-with-progress', async () => {
      let progress = 0;
      const t0 = Date.now();
      const r = await s.call('terminal_execute', { command: `head -c ${BIG} /dev/zero | tr '\\0' a` },
        { onprogress: () => { progress++; }, resetTimeoutOnProgress: true });
      const sc = structured(r, 'big');
      let sent = 'stdio (token not observed on the wire)';
      if (args.transport === 'http') {
        const req = wire.filter((w) => w.name === 'terminal_execute').at(-1);
        expect(req && req.progressToken !== undefined, 'the SDK sent no _meta.progressToken with an onprogress handler');
        sent = `progressToken ${JSON.stringify(req.progressToken)} sent, answered as ${req.contentType}`;
      }
      expect(sc.exit_code === 0, `exit_code ${sc.exit_code}: ${sc.stderr.slice(0, 200)}`);
      expect(!sc.truncated, `truncated: ${sc.stderr.slice(0, 200)}`);
      expect(sc.stdout.length === BIG, `stdout is ${sc.stdout.length} bytes, expected ${BIG}`);
      expect(/^a*$/.test(sc.stdout), 'stdout is not all "a"');
      return `${BIG} bytes; ${sent}; ${progress} progress notification(s); ${Date.now() - t0} ms`;
    });
  }

  await check('bad-input', async () => {
    let r;
    try {
      r = await s.call('terminal_execute', { timeout: 0, command: 'true' });
    } catch (e) {
      // A thrown error is only a pass if the server said it (a JSON-RPC error), not the client.
      throw new Error(`the call threw instead of an isError result: ${errText(e)}`);
    }
    expect(r.isError === true, `isError ${r.isError}: ${JSON.stringify(r).slice(0, 200)}`);
    const text = textOf(r);
    expect(/timeout/.test(text), `error text does not mention timeout: ${text.slice(0, 200)}`);
    expect(r.structuredContent === undefined, 'validation error carries structuredContent');
    return `isError: ${text.slice(0, 160)}`;
  });

  await check('job', async () => {
    const first = await s.call('terminal_execute', { command: 'sleep 1; echo done', yield_ms: 100 });
    const sc = structured(first, 'start');
    expect(sc.running === true, `running ${JSON.stringify(sc.running)} (exit ${sc.exit_code})`);
    expect(typeof sc.job_id === 'string' && sc.job_id.length > 0, 'no job_id');
    let stdout = sc.stdout ?? '';
    let polls = 0;
    let last = sc;
    const deadline = Date.now() + 60_000;
    while (last.running) {
      expect(Date.now() < deadline, `still running after 60 s and ${polls} polls`);
      last = structured(await s.call('terminal_job', { job_id: sc.job_id, computer_id: sc.computer_id, wait_ms: 2000 }), 'poll');
      polls++;
      stdout += last.stdout ?? '';
    }
    expect(last.exit_code === 0, `exit_code ${last.exit_code}`);
    expect(stdout === 'done\n', `stdout ${JSON.stringify(stdout)}`);
    return `job ${sc.job_id.slice(0, 8)}… ended after ${polls} poll(s), stdout "done\\n", exit 0`;
  });

  await check('files', async () => {
    const w = structured(await s.call('computer_file_write', { path: '/tmp/a.txt', content: 'hello' }), 'write');
    expect(w.size === 5, `write size ${w.size}`);
    const r = structured(await s.call('computer_file_read', { path: '/tmp/a.txt' }), 'read');
    expect(r.content === 'hello', `read content ${JSON.stringify(r.content)}`);
    expect(r.computer_id === w.computer_id, `read on ${r.computer_id}, wrote on ${w.computer_id}`);
    return `wrote 5 bytes (sha256 ${String(w.sha256).slice(0, 12)}…), read "hello" back`;
  });

  await s.close();
}

try {
  await main();
} catch (e) {
  report('run', false, errText(e));
}
process.exit(failed ? 1 : 0);
