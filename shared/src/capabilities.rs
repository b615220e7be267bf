//! What a backend can do, declared by the backend and read by the controller.
//!
//! Every place computers live (Docker/Podman, the WASM toolbox, one WASI module, Fly, E2B,
//! Modal) is a [`BackendKind`]: a closed set whose names are the `backend` field of
//! `computer_list` items. Each kind declares the most it can do as [`Capabilities`]
//! ([`BackendKind::capabilities`]); one server's backend may do less (Docker without its
//! supervisor keeps no jobs) and says so at run time. The controller asks
//! [`Capabilities::require`] before an operation that needs one, and never asks which
//! backend it holds; the refusal names the backends that can ([`Unsupported`]).
//!
//! The table says what is built, not what a provider offers: a capability appears here in
//! the same change that makes a backend serve it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One thing a backend may or may not do (SPEC §3.8–§3.13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// Commands left running as jobs (`yield_ms`, `terminal_job`; SPEC §3.8).
    Jobs,
    /// The file tools and `/v1/files` (SPEC §3.9).
    Files,
    /// Snapshots of a computer's filesystem (SPEC §3.12).
    Snapshots,
    /// Snapshots that keep running processes and memory too.
    MemorySnapshots,
    /// A new computer from another's filesystem or a snapshot.
    Fork,
    /// Idle suspend and wake on the next call.
    Suspend,
    /// Ports reached through preview URLs (SPEC §3.13).
    Ports,
    /// An egress allow list enforced below the programs (SPEC §3.11).
    EgressPolicy,
    /// Secrets substituted on the wire, never inside the computer.
    Secrets,
}

impl Capability {
    /// Every capability, in declaration order.
    pub const ALL: [Capability; 9] = [
        Capability::Jobs,
        Capability::Files,
        Capability::Snapshots,
        Capability::MemorySnapshots,
        Capability::Fork,
        Capability::Suspend,
        Capability::Ports,
        Capability::EgressPolicy,
        Capability::Secrets,
    ];

    /// The wire name (`jobs`, `memory_snapshots`, …).
    pub fn name(self) -> &'static str {
        match self {
            Capability::Jobs => "jobs",
            Capability::Files => "files",
            Capability::Snapshots => "snapshots",
            Capability::MemorySnapshots => "memory_snapshots",
            Capability::Fork => "fork",
            Capability::Suspend => "suspend",
            Capability::Ports => "ports",
            Capability::EgressPolicy => "egress_policy",
            Capability::Secrets => "secrets",
        }
    }

    /// What it lets a caller do, for refusals ("… cannot {what}").
    pub fn what(self) -> &'static str {
        match self {
            Capability::Jobs => "keep commands running as jobs",
            Capability::Files => "read and write files through the file tools",
            Capability::Snapshots => "take snapshots of a computer",
            Capability::MemorySnapshots => "snapshot running processes and memory",
            Capability::Fork => "fork a computer",
            Capability::Suspend => "suspend idle computers",
            Capability::Ports => "open ports through preview URLs",
            Capability::EgressPolicy => "enforce a network allow list",
            Capability::Secrets => "keep secrets outside the computer",
        }
    }

    const fn bit(self) -> u16 {
        1 << self as u16
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of [`Capability`]s; on the wire, a sorted list of their names.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Capabilities(u16);

impl Capabilities {
    /// Nothing beyond running commands.
    pub const NONE: Capabilities = Capabilities(0);

    /// The set of `caps`.
    pub const fn of(caps: &[Capability]) -> Capabilities {
        let mut bits = 0;
        let mut i = 0;
        while i < caps.len() {
            bits |= caps[i].bit();
            i += 1;
        }
        Capabilities(bits)
    }

    pub const fn has(self, cap: Capability) -> bool {
        self.0 & cap.bit() != 0
    }

    /// This set with `cap` added.
    #[must_use]
    pub const fn with(self, cap: Capability) -> Capabilities {
        Capabilities(self.0 | cap.bit())
    }

    /// This set without `cap`.
    #[must_use]
    pub const fn without(self, cap: Capability) -> Capabilities {
        Capabilities(self.0 & !cap.bit())
    }

    /// What both sets have.
    #[must_use]
    pub const fn and(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 & other.0)
    }

    /// The capabilities in the set, in declaration order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL.into_iter().filter(move |c| self.has(*c))
    }

    /// `Ok` when `backend` (which has these capabilities) can do `cap`; else the refusal
    /// that names the kinds of backend that can.
    pub fn require(self, backend: &str, cap: Capability) -> Result<(), Unsupported> {
        match self.has(cap) {
            true => Ok(()),
            false => Err(Unsupported {
                capability: cap,
                backend: backend.to_owned(),
                reason: None,
            }),
        }
    }
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<Capability> for Capabilities {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        iter.into_iter()
            .fold(Capabilities::NONE, Capabilities::with)
    }
}

