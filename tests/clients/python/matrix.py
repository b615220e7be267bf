"""Issue 45's real-client matrix: Python MCP clients people use, against the real server.

Each client is driven through its own public API. No LLM is called: pydantic-ai and
openai-agents are used through their MCP classes (the tool list built the way their agents
build it, and direct calls), which is what their agents run. One JSON line per check:
{"client", "version", "backend", "transport", "era", "check", "ok", "detail"}; the exit
status is 1 when any check failed. A check is ok only when what it names was seen.

    matrix.py --client {mcp,fastmcp,pydantic-ai,openai-agents}
              --transport {stdio,http} [--era {session,stateless}]
              (--url URL [--token T] | --command BIN ARG...)
              [--big] [--live-progress] [--backend NAME]

`mcp` is whichever line of the official SDK is installed (2.x or 1.x). Eras: `stateless` is
2026-07-28, reached the client's default way (its "auto" mode: `server/discover`);
`session` is the client's legacy `initialize` session. A client that cannot run the era
asked for prints one `skip-era` line saying why (ok only if that is still true of the
installed version) and runs nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import inspect
import json
import sys
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

TOOLS = {
    "terminal_execute", "terminal_job", "computer_file_read", "computer_file_write",
    "computer_file_edit", "computer_dashboard", "computer_list", "computer_create",
    "computer_restart", "computer_factory_reset", "computer_delete",
}
BIG = 2 * 1024 * 1024
STATELESS = "2026-07-28"
SESSION_REVISIONS = {"2025-06-18", "2025-11-25"}
# Runs 3 s: over HTTP the server holds a call's notifications for 2 s and drops them when
# the result comes within that window (answered as plain JSON; executor/src/http/stream.rs).
LINES = "for i in 1 2 3 4 5; do echo line$i; sleep 0.6; done"
OPENAI_PROGRESS = "call_tool(meta={progressToken}); it has no progress callback"
PACKAGE = {"mcp": "mcp", "fastmcp": "fastmcp", "pydantic-ai": "pydantic-ai-slim",
           "openai-agents": "openai-agents"}

failed = False


def report(args: argparse.Namespace, check: str, ok: bool, detail: Any = "") -> None:
    global failed
    failed |= not ok
    print(json.dumps({"client": args.client, "version": args.version, "backend": args.backend,
                      "transport": args.transport, "era": args.era, "check": check,
                      "ok": bool(ok), "detail": str(detail)[:400]}), flush=True)


def mcp_major() -> int:
    return int(importlib.metadata.version("mcp").split(".")[0])


class Session:
    """What every client adapter offers. `call` answers (is_error, structuredContent or the
    client's structured value, first text block, the messages of the progress notifications seen)."""

    tools: dict[str, Any]  # name -> inputSchema, as the client parsed it
    protocol_version: str | None
    call: Callable[..., Awaitable[tuple[bool, dict | None, str, list]]]
    progress_how: str = "progress callback"
    strict: tuple[list[str], dict[str, str]] | None = None  # openai-agents: (failed, why)


def text_of(content: Any) -> str:
    return content[0].text if content and hasattr(content[0], "text") else ""


# ---- the official Python SDK: 2.x (Client) and 1.x (ClientSession) ----

@asynccontextmanager
async def sdk(args: argparse.Namespace) -> AsyncIterator[Session]:
    if mcp_major() >= 2:
        async with sdk2(args) as s:
            yield s
    else:
        async with sdk1(args) as s:
            yield s


@asynccontextmanager
async def sdk2(args: argparse.Namespace) -> AsyncIterator[Session]:
    import httpx2
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    # Client(mode=...): "auto" (the default: server/discover, else initialize) or "legacy".
    mode = "auto" if args.era == "stateless" else "legacy"
    if args.transport == "http":
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {args.token}"},
                                  timeout=httpx2.Timeout(60, read=300))
        server: Any = streamable_http_client(args.url, http_client=http)
    else:
        server = StdioServerParameters(command=args.command[0], args=args.command[1:])
    async with Client(server, mode=mode) as client:
        s = Session()
        s.protocol_version = client.protocol_version
        s.tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}

        async def call(name: str, arguments: dict, progress: bool = False):
            seen: list[str | None] = []

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                seen.append(message)

            r = await client.call_tool(name, arguments,
                                       progress_callback=on_progress if progress else None)
            return bool(r.is_error), r.structured_content, text_of(r.content), list(seen)

        s.call = call
        yield s


