//! Logging: `tracing` events and spans go to the Workers console (`wrangler tail`, the
//! dashboard's logs), one line each. Every MCP request has a span with `team` and
//! `method`; every tool call one with `tool` and `computer_id`, closed by an event with
//! its outcome (the error code at `warn`, `ok` at `info`) and duration. Tokens, arguments
//! and outputs are never logged.

use tracing_subscriber::fmt::MakeWriter;

/// One log line, written to the console when dropped.
pub(crate) struct ConsoleLine(Vec<u8>);

impl std::io::Write for ConsoleLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for ConsoleLine {
    fn drop(&mut self) {
        let line = String::from_utf8_lossy(&self.0);
        let line = line.trim_end();
        if !line.is_empty() {
            worker::console_log!("{line}");
        }
    }
}

/// The console as a `tracing_subscriber` writer.
pub(crate) struct Console;

impl<'a> MakeWriter<'a> for Console {
    type Writer = ConsoleLine;

    fn make_writer(&'a self) -> Self::Writer {
        ConsoleLine(Vec::new())
    }
}

/// Installs the subscriber, once per isolate (no clock: the console stamps lines itself).
/// Called at the top of every request: cheap after the first, and `level` (the `LOG_LEVEL`
/// var: `error`, `warn`, `info`, `debug`) is read only then. The default `warn` logs failed
/// tool calls only,
/// since a console line per call costs the warm path about 2 ms (measured under
/// `wrangler dev`).
pub(crate) fn init(level: impl FnOnce() -> Option<String>) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let level = level()
            .and_then(|l| l.trim().parse::<tracing::Level>().ok())
            .unwrap_or(tracing::Level::WARN);
        let _ = tracing_subscriber::fmt()
            .with_writer(Console)
            .without_time()
            .with_ansi(false)
            .with_target(false)
            .with_max_level(level)
            .try_init();
    });
}
