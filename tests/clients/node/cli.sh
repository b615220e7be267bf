#!/usr/bin/env bash
# Issue 45: README's client snippets, run with the real CLIs (Claude Code, Gemini CLI, Codex;
# pinned in package.json, installed in ./node_modules) against the built binary.
#
#   tests/clients/node/cli.sh BIN [WASM_CACHE_DIR]
#
# Every snippet marked `<!-- tested: NAME -->` right before its code fence in README.md is
# extracted (awk) and run as written, with `/path/to/mcp-sandbox-computer-vm-for-ai`
# replaced: in the shell snippets by BIN plus `--backend go_busybox` (and the compiled-module
# cache), in the config files (TOML, JSON), whose command is one path, by a wrapper script
# that execs BIN with those arguments added. Each check runs in its own fresh HOME (and XDG
# dirs, CODEX_HOME) under a temp dir, with an emptied environment, so nothing of this machine
# leaks into the CLIs and nothing they write leaks out. One JSON line per check
# ({"client","transport","era","check","ok","detail"}, as matrix.mjs prints); exit 1 when
# any check failed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
README="$ROOT/README.md"
BIN=${1:?usage: cli.sh BIN [WASM_CACHE_DIR]}
CACHE=${2:-}
PLACEHOLDER=/path/to/mcp-sandbox-computer-vm-for-ai
NODE_DIR=$(dirname "$(command -v node)")
CLI_BIN="$HERE/node_modules/.bin"
for c in claude gemini codex; do
  [ -x "$CLI_BIN/$c" ] || { echo "cli.sh: $CLI_BIN/$c is missing: npm ci in ${HERE#"$ROOT"/}" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "cli.sh: $BIN is not executable" >&2; exit 1; }

SERVER_ARGS=(--backend go_busybox)
[ -n "$CACHE" ] && SERVER_ARGS+=(--wasm-cache-dir "$CACHE")

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# The wrapper the config-file snippets name: BIN with the test's backend arguments.
WRAPPER="$TMP/bin/mcp-sandbox-computer-vm-for-ai"
mkdir -p "$TMP/bin"
{
  echo '#!/bin/sh'
  printf 'exec %q "$@"' "$BIN"
  printf ' %q' "${SERVER_ARGS[@]}"
  echo
} >"$WRAPPER"
chmod +x "$WRAPPER"
# What replaces the placeholder in the shell snippets (shell-quoted words).
SHELL_REPLACEMENT=$(printf '%q ' "$BIN" "${SERVER_ARGS[@]}")
SHELL_REPLACEMENT=${SHELL_REPLACEMENT% }

failed=0
report() { # CLIENT CHECK OK DETAIL
  node -e 'const [c, k, ok, d] = process.argv.slice(1);
    console.log(JSON.stringify({client: c, transport: "stdio", era: "-", check: k, ok: ok === "true", detail: d.slice(0, 400)}))' \
    "$1" "$2" "$3" "$4"
  [ "$3" = true ] || failed=1
}

