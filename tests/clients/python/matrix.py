"""Issue 45's real-client matrix: Python MCP clients people use, against the real server.

Each client is driven through its own public API (no LLM is called: pydantic-ai and
openai-agents are used through their MCP server classes, which is what their agents do).
One JSON line per check; the exit status is 1 when any check failed.

    matrix.py --client {sdk,sdk1,fastmcp,pydantic-ai,openai-agents}
              --transport {stdio,http} --era {session,stateless}
              (--url URL --token T | --command BIN ARG...) [--big]
"""

from __future__ import annotations

import argparse
import asyncio
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

failed = False


def report(args: argparse.Namespace, check: str, ok: bool, detail: Any = "") -> None:
    global failed
    failed |= not ok
    print(json.dumps({"client": args.client, "backend": args.backend,
                      "transport": args.transport, "era": args.era,
                      "check": check, "ok": ok, "detail": str(detail)[:300]}), flush=True)


class Session:
    """What every client adapter offers: its tool names, and a call answering
    (is_error, structured content, first text block)."""

    tools: set[str]
    call: Callable[..., Awaitable[tuple[bool, dict | None, str]]]
    strict_failures: list[str] | None = None


# ---- the Python SDK (2.x and 1.x) ----

@asynccontextmanager
async def sdk2(args: argparse.Namespace) -> AsyncIterator[Session]:
    import httpx2
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    mode = "2026-07-28" if args.era == "stateless" else "legacy"
    if args.transport == "http":
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {args.token}"},
                                  timeout=httpx2.Timeout(60, read=300))
        server: Any = streamable_http_client(args.url, http_client=http)
    else:
        server = StdioServerParameters(command=args.command[0], args=args.command[1:])
    async with Client(server, mode=mode) as client:
        s = Session()
        s.tools = {t.name for t in (await client.list_tools()).tools}

        async def call(name: str, arguments: dict, progress: bool = False):
            seen: list[float] = []

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                seen.append(p)

            r = await client.call_tool(name, arguments,
                                       progress_callback=on_progress if progress else None)
            text = r.content[0].text if r.content and hasattr(r.content[0], "text") else ""
            return bool(r.is_error), r.structured_content, text

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
            await session.initialize()
            s = Session()
            s.tools = {t.name for t in (await session.list_tools()).tools}

            async def call(name: str, arguments: dict, progress: bool = False):
                async def on_progress(p: float, total: float | None, message: str | None) -> None:
                    pass

                r = await session.call_tool(name, arguments,
                                            progress_callback=on_progress if progress else None)
                text = r.content[0].text if r.content and hasattr(r.content[0], "text") else ""
                return bool(r.isError), r.structuredContent, text

            s.call = call
            yield s


# ---- FastMCP 4 ----

@asynccontextmanager
async def fastmcp(args: argparse.Namespace) -> AsyncIterator[Session]:
    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport, StreamableHttpTransport

    if args.transport == "http":
        transport: Any = StreamableHttpTransport(args.url, auth=args.token)
    else:
        transport = StdioTransport(command=args.command[0], args=args.command[1:])
    mode = "2026-07-28" if args.era == "stateless" else "legacy"
    async with Client(transport, mode=mode) as client:
        s = Session()
        s.tools = {t.name for t in await client.list_tools()}

        async def call(name: str, arguments: dict, progress: bool = False):
            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                pass

            r = await client.call_tool(name, arguments, raise_on_error=False,
                                       progress_handler=on_progress if progress else None)
            text = r.content[0].text if r.content and hasattr(r.content[0], "text") else ""
            return bool(r.is_error), r.structured_content, text

        s.call = call
        yield s


# ---- pydantic-ai and openai-agents: their MCP server classes ----

@asynccontextmanager
async def pydantic_ai(args: argparse.Namespace) -> AsyncIterator[Session]:
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai.mcp import MCPToolset

    from fastmcp import Client
    from fastmcp.client.transports import StreamableHttpTransport

    # Its toolset runs on a FastMCP client; a pre-built one chooses the era.
    mode = "2026-07-28" if args.era == "stateless" else "legacy"
    if args.transport == "http":
        transport: Any = StreamableHttpTransport(args.url, auth=args.token)
    else:
        transport = StdioTransport(command=args.command[0], args=args.command[1:])
    toolset = MCPToolset(Client(transport, mode=mode), tool_error_behavior="error")
    async with toolset:
        s = Session()
        s.tools = {t.name for t in await toolset.list_tools()}

        async def call(name: str, arguments: dict, progress: bool = False):
            try:
                out = await toolset.direct_call_tool(name, arguments)
            except Exception as e:  # a tool error is raised with its text
                return True, None, str(e)
            structured = out if isinstance(out, dict) else None
            return False, structured, json.dumps(out) if structured is not None else str(out)

        s.call = call
        yield s