@asynccontextmanager
async def sdk1(args: argparse.Namespace) -> AsyncIterator[Session]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamablehttp_client

    if args.transport == "http":
        transport = streamablehttp_client(args.url, headers={"Authorization": f"Bearer {args.token}"})
    else:
        transport = stdio_client(StdioServerParameters(command=args.command[0], args=args.command[1:]))
    async with transport as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            s = Session()
            s.protocol_version = init.protocolVersion
            s.tools = {t.name: t.inputSchema for t in (await session.list_tools()).tools}

            async def call(name: str, arguments: dict, progress: bool = False):
                seen: list[str | None] = []

                async def on_progress(p: float, total: float | None, message: str | None) -> None:
                    seen.append(message)

                r = await session.call_tool(name, arguments,
                                            progress_callback=on_progress if progress else None)
                return bool(r.isError), r.structuredContent, text_of(r.content), list(seen)

            s.call = call
            yield s


# ---- FastMCP 4 ----

def fastmcp_transport(args: argparse.Namespace) -> Any:
    from fastmcp.client.transports import StdioTransport, StreamableHttpTransport

    if args.transport == "http":
        return StreamableHttpTransport(args.url, auth=args.token)
    return StdioTransport(command=args.command[0], args=args.command[1:])


@asynccontextmanager
async def fastmcp(args: argparse.Namespace) -> AsyncIterator[Session]:
    from fastmcp import Client

    # Client(mode=...): "auto" (the default) or "legacy", as in the SDK it runs on.
    mode = "auto" if args.era == "stateless" else "legacy"
    async with Client(fastmcp_transport(args), mode=mode) as client:
        s = Session()
        s.protocol_version = client.protocol_version
        s.tools = {t.name: t.input_schema for t in await client.list_tools()}

        async def call(name: str, arguments: dict, progress: bool = False):
            seen: list[str | None] = []

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                seen.append(message)

            r = await client.call_tool(name, arguments, raise_on_error=False,
                                       progress_handler=on_progress if progress else None)
            return bool(r.is_error), r.structured_content, text_of(r.content), list(seen)

        s.call = call
        yield s


# ---- pydantic-ai: its MCPToolset (what an Agent's toolsets=[...] runs) ----

@asynccontextmanager
async def pydantic_ai(args: argparse.Namespace) -> AsyncIterator[Session]:
    from fastmcp import Client
    from pydantic_ai import RunContext
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    seen: list[str | None] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    if args.era == "stateless":
        # The default way: a URL (or a transport) and the toolset builds its FastMCP client,
        # whose mode is "auto".
        source: Any = args.url if args.transport == "http" else fastmcp_transport(args)
        toolset = MCPToolset(source, tool_error_behavior="error", progress_handler=on_progress,
                             auth=args.token if args.transport == "http" else None)
    else:
        # The era is the FastMCP client's: a pre-built one with mode="legacy".
        toolset = MCPToolset(Client(fastmcp_transport(args), mode="legacy",
                                    progress_handler=on_progress),
                             tool_error_behavior="error")
    async with toolset:
        s = Session()
        s.protocol_version = toolset.client.protocol_version
        # The tool definitions an agent run gets (TestModel only fills the run context; no
        # model is asked anything).
        ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
        defs = await toolset.get_tools(ctx)
        s.tools = {name: t.tool_def.parameters_json_schema for name, t in defs.items()}
        s.progress_how = "MCPToolset(progress_handler=)"

        async def call(name: str, arguments: dict, progress: bool = False):
            seen.clear()
            try:
                out = await toolset.direct_call_tool(name, arguments)
            except Exception as e:  # tool_error_behavior="error": a tool error is raised
                return True, None, f"{type(e).__name__}: {e}", list(seen)
            structured = out if isinstance(out, dict) else None
            return False, structured, json.dumps(out) if structured is not None else str(out), list(seen)

        s.call = call
        yield s


# ---- openai-agents: MCPServerStdio / MCPServerStreamableHttp under an Agent ----

