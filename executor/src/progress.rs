//! MCP progress notifications while a computer is being made (image pull, create, start).
//!
//! A caller opts in with `_meta.progressToken`; transports that can deliver notifications
//! alongside a pending request (stdio) hand the host a sender. Where there is no token or
//! no channel, reporting is a no-op.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

/// Where progress goes for one tool call.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    sink: Option<(UnboundedSender<Value>, Value)>,
    step: Arc<AtomicU64>,
}

impl Progress {
    /// Progress for a call with `token`, delivered on `tx`.
    pub fn new(tx: Option<UnboundedSender<Value>>, token: Option<Value>) -> Self {
        Self {
            sink: tx.zip(token),
            step: Arc::default(),
        }
    }

    /// Sends `notifications/progress` with a strictly increasing `progress`.
    pub fn report(&self, message: &str) {
        if let Some((tx, token)) = &self.sink {
            let progress = self.step.fetch_add(1, Ordering::Relaxed) + 1;
            let _ = tx.send(json!({
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": progress, "message": message},
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_increase_and_need_a_token() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        Progress::new(Some(tx.clone()), None).report("x");
        assert!(rx.try_recv().is_err());
        let p = Progress::new(Some(tx), Some(json!("t1")));
        p.report("a");
        p.report("b");
        let a = rx.try_recv().unwrap();
        let b = rx.try_recv().unwrap();
        assert_eq!(a["params"]["progressToken"], "t1");
        assert_eq!(a["params"]["progress"], 1);
        assert_eq!(b["params"]["progress"], 2);
        assert_eq!(b["params"]["message"], "b");
    }
}