@asynccontextmanager
async def openai_agents(args: argparse.Namespace) -> AsyncIterator[Session]:
    from agents.mcp import MCPServerStdio, MCPServerStreamableHttp, MCPUtil

    if args.transport == "http":
        server: Any = MCPServerStreamableHttp(
            {"url": args.url, "headers": {"Authorization": f"Bearer {args.token}"}},
            client_session_timeout_seconds=120)
    else:
        server = MCPServerStdio({"command": args.command[0], "args": args.command[1:]},
                                client_session_timeout_seconds=120)
    async with server:
        tools = await server.list_tools()
        s = Session()
        s.tools = {t.name for t in tools}
        # What an agent with `convert_schemas_to_strict` does with each tool: a schema it
        # cannot convert leaves that tool non-strict.
        s.strict_failures = [
            t.name for t in tools
            if not MCPUtil.to_function_tool(t, server, True).strict_json_schema
        ]

        async def call(name: str, arguments: dict, progress: bool = False):
            r = await server.call_tool(name, arguments)
            text = r.content[0].text if r.content and hasattr(r.content[0], "text") else ""
            # Its CallToolResult is the installed mcp's: snake_case on mcp 2.x.
            return (bool(getattr(r, "is_error", None) or getattr(r, "isError", False)),
                    getattr(r, "structured_content", None) or getattr(r, "structuredContent", None),
                    text)

        s.call = call
        yield s


CLIENTS = {"sdk": sdk2, "sdk1": sdk1, "fastmcp": fastmcp, "pydantic-ai": pydantic_ai,
           "openai-agents": openai_agents}


def structured(res: tuple[bool, dict | None, str]) -> dict:
    """The structured result, or the JSON text block where a client hands back only text."""
    if res[1]:
        return res[1]
    try:
        return json.loads(res[2])
    except ValueError:
        return {}


async def checks(args: argparse.Namespace) -> None:
    opener = CLIENTS[args.client]
    async with opener(args) as s:
        report(args, "connect+list", TOOLS <= s.tools, sorted(TOOLS - s.tools) or len(s.tools))
        r = structured(await s.call("terminal_execute", {"command": "echo hi"}))
        report(args, "exec", r.get("stdout") == "hi\n" and r.get("exit_code") == 0, r)
        second = structured(await s.call("terminal_execute", {"command": "echo kept > /tmp/f"}))
        report(args, "created", r.get("created") is True and not second.get("created")
               and second.get("computer_id") == r.get("computer_id"), [r, second])
        err = await s.call("terminal_execute", {"command": "true", "timeout": 0})
        report(args, "bad-input", err[0] and "timeout" in err[2], err[2])
        r = structured(await s.call("terminal_execute",
                                    {"command": "echo $A", "env": [{"name": "A", "value": "1"}]}))
        report(args, "env-list", r.get("stdout") == "1\n", r)
        if s.strict_failures is not None:
            report(args, "strict-schemas", not s.strict_failures, s.strict_failures)
        r = structured(await s.call("terminal_execute",
                                    {"command": "sleep 1; echo done", "yield_ms": 100}))
        job = r.get("job_id")
        out = r.get("stdout", "")
        for _ in range(100):
            if not job:
                break
            p = structured(await s.call("terminal_job", {"job_id": job, "wait_ms": 3000}))
            out += p.get("stdout", "")
            if "exit_code" in p:
                break
        report(args, "job", bool(job) and out == "done\n", out or r)
        await s.call("computer_file_write", {"path": "/tmp/a.txt", "content": "hello"})
        r = structured(await s.call("computer_file_read", {"path": "/tmp/a.txt"}))
        report(args, "files", r.get("content") == "hello", r)
        if args.big:
            r = structured(await s.call(
                "terminal_execute",
                {"command": f"head -c {BIG} /dev/zero | tr '\\0' a"}, progress=True))
            report(args, "big-with-progress", len(r.get("stdout", "")) == BIG,
                   len(r.get("stdout", "")))
    # The default computer is kept across connections of one principal (HTTP) and within
    # one process (stdio).
    # Under 2026-07-28 the default belongs to the principal: a new connection with the same
    # token finds it. A legacy session's default is that session's: a new one gets a new one.
    if args.transport == "http":
        async with opener(args) as s:
            r = structured(await s.call("terminal_execute", {"command": "cat /tmp/f"}))
            if args.era == "stateless":
                report(args, "default-kept", r.get("stdout") == "kept\n"
                       and not r.get("created"), r)
            else:
                report(args, "session-default-new", r.get("created") is True, r)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--client", required=True, choices=sorted(CLIENTS))
    p.add_argument("--transport", required=True, choices=["stdio", "http"])
    p.add_argument("--era", default="session", choices=["session", "stateless"])
    p.add_argument("--url")
    p.add_argument("--token", default="")
    p.add_argument("--big", action="store_true")
    p.add_argument("--backend", default="wasm", help="the server's backend, for the report")
    p.add_argument("--command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    try:
        asyncio.run(asyncio.wait_for(checks(args), 240))
    except Exception as e:  # a client that cannot even connect fails its run, loudly
        report(args, "run", False, f"{type(e).__name__}: {e}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
