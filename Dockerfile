# mcp-sandbox-computer-vm-for-ai as an image FROM scratch: the static x86_64 musl binary
# (the in-computer supervisor embedded) and nothing else, so it builds without any
# container registry. Build the binary first, then the image:
#   scripts/build-static
#   docker build -t mcp-sandbox-computer .
# The HTTP server:  docker run -v /var/run/docker.sock:/var/run/docker.sock -p 127.0.0.1:8435:8435 \
#                     -e KILNTAINERS_AUTH_TOKEN=… mcp-sandbox-computer
# An executor:      … mcp-sandbox-computer executor --listen 0.0.0.0:8436 --executor-name NAME
#                     (MSC_EXECUTOR_SECRET=…; NAME as the gateway's EXECUTORS calls it)
# See compose.yaml for both.
FROM scratch
ARG BINARY=target/x86_64-unknown-linux-musl/release/mcp-sandbox-computer-vm-for-ai
COPY ${BINARY} /mcp-sandbox-computer-vm-for-ai
ENV HOME=/data MCP_SANDBOX_STATE_DIR=/data
VOLUME /data
EXPOSE 8435 8436
ENTRYPOINT ["/mcp-sandbox-computer-vm-for-ai"]
CMD ["--transport", "http", "--host", "0.0.0.0", "--port", "8435"]
