// The floor of the gateway benchmark: a Worker that only forwards the request it gets to
// the executor (same path under /v1, same headers and body) and returns the answer.
// No auth, no Durable Object, no MCP: what any Worker in front of an executor pays.
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname === "/healthz") return Response.json({ status: "ok" });
    return fetch(env.EXECUTOR_URL + url.pathname + url.search, {
      method: request.method,
      headers: request.headers,
      body: request.method === "GET" ? undefined : await request.arrayBuffer(),
    });
  },
};