@asynccontextmanager
async def openai_agents(args: argparse.Namespace) -> AsyncIterator[Session]:
    from agents import Agent, RunContextWrapper
    from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
    from agents.strict_schema import ensure_strict_json_schema

    if args.transport == "http":
        server: Any = MCPServerStreamableHttp(
            {"url": args.url, "headers": {"Authorization": f"Bearer {args.token}"}},
            client_session_timeout_seconds=120)
    else:
        server = MCPServerStdio({"command": args.command[0], "args": args.command[1:]},
                                client_session_timeout_seconds=120)
    async with server:
        s = Session()
        s.protocol_version = getattr(server.session, "protocol_version", None)
        ctx = RunContextWrapper(context=None)
        # The tool list an agent builds, as is and with convert_schemas_to_strict: a schema it
        # cannot convert leaves that tool non-strict (the SDK logs and falls back).
        plain = await Agent(name="matrix", mcp_servers=[server]).get_mcp_tools(ctx)
        s.tools = {t.name: t.params_json_schema for t in plain}
        strict = await Agent(name="matrix", mcp_servers=[server],
                             mcp_config={"convert_schemas_to_strict": True}).get_mcp_tools(ctx)
        why: dict[str, str] = {}
        for t in strict:
            if not t.strict_json_schema:
                try:
                    ensure_strict_json_schema(json.loads(json.dumps(s.tools[t.name])))
                    why[t.name] = "left non-strict"
                except Exception as e:
                    why[t.name] = str(e).split(".")[0]
        s.strict = (sorted(why), why)
        # No progress callback in its API: call_tool(meta=) is how it sends a progress token.
        s.progress_how = OPENAI_PROGRESS

        async def call(name: str, arguments: dict, progress: bool = False):
            meta = {"progressToken": "matrix-big"} if progress else None
            r = await server.call_tool(name, arguments, meta=meta)
            # Its CallToolResult is the installed mcp's: snake_case on mcp 2.x.
            return (bool(getattr(r, "is_error", None) or getattr(r, "isError", False)),
                    getattr(r, "structured_content", None) or getattr(r, "structuredContent", None),
                    text_of(r.content), [])

        s.call = call
        yield s


CLIENTS = {"mcp": sdk, "fastmcp": fastmcp, "pydantic-ai": pydantic_ai,
           "openai-agents": openai_agents}


def cannot_run_era(args: argparse.Namespace) -> tuple[bool, str] | None:
    """(still true, why) when the installed client cannot run args.era; None when it can."""
    if args.client == "mcp" and args.era == "stateless" and mcp_major() < 2:
        from mcp.shared.version import SUPPORTED_PROTOCOL_VERSIONS as versions

        return (bool(versions) and STATELESS not in versions,
                f"mcp {args.version} has no {STATELESS}: it supports {versions}")
    if args.client == "openai-agents" and args.era == "session":
        from agents.mcp import _compat

        src = inspect.getsource(_compat.create_v2_client)
        return ('mode="auto"' in src,
                f"openai-agents {args.version} builds its mcp Client with mode=\"auto\" "
                "(agents/mcp/_compat.py create_v2_client) and has no option to pass another "
                f"mode: on mcp 2.x it always discovers {STATELESS} on this server")
    return None


def sc(res: tuple[bool, dict | None, str, list]) -> dict:
    """The structured result (structuredContent, or the value pydantic-ai hands its agent)."""
    return res[1] if isinstance(res[1], dict) else {}


