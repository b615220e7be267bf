//! Local simulators of the providers' REST APIs, for tests that cannot reach the real
//! services. Each simulator validates every request against the provider's published API
//! description (in `specs/`) before serving it, so it cannot drift into agreeing with a
//! client bug.

pub mod fly;
pub mod openapi;