impl Serialize for Capabilities {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Capabilities {
    /// Names this build does not know are skipped: a newer executor may declare more.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        Ok(names
            .iter()
            .filter_map(|n| Capability::ALL.into_iter().find(|c| c.name() == n))
            .collect())
    }
}

/// Every kind of place computers live. Closed: a new backend is a new variant, and the
/// compiler shows every table that must learn it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BackendKind {
    /// Docker or Podman containers (`--backend docker`).
    #[serde(rename = "docker")]
    Docker,
    /// The embedded WASM toolbox (`--backend go_busybox`, the default without an engine).
    #[serde(rename = "go_busybox")]
    Toolbox,
    /// One WASI command module (`--backend wasm --wasm-path FILE`).
    #[serde(rename = "wasm")]
    WasmModule,
    /// Fly Machines.
    #[serde(rename = "fly")]
    Fly,
    /// E2B sandboxes.
    #[serde(rename = "e2b")]
    E2b,
    /// Modal sandboxes (executor only: gRPC).
    #[serde(rename = "modal")]
    Modal,
}

/// Jobs and files: what every backend serves today (over the supervisor, the WASM job
/// table, or the POSIX runner over the provider's exec).
const BASE: Capabilities = Capabilities::of(&[Capability::Jobs, Capability::Files]);

impl BackendKind {
    /// Every kind, in the order refusals name them.
    pub const ALL: [BackendKind; 6] = [
        BackendKind::Docker,
        BackendKind::Toolbox,
        BackendKind::WasmModule,
        BackendKind::Fly,
        BackendKind::E2b,
        BackendKind::Modal,
    ];

    /// The name shown as `backend` in `computer_list` items and taken by `--backend`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Docker => "docker",
            BackendKind::Toolbox => "go_busybox",
            BackendKind::WasmModule => "wasm",
            BackendKind::Fly => "fly",
            BackendKind::E2b => "e2b",
            BackendKind::Modal => "modal",
        }
    }

    /// The kind named `name` (as [`BackendKind::name`] writes it).
    pub fn parse(name: &str) -> Option<BackendKind> {
        BackendKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The names `/v1/health` lists for a server of this kind: its own, and `wasm` beside
    /// `go_busybox` (the toolbox runs any WASI module too).
    pub fn served_names(self) -> &'static [&'static str] {
        match self {
            BackendKind::Toolbox => &["go_busybox", "wasm"],
            BackendKind::Docker => &["docker"],
            BackendKind::WasmModule => &["wasm"],
            BackendKind::Fly => &["fly"],
            BackendKind::E2b => &["e2b"],
            BackendKind::Modal => &["modal"],
        }
    }

    /// The most a backend of this kind can do in this build.
    pub const fn capabilities(self) -> Capabilities {
        match self {
            // Snapshots as committed images (Docker) or directory copies (WASM), forks
            // started from them (SPEC §3.12).
            BackendKind::Docker | BackendKind::Toolbox | BackendKind::WasmModule => {
                BASE.with(Capability::Snapshots).with(Capability::Fork)
            }
            BackendKind::Fly | BackendKind::E2b | BackendKind::Modal => BASE,
        }
    }

    /// The kinds that can do `cap`, by name.
    pub fn able(cap: Capability) -> Vec<&'static str> {
        BackendKind::ALL
            .into_iter()
            .filter(|k| k.capabilities().has(cap))
            .map(BackendKind::name)
            .collect()
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A call that needs what its computer's backend cannot do. The message names the
/// backends that can, so the operator knows what to switch to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub capability: Capability,
    /// The backend's name as `computer_list` shows it.
    pub backend: String,
    /// Why this server's backend cannot, when its kind can elsewhere (how it was
    /// configured), and what to change.
    pub reason: Option<String>,
}