async def checks(args: argparse.Namespace) -> None:
    opener = CLIENTS[args.client]
    stateless = args.era == "stateless"
    async with opener(args) as s:
        missing = sorted(TOOLS - set(s.tools))
        bad_schema = sorted(n for n, sch in s.tools.items()
                            if not isinstance(sch, dict) or sch.get("type") != "object")
        report(args, "connect+list", not missing and not bad_schema,
               f"missing {missing}, bad schemas {bad_schema}" if missing or bad_schema
               else f"{len(s.tools)} tools, every inputSchema accepted")
        want = {STATELESS} if stateless else SESSION_REVISIONS
        report(args, "era", s.protocol_version in want,
               f"negotiated {s.protocol_version}, want one of {sorted(want)}")

        first = sc(await s.call("terminal_execute", {"command": "echo x > /tmp/f"}))
        r = sc(await s.call("terminal_execute", {"command": "echo hi"}))
        report(args, "exec", r.get("stdout") == "hi\n" and r.get("exit_code") == 0, r)
        # The default computer: kept within the process (stdio) or session (legacy HTTP);
        # under 2026-07-28 over HTTP a new connection must find it (below).
        if not (stateless and args.transport == "http"):
            second = sc(await s.call("terminal_execute", {"command": "cat /tmp/f"}))
            report(args, "default-kept", first.get("created") is True
                   and second.get("stdout") == "x\n" and not second.get("created")
                   and second.get("computer_id") == first.get("computer_id"),
                   {"first": first, "second (same connection)": second})

        err = await s.call("terminal_execute", {"command": "true", "timeout": 0})
        report(args, "bad-input", err[0] and "timeout" in err[2], err[2])

        r = sc(await s.call("terminal_execute", {"command": "sleep 1; echo done", "yield_ms": 100}))
        job, out, ended = r.get("job_id"), r.get("stdout", ""), False
        running = r.get("running") is True
        for _ in range(60):
            if not job:
                break
            p = sc(await s.call("terminal_job", {"job_id": job, "wait_ms": 3000}))
            out += p.get("stdout", "")
            if "exit_code" in p:
                ended = p.get("exit_code") == 0
                break
        report(args, "job", running and bool(job) and ended and out == "done\n",
               {"first": r, "stdout collected": out, "ended with 0": ended})

        w = await s.call("computer_file_write", {"path": "/tmp/a.txt", "content": "hello"})
        r = sc(await s.call("computer_file_read", {"path": "/tmp/a.txt"}))
        report(args, "files", not w[0] and r.get("content") == "hello", {"write": w[2], "read": r})

        r = sc(await s.call("terminal_execute",
                            {"command": "echo $A", "env": [{"name": "A", "value": "1"}]}))
        report(args, "env-list", r.get("stdout") == "1\n", r)
        if s.strict is not None:
            names, why = s.strict
            report(args, "strict", not names,
                   f"not strict: {why}" if names else "every tool converted strictly")

        if args.big:
            res = await s.call("terminal_execute",
                               {"command": f"head -c {BIG} /dev/zero | tr '\\0' a"}, progress=True)
            r = sc(res)
            stdout = r.get("stdout", "")
            report(args, "big-with-progress",
                   not res[0] and len(stdout) == BIG and set(stdout) == {"a"},
                   f"stdout {len(stdout)} bytes (want {BIG}), exit {r.get('exit_code')}, "
                   f"truncated {r.get('truncated')}, {len(res[3])} progress notifications, "
                   f"via {s.progress_how}" + ("" if r else f"; error: {res[2][:200]}"))

        if args.live_progress and s.progress_how != OPENAI_PROGRESS:
            # SPEC 3.8: a foreground call with a progress token gets its newest output line
            # as notifications/progress (at most one per 250 ms), here streamed over SSE.
            res = await s.call("terminal_execute", {"command": LINES}, progress=True)
            lines = [m for m in res[3] if m and m.startswith("line")]
            want = "".join(f"line{i}\n" for i in range(1, 6))
            report(args, "live-progress", sc(res).get("stdout") == want and bool(lines),
                   f"{len(res[3])} notifications via {s.progress_how}: {res[3][:6]}")

    if args.transport == "http":
        async with opener(args) as s:
            r = sc(await s.call("terminal_execute", {"command": "cat /tmp/f"}))
            if stateless:
                # SPEC 3.2: without sessions the default is the token's principal's.
                report(args, "default-kept", first.get("created") is True
                       and r.get("stdout") == "x\n" and not r.get("created")
                       and r.get("computer_id") == first.get("computer_id"),
                       {"first": first, "second (new connection)": r})
            else:
                # SPEC 3.2: a legacy session's default is that session's own.
                report(args, "session-default-new", r.get("created") is True
                       and r.get("computer_id") != first.get("computer_id"),
                       {"first": first, "new session": r})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--client", required=True, choices=sorted(CLIENTS))
    p.add_argument("--transport", required=True, choices=["stdio", "http"])
    p.add_argument("--era", default="session", choices=["session", "stateless"])
    p.add_argument("--url")
    p.add_argument("--token", default="")
    p.add_argument("--big", action="store_true", help="a 2 MiB result with progress (HTTP)")
    p.add_argument("--live-progress", action="store_true",
                   help="a call printing lines for 3 s gets them as progress (not on WASM)")
    p.add_argument("--backend", default="wasm", help="the server's backend, for the report")
    p.add_argument("--command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    args.version = importlib.metadata.version(PACKAGE[args.client])
    if (args.transport == "http") != bool(args.url) or (args.transport == "stdio") != bool(args.command):
        p.error("--transport http takes --url; --transport stdio takes --command BIN ARG...")
    skip = cannot_run_era(args)
    if skip is not None:
        report(args, "skip-era", skip[0], skip[1] if skip[0] else
               f"no longer true, run this era: {skip[1]}")
        sys.exit(1 if failed else 0)
    try:
        asyncio.run(asyncio.wait_for(checks(args), 240))
    except BaseException as e:  # a client that cannot even connect fails its run, loudly
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        report(args, "run", False, f"{type(e).__name__}: {e}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
