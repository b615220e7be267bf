//! The egress gate (SPEC §3.11): every connection of an allow-list computer goes through
//! the server, which decides per connection.
//!
//! How a Docker/Podman computer is confined ([`Gate::confine`], after each start):
//! - the server opens two sockets *inside* the computer's network namespace (a thread
//!   joins it for the `bind` only, [`netns`]): a TCP listener and a UDP socket, on
//!   loopback ports the kernel picks;
//! - nftables rules in that namespace, written from the host (`nsenter -n nft`), redirect
//!   every outgoing IPv4 TCP connection to the listener and every DNS datagram to the UDP
//!   socket, and drop every other packet that would leave (UDP, ICMP, IPv6); the computer
//!   runs without `CAP_NET_ADMIN` and `CAP_NET_RAW`, so root inside can neither change the
//!   rules nor go around them with raw or packet sockets;
//! - a redirected connection keeps its original destination (`SO_ORIGINAL_DST`); the gate
//!   reads the name the program gave (TLS SNI, the HTTP `Host`, or the name its DNS answer
//!   was for, [`sniff`]), asks the policy, connects upstream from the host (to the name's
//!   own addresses, so an SNI cannot carry a connection to another address) and splices
//!   the bytes ([`tcp`]); a DNS question is answered only for an allowed name ([`dns`]).
//!
//! Every refusal is logged for the computer ([`Confined::blocked_since`] gives a call's
//! `network_blocked`) and counted for `/metrics`.
//!
//! Secrets (`--egress-secret`, [`secrets`]): a connection to a secret's host, for a
//! computer whose environment holds that secret's placeholder, is not spliced but carried
//! through the gate's own HTTP ([`intercept`]), which puts the value in place of the
//! placeholder; TLS to those hosts only is terminated with certificates of the gate's
//! per-server authority ([`authority`]), which the computer trusts.

#[cfg(feature = "tls")]
mod authority;
mod dns;
#[cfg(feature = "tls")]
mod intercept;
mod netns;
pub mod secrets;
mod sniff;
mod tcp;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shared::egress::{BLOCKED_MAX, Blocked, Denial, Policy};
use tokio::task::AbortHandle;

use secrets::{EgressSecret, Swaps};

/// Why a computer could not be confined.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(
        "the egress gate cannot reach this computer's network namespace ({0}): an allow list needs the server on the engine's host, as root; use --network or --no-network otherwise"
    )]
    Namespace(std::io::Error),
    #[error(
        "the egress gate could not install its rules with `nsenter -n nft` ({0}): an allow list needs nftables (the `nft` command) and `nsenter` on the server's host"
    )]
    Rules(String),
    /// The gate's TLS for secrets could not be set up (at start).
    #[error("{0}")]
    Tls(String),
}

/// The server's gate: what every confined computer shares.
#[derive(Debug)]
pub struct Gate {
    /// `--egress-resolve`: names pinned to an address.
    pins: HashMap<String, IpAddr>,
    /// `--egress-dns`: the upstream resolver (else the host's own).
    upstream_dns: Option<SocketAddr>,
    /// The server's own addresses (refused unless a rule names them).
    host: Vec<IpAddr>,
    blocked_total: AtomicU64,
    /// `--egress-secret`: what computers' placeholders stand for.
    secrets: Vec<EgressSecret>,
    /// The TLS of connections to the secrets' hosts (`None`: no secrets).
    #[cfg(feature = "tls")]
    authority: Option<Arc<authority::Authority>>,
}

/// How long a name the gate's DNS answered stands for its addresses (a connection that
/// carries no name, e.g. SSH, is judged by it).
const ANSWER_TTL: Duration = Duration::from_secs(600);

/// The most refusals kept per computer.
const LOG_MAX: usize = 256;

/// One refusal, when it happened.
#[derive(Debug, Clone)]
struct Refusal {
    at: Instant,
    blocked: Blocked,
}

/// One confined computer's state, shared by its listeners.
#[derive(Debug)]
pub struct Confined {
    gate: Arc<Gate>,
    policy: Policy,
    /// The computer's secrets (its placeholders and what they stand for).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    swaps: Swaps,
    log: Mutex<Vec<Refusal>>,
    /// Addresses the gate's DNS gave for allowed names.
    answered: Mutex<HashMap<Ipv4Addr, (String, Instant)>>,
}

/// A confined computer: its listeners run until this is dropped.
#[derive(Debug)]
pub struct Confinement {
    pub confined: Arc<Confined>,
    tasks: Vec<AbortHandle>,
}