# The body of README's code block marked `<!-- tested: NAME -->` (the marker must be the
# line right before the opening fence).
snippet() {
  awk -v tag="$1" '
    state == 0 && $0 == "<!-- tested: " tag " -->" { state = 1; next }
    state == 1 { if ($0 ~ /^```/) { state = 2; next } else exit 1 }
    state == 2 && /^```/ { found = 1; exit }
    state == 2 { print }
    END { if (!found) exit 1 }
  ' "$README"
}

# A fresh HOME for one check: $H, with the working directory $H/work.
fresh_home() {
  H=$(mktemp -d "$TMP/home.XXXXXX")
  mkdir -p "$H/work" "$H/.config" "$H/.local/share" "$H/.cache" "$H/.local/state" "$H/.codex"
}
# Runs a command in $H/work with an emptied environment: only PATH (the CLIs and node),
# HOME, the XDG dirs and CODEX_HOME in $H, and the switches that keep the CLIs off the
# network (no update checks, no telemetry).
in_home() {
  (cd "$H/work" && env -i PATH="$CLI_BIN:$NODE_DIR:/usr/local/bin:/usr/bin:/bin" HOME="$H" \
    XDG_CONFIG_HOME="$H/.config" XDG_DATA_HOME="$H/.local/share" XDG_CACHE_HOME="$H/.cache" \
    XDG_STATE_HOME="$H/.local/state" CODEX_HOME="$H/.codex" TERM=dumb NO_COLOR=1 LANG=C.UTF-8 \
    DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 \
    GEMINI_CLI_DISABLE_AUTOUPDATER=true \
    timeout 120 "$@")
}
# Runs a README shell snippet, its placeholder replaced, with bash in the fresh home.
run_snippet() { # NAME
  local body
  body=$(snippet "$1") || { echo "README.md has no code block marked <!-- tested: $1 -->"; return 1; }
  body=${body//"$PLACEHOLDER"/"$SHELL_REPLACEMENT"}
  in_home bash -euo pipefail -c "$body" 2>&1
}
one_line() { tr '\n' ' ' | sed 's/  */ /g; s/ $//'; }

# ---- Claude Code: both `claude mcp add` forms, then `claude mcp list` (its health check:
# it starts the server and connects) and `claude mcp get`.
claude_check() { # NAME WANT_ENV
  local name="$1" want_env="$2" out list get
  fresh_home
  if ! out=$(run_snippet "$name"); then
    report claude-code "$name" false "the snippet failed: $(one_line <<<"$out")"
    return
  fi
  list=$(in_home claude mcp list 2>&1) || true
  if ! grep -q "^sandbox-computer: $BIN .*- ✔ Connected\$" <<<"$list"; then
    report claude-code "$name" false "claude mcp list: $(one_line <<<"$list")"
    return
  fi
  get=$(in_home claude mcp get sandbox-computer 2>&1) || true
  if [ "$want_env" = yes ] && ! grep -q '^ *ENABLE_LIFECYCLE_TOOLS=true$' <<<"$get"; then
    report claude-code "$name" false "claude mcp get shows no ENABLE_LIFECYCLE_TOOLS=true: $(one_line <<<"$get")"
    return
  fi
  report claude-code "$name" true "claude mcp list: $(grep '^sandbox-computer:' <<<"$list" | sed 's/.* - //')$(
    [ "$want_env" = yes ] && echo "; claude mcp get: $(grep -o 'ENABLE_LIFECYCLE_TOOLS=true' <<<"$get")")"
}
claude_check claude-add no
claude_check claude-add-env yes

# README's JSON config, given to Claude Code as written (`claude mcp add-json`), the
# command replaced by the wrapper.
fresh_home
if json=$(snippet json-config); then
  json=${json//"$PLACEHOLDER"/"$WRAPPER"}
  server=$(node -e 'const c = JSON.parse(process.argv[1]); console.log(JSON.stringify(c.mcpServers["sandbox-computer"]))' "$json")
  out=$(in_home claude mcp add-json --scope user sandbox-computer "$server" 2>&1) || true
  list=$(in_home claude mcp list 2>&1) || true
  if grep -q "^sandbox-computer: $WRAPPER --image debian:bookworm-slim - ✔ Connected\$" <<<"$list"; then
    report claude-code json-config true "claude mcp add-json, then claude mcp list: ✔ Connected"
  else
    report claude-code json-config false "add-json: $(one_line <<<"$out"); list: $(one_line <<<"$list")"
  fi
else
  report claude-code json-config false "README.md has no code block marked <!-- tested: json-config -->"
fi

# ---- Gemini CLI: `gemini mcp add`, then `gemini mcp list`, which connects to each server.
# Gemini CLI disables every MCP server in a folder the user has not trusted (it asks
# interactively once); the stored answer is ~/.gemini/trustedFolders.json, written here.
fresh_home
if out=$(run_snippet gemini-add); then
  mkdir -p "$H/.gemini"
  node -e 'console.log(JSON.stringify({[process.argv[1]]: "TRUST_FOLDER"}))' "$H/work" >"$H/.gemini/trustedFolders.json"
  list=$(in_home gemini mcp list 2>&1) || true
  env_set=$(node -e 'const s = require(process.argv[1]).mcpServers?.["sandbox-computer"]; console.log(s?.env?.ENABLE_LIFECYCLE_TOOLS ?? "")' \
    "$H/.gemini/settings.json" 2>/dev/null || true)
  if ! grep -q "^✓ sandbox-computer: $BIN .*(stdio) - Connected\$" <<<"$list"; then
    report gemini-cli gemini-add false "gemini mcp list: $(one_line <<<"$list")"
  elif [ "$env_set" != true ]; then
    report gemini-cli gemini-add false "~/.gemini/settings.json has no env ENABLE_LIFECYCLE_TOOLS=true"
  else
    report gemini-cli gemini-add true "gemini mcp list: $(grep 'sandbox-computer:' <<<"$list" | sed 's/.* - //'); settings.json env ENABLE_LIFECYCLE_TOOLS=true"
  fi
else
  report gemini-cli gemini-add false "the snippet failed: $(one_line <<<"$out")"
fi

# ---- Codex: README's config.toml as ~/.codex/config.toml (CODEX_HOME), the command
# replaced by the wrapper. `codex mcp list --json` must read it as the JSON snippet says
# (command, args, env); then Codex's app-server (JSON-RPC on stdio, the interface its IDE
# clients use) connects to the server: `mcpServerStatus/list` answers with the server's
# identity and tools, no model or login involved.
fresh_home
if toml=$(snippet codex-toml) && json=$(snippet json-config); then
  printf '%s\n' "${toml//"$PLACEHOLDER"/"$WRAPPER"}" >"$H/.codex/config.toml"
  listed=$(in_home codex mcp list --json 2>"$H/codex.err") || true
  detail=$(node -e '
    const [listed, json, wrapper, placeholder] = process.argv.slice(1);
    const want = JSON.parse(json).mcpServers["sandbox-computer"];
    let got;
    try { got = JSON.parse(listed).find((s) => s.name === "sandbox-computer"); } catch (e) { console.log(`codex mcp list --json: ${listed.slice(0, 200)}`); process.exit(1); }
    if (!got) { console.log(`codex mcp list --json has no sandbox-computer: ${listed.slice(0, 200)}`); process.exit(1); }
    const t = got.transport ?? got;
    const problems = [];
    if (t.command !== wrapper || want.command !== placeholder) problems.push(`command ${t.command} (JSON snippet: ${want.command})`);
    if (JSON.stringify(t.args) !== JSON.stringify(want.args)) problems.push(`args ${JSON.stringify(t.args)} (JSON snippet: ${JSON.stringify(want.args)})`);
    if (JSON.stringify(t.env) !== JSON.stringify(want.env)) problems.push(`env ${JSON.stringify(t.env)} (JSON snippet: ${JSON.stringify(want.env)})`);
    if (problems.length) { console.log(problems.join("; ")); process.exit(1); }
    console.log(`command, args ${JSON.stringify(t.args)} and env as the JSON snippet`);
  ' "$listed" "$json" "$WRAPPER" "$PLACEHOLDER") || true
  if [[ "$detail" == command,* ]]; then
    report codex codex-toml-config true "codex mcp list --json: $detail"
  else
    report codex codex-toml-config false "$detail"
  fi
  status=$(in_home node --input-type=module -e '
    import { spawn } from "node:child_process";
    const p = spawn("codex", ["app-server"], { stdio: ["pipe", "pipe", "ignore"] });
    const pending = new Map();
    let buf = "", id = 0;
    p.stdout.on("data", (d) => {
      buf += d;
      for (let i; (i = buf.indexOf("\n")) >= 0;) {
        const line = buf.slice(0, i); buf = buf.slice(i + 1);
        if (!line.trim()) continue;
        const m = JSON.parse(line);
        if (m.id !== undefined && pending.has(m.id)) { pending.get(m.id)(m); pending.delete(m.id); }
      }
    });
    const request = (method, params) => new Promise((res) => {
      const n = ++id; pending.set(n, res);
      p.stdin.write(JSON.stringify({ id: n, method, params }) + "\n");
    });
    const timer = setTimeout(() => { console.log("no answer from codex app-server in 90 s"); p.kill(); process.exit(1); }, 90000);
    const init = await request("initialize", { clientInfo: { name: "msc-cli-check", version: "1" } });
    if (init.error) { console.log(`initialize: ${JSON.stringify(init.error)}`); process.exit(1); }
    p.stdin.write(JSON.stringify({ method: "initialized" }) + "\n");
    const r = await request("mcpServerStatus/list", { detail: "toolsAndAuthOnly" });
    clearTimeout(timer); p.kill();
    const s = r.result?.data?.find((x) => x.name === "sandbox-computer");
    if (!s) { console.log(`mcpServerStatus/list: ${JSON.stringify(r).slice(0, 300)}`); process.exit(1); }
    const tools = Object.keys(s.tools ?? {}).sort();
    const want = ["terminal_execute", "computer_dashboard", "computer_list", "computer_create",
      "computer_restart", "computer_factory_reset", "computer_delete"];
    const missing = want.filter((t) => !tools.includes(t));
    if (s.serverInfo?.name !== "mcp-sandbox-computer-vm-for-ai" || missing.length) {
      console.log(`serverInfo ${JSON.stringify(s.serverInfo)}, tools ${tools.join(",")}, missing ${missing.join(",")}`);
      process.exit(1);
    }
    console.log(`ok: connected to ${s.serverInfo.name} ${s.serverInfo.version}, ${tools.length} tools (lifecycle on: the env reached it)`);
  ' 2>&1) || true
  if [[ "$status" == ok:* ]]; then
    report codex codex-app-server true "mcpServerStatus/list ${status#ok: }"
  else
    report codex codex-app-server false "$(one_line <<<"$status") $(grep -v 'PATH aliases\|bubblewrap' "$H/codex.err" | one_line | cut -c1-200)"
  fi
else
  report codex codex-toml-config false "README.md lacks the code block marked <!-- tested: codex-toml --> or json-config"
fi

exit "$failed"