impl Unsupported {
    /// The same refusal, saying why this server cannot and what to change.
    #[must_use]
    pub fn because(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cap = self.capability;
        if let Some(reason) = &self.reason {
            return write!(
                f,
                "this server's {} backend cannot {}: {reason}",
                self.backend,
                cap.what()
            );
        }
        write!(f, "the {} backend cannot {}", self.backend, cap.what())?;
        let able: Vec<&str> = BackendKind::able(cap)
            .into_iter()
            .filter(|n| *n != self.backend)
            .collect();
        match able.as_slice() {
            [] => write!(f, "; no backend of this build can yet"),
            names => write!(
                f,
                "; backends that can: {} (--backend, or a gateway placement)",
                names.join(", ")
            ),
        }
    }
}

impl std::error::Error for Unsupported {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_holds_what_was_put_in_and_nothing_else() {
        let set = Capabilities::of(&[Capability::Fork, Capability::Secrets]);
        for cap in Capability::ALL {
            assert_eq!(
                set.has(cap),
                matches!(cap, Capability::Fork | Capability::Secrets),
                "{cap}"
            );
        }
        assert_eq!(
            set.without(Capability::Fork).iter().collect::<Vec<_>>(),
            [Capability::Secrets]
        );
        assert_eq!(set.and(BASE), Capabilities::NONE);
        assert_eq!(
            Capability::ALL
                .into_iter()
                .collect::<Capabilities>()
                .iter()
                .count(),
            Capability::ALL.len()
        );
    }

    #[test]
    fn sets_travel_as_sorted_names_and_unknown_names_are_skipped() {
        let set = Capabilities::NONE
            .with(Capability::Ports)
            .with(Capability::Jobs);
        let text = serde_json::to_string(&set).unwrap();
        assert_eq!(text, r#"["jobs","ports"]"#);
        let back: Capabilities =
            serde_json::from_str(r#"["ports","teleport","jobs","ports"]"#).unwrap();
        assert_eq!(back, set);
        assert!(serde_json::from_str::<Capabilities>(r#""jobs""#).is_err());
    }

    #[test]
    fn names_and_kinds_round_trip() {
        for kind in BackendKind::ALL {
            assert_eq!(BackendKind::parse(kind.name()), Some(kind));
            let wire = serde_json::to_value(kind).unwrap();
            assert_eq!(wire, kind.name());
            assert_eq!(kind.served_names()[0], kind.name());
        }
        assert_eq!(BackendKind::parse("podman"), None);
        for cap in Capability::ALL {
            let wire = serde_json::to_value(cap).unwrap();
            assert_eq!(wire, cap.name());
        }
    }

    #[test]
    fn a_refusal_names_the_backends_that_can() {
        let none = Capabilities::NONE;
        let e = none.require("docker", Capability::Jobs).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the docker backend cannot keep commands running as jobs; backends that can: \
             go_busybox, wasm, fly, e2b, modal (--backend, or a gateway placement)"
        );
        let e = BASE.require("e2b", Capability::Fork).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the e2b backend cannot fork a computer; backends that can: docker, go_busybox, \
             wasm (--backend, or a gateway placement)"
        );
        let e = BASE.require("e2b", Capability::Secrets).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the e2b backend cannot keep secrets outside the computer; no backend of this build can yet"
        );
        assert_eq!(BASE.require("e2b", Capability::Files), Ok(()));
        let e = none
            .require("docker", Capability::Jobs)
            .unwrap_err()
            .because("it runs without the supervisor");
        assert_eq!(
            e.to_string(),
            "this server's docker backend cannot keep commands running as jobs: it runs without the supervisor"
        );
    }
}