impl Drop for Confinement {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Gate {
    /// The server's gate. With `secrets`, it makes its certificate authority now and
    /// verifies upstream servers against the system's roots and `ca_file`'s.
    pub fn new(
        pins: &[(String, IpAddr)],
        upstream_dns: Option<SocketAddr>,
        secrets: &[EgressSecret],
        ca_file: Option<&std::path::Path>,
    ) -> Result<Arc<Gate>, GateError> {
        #[cfg(feature = "tls")]
        let authority = match secrets.is_empty() {
            true => None,
            false => {
                let mut hosts: Vec<String> = secrets.iter().flat_map(|s| s.hosts.clone()).collect();
                hosts.sort();
                hosts.dedup();
                let a = authority::Authority::new(&hosts, ca_file)
                    .map_err(|e| GateError::Tls(e.to_string()))?;
                Some(Arc::new(a))
            }
        };
        #[cfg(not(feature = "tls"))]
        if !secrets.is_empty() || ca_file.is_some() {
            return Err(GateError::Tls(
                "--egress-secret needs a build with TLS (the `tls` feature); this binary has none"
                    .into(),
            ));
        }
        Ok(Arc::new(Gate {
            pins: pins
                .iter()
                .filter_map(|(n, ip)| Some((shared::egress::normal_name(n)?, *ip)))
                .collect(),
            upstream_dns,
            host: own_addresses(),
            blocked_total: AtomicU64::new(0),
            secrets: secrets.to_vec(),
            #[cfg(feature = "tls")]
            authority,
        }))
    }

    /// Does this gate put secrets into requests (`--egress-secret`)?
    pub fn has_secrets(&self) -> bool {
        !self.secrets.is_empty()
    }

    /// The secrets a computer whose environment is `env` holds placeholders for.
    pub fn swaps_of(&self, env: &[String]) -> Swaps {
        Swaps::of_env(&self.secrets, env)
    }

    /// The certificate computers trust for the secrets' hosts (PEM), when there are secrets.
    #[cfg(feature = "tls")]
    pub fn ca_pem(&self) -> Option<&str> {
        self.authority.as_ref().map(|a| a.ca_pem.as_str())
    }

    #[cfg(not(feature = "tls"))]
    pub fn ca_pem(&self) -> Option<&str> {
        None
    }

    /// Refusals since the server started (`msc_egress_blocked_total`).
    pub fn blocked_total(&self) -> u64 {
        self.blocked_total.load(Ordering::Relaxed)
    }

    /// Confines the computer whose main process is `pid` (on the engine's host) to
    /// `policy`: opens the gate's sockets in its namespace and installs the rules.
    /// `swaps`: its secrets ([`Gate::swaps_of`]).
    pub async fn confine(
        self: &Arc<Self>,
        pid: u32,
        policy: Policy,
        swaps: Swaps,
    ) -> Result<Confinement, GateError> {
        let (tcp, udp) = tokio::task::spawn_blocking(move || netns::open_sockets(pid))
            .await
            .map_err(|e| GateError::Namespace(std::io::Error::other(e.to_string())))?
            .map_err(GateError::Namespace)?;
        let tcp_port = tcp.local_addr().map_err(GateError::Namespace)?.port();
        let udp_port = udp.local_addr().map_err(GateError::Namespace)?.port();
        netns::install_rules(pid, tcp_port, udp_port).await?;
        let confined = Arc::new(Confined {
            gate: self.clone(),
            policy,
            swaps,
            log: Mutex::default(),
            answered: Mutex::default(),
        });
        let tcp = tokio::net::TcpListener::from_std(tcp).map_err(GateError::Namespace)?;
        let udp = tokio::net::UdpSocket::from_std(udp).map_err(GateError::Namespace)?;
        let tasks = vec![
            tokio::spawn(tcp::serve(tcp, confined.clone())).abort_handle(),
            tokio::spawn(dns::serve(udp, confined.clone())).abort_handle(),
        ];
        Ok(Confinement { confined, tasks })
    }
}

impl Confined {
    /// Records a refusal (and counts it).
    fn refuse(&self, host: &str, port: u16, why: Denial) {
        self.gate.blocked_total.fetch_add(1, Ordering::Relaxed);
        crate::metrics::egress_blocked();
        tracing::debug!(host, port, reason = why.reason(), "egress blocked");
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        if log.len() == LOG_MAX {
            log.remove(0);
        }
        log.push(Refusal {
            at: Instant::now(),
            blocked: Blocked::new(host, port, why),
        });
    }

    /// The refusals since `t`, each once, at most [`BLOCKED_MAX`], oldest first.
    pub fn blocked_since(&self, t: Instant) -> Vec<Blocked> {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = HashSet::new();
        log.iter()
            .filter(|r| r.at >= t)
            .filter(|r| seen.insert(r.blocked.clone()))
            .map(|r| r.blocked.clone())
            .take(BLOCKED_MAX)
            .collect()
    }

    /// Remembers that the gate's DNS answered `name` with `ips`.
    fn answered(&self, name: &str, ips: &[Ipv4Addr]) {
        let mut map = self.answered.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        map.retain(|_, (_, at)| now.duration_since(*at) < ANSWER_TTL);
        for ip in ips {
            map.insert(*ip, (name.to_owned(), now));
        }
    }

    /// The allowed name the gate's DNS gave `ip` for, if it still stands.
    fn name_of(&self, ip: Ipv4Addr) -> Option<String> {
        let map = self.answered.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&ip)
            .filter(|(_, at)| at.elapsed() < ANSWER_TTL)
            .map(|(n, _)| n.clone())
    }
}

/// The addresses of this host a computer could reach it by: its outbound address (found
/// without sending anything), and loopback.
fn own_addresses() -> Vec<IpAddr> {
    let mut out = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
    if let Ok(s) = std::net::UdpSocket::bind("0.0.0.0:0")
        && s.connect("192.0.2.1:9").is_ok()
        && let Ok(a) = s.local_addr()
    {
        out.push(a.ip());
    }
    out
}
