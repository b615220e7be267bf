//! Network policy (SPEC §3.11): where a computer may connect, sans I/O.
//!
//! A [`Policy`] is `all`, `none` or an allow list of [`Rule`]s. The server's policy comes
//! from its flags (`--network`, `--no-network`, `--egress-allow`); an agent may narrow it
//! for one computer ([`Policy::narrow`]), never widen it. The egress gate asks the policy
//! about each connection, by the name the program gave (TLS SNI, HTTP Host, a DNS
//! question: [`Policy::allows_name`]) and by the address it goes to
//! ([`Policy::allows_addr`]). In allow-list mode loopback, link-local (the cloud metadata
//! address among them), private ranges and the server's own host are refused unless a
//! rule names them exactly: an IP or CIDR rule, or a name pinned with `--egress-resolve`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The ports a name rule allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ports {
    /// No port given: 80 and 443.
    Web,
    One(u16),
}

impl Ports {
    pub fn has(self, port: u16) -> bool {
        match self {
            Ports::Web => port == 80 || port == 443,
            Ports::One(p) => p == port,
        }
    }

    /// Does every port of `self` lie in `outer`?
    fn inside(self, outer: Ports) -> bool {
        match self {
            Ports::Web => outer == Ports::Web,
            Ports::One(p) => outer.has(p),
        }
    }
}

/// One rule of an allow list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Rule {
    /// `pypi.org`, `github.com:22`: that name only (lower case, no trailing dot).
    Name { name: String, ports: Ports },
    /// `*.npmjs.org`: any subdomain of `npmjs.org`, not the bare name.
    Subdomains { suffix: String, ports: Ports },
    /// `10.0.0.5`, `10.0.0.0/8`, `fd00::/8`: those addresses, on every port.
    Net(IpNet),
}

/// Why a rule or a policy was refused (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPolicy {
    #[error(
        "network rule {0:?} is not a host name, `*.` plus a domain, an IP address or a CIDR (with an optional `:port` after a name), e.g. pypi.org, *.npmjs.org, github.com:22, 10.0.0.5, 10.0.0.0/8"
    )]
    Rule(String),
    #[error("network rule {0:?}: an IP or CIDR rule allows every port; write it without `:port`")]
    PortOnAddress(String),
    #[error("network rule {0:?}: a port is a number from 1 to 65535")]
    Port(String),
    #[error(
        "`network` must be \"none\" or {{\"allow\": [rules]}} (rules are host names, *.domain, IPs or CIDRs), got {0}"
    )]
    Shape(String),
    #[error("an allow list needs at least one rule; for no network at all ask for \"none\"")]
    Empty,
    #[error("an allow list takes at most {MAX_RULES} rules, got {0}")]
    TooMany(usize),
}

/// Most rules in one allow list.
pub const MAX_RULES: usize = 256;

/// Longest host name (RFC 1035).
const MAX_NAME: usize = 253;

/// A host name as rules and connections compare it: lower case, no trailing dot; labels of
/// letters, digits, `-` and `_`, 1 to 63 bytes, not starting or ending with `-`. `None`:
/// not a host name.
pub fn normal_name(raw: &str) -> Option<String> {
    let name = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
    let fine = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        // All digits and dots is an address, not a name.
        && !name.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    fine.then_some(name)
}

/// Is `name` a proper subdomain of `suffix` (`a.b.c` of `b.c`, not `b.c` itself)?
fn is_subdomain(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

impl FromStr for Rule {
    type Err = BadPolicy;

    fn from_str(raw: &str) -> Result<Rule, BadPolicy> {
        let text = raw.trim();
        let bad = || BadPolicy::Rule(raw.to_owned());
        if let Ok(net) = text.parse::<IpNet>() {
            return Ok(Rule::Net(net.trunc()));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Rule::Net(IpNet::from(ip)));
        }
        // A URL or a path is not a rule.
        if text.contains('/') {
            return Err(bad());
        }
        // An address with a port: `10.0.0.5:80`, `[::1]:8080`.
        if text.parse::<std::net::SocketAddr>().is_ok() {
            return Err(BadPolicy::PortOnAddress(raw.to_owned()));
        }
        let (host, ports) = match text.rsplit_once(':') {
            Some((h, p)) => {
                let port = p
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| BadPolicy::Port(raw.to_owned()))?;
                (h, Ports::One(port))
            }
            None => (text, Ports::Web),
        };
        if host.parse::<IpAddr>().is_ok() || host.parse::<IpNet>().is_ok() {
            return Err(BadPolicy::PortOnAddress(raw.to_owned()));
        }
        match host.strip_prefix("*.") {
            Some(suffix) => {
                let suffix = normal_name(suffix).ok_or_else(bad)?;
                Ok(Rule::Subdomains { suffix, ports })
            }
            None => {
                let name = normal_name(host).ok_or_else(bad)?;
                Ok(Rule::Name { name, ports })
            }
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let port = |f: &mut fmt::Formatter<'_>, ports: &Ports| match ports {
            Ports::Web => Ok(()),
            Ports::One(p) => write!(f, ":{p}"),
        };
        match self {
            Rule::Name { name, ports } => {
                f.write_str(name)?;
                port(f, ports)
            }
            Rule::Subdomains { suffix, ports } => {
                write!(f, "*.{suffix}")?;
                port(f, ports)
            }
            // One address prints without its prefix length.
            Rule::Net(net) if net.prefix_len() == net.max_prefix_len() => {
                write!(f, "{}", net.addr())
            }
            Rule::Net(net) => write!(f, "{net}"),
        }
    }
}

impl Rule {
    /// Does this rule name `host` (a normal name) on `port`?
    fn names(&self, host: &str, port: u16) -> bool {
        match self {
            Rule::Name { name, ports } => name == host && ports.has(port),
            Rule::Subdomains { suffix, ports } => is_subdomain(host, suffix) && ports.has(port),
            Rule::Net(_) => false,
        }
    }

    /// Does every connection this rule allows also pass `outer`?
    fn inside(&self, outer: &Rule) -> bool {
        match (self, outer) {
            (Rule::Name { name, ports }, Rule::Name { name: o, ports: op }) => {
                name == o && ports.inside(*op)
            }
            (Rule::Name { name, ports }, Rule::Subdomains { suffix, ports: op }) => {
                is_subdomain(name, suffix) && ports.inside(*op)
            }
            (
                Rule::Subdomains { suffix, ports },
                Rule::Subdomains {
                    suffix: o,
                    ports: op,
                },
            ) => (suffix == o || is_subdomain(suffix, o)) && ports.inside(*op),
            (Rule::Net(net), Rule::Net(o)) => o.contains(net),
            _ => false,
        }
    }
}

/// Where a computer may connect.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Policy {
    /// Anywhere (`--network`, the default).
    #[default]
    All,
    /// Nowhere (`--no-network`, or `"none"` asked for one computer).
    None,
    /// The listed rules only (`--egress-allow`, or `{"allow": [...]}` for one computer).
    Allow(Vec<Rule>),
}

/// Why an agent's policy for a computer was refused: it would widen the server's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Widening {
    #[error(
        "this server allows no network: a computer cannot have any (ask for \"none\" or leave `network` out)"
    )]
    NoNetwork,
    #[error(
        "network rule {rule} lies outside this server's allow list ({server}); a computer may only narrow it: ask for rules inside it, or an operator can add --egress-allow {rule}"
    )]
    Outside { rule: String, server: String },
}

/// Why a connection was refused: the reason in `network_blocked` and in the stderr notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// The policy is `none`.
    NoNetwork,
    /// No rule names it.
    NotListed,
    /// A special address (loopback, link-local, private, this host) no rule names exactly.
    Special(&'static str),
    /// A secret's host whose certificate the gate could not verify (SPEC §3.11: upstream
    /// certificates are verified before a secret goes out).
    Untrusted,
}

impl Denial {
    /// The reason as results show it.
    pub fn reason(self) -> &'static str {
        match self {
            Denial::NoNetwork => "network disabled",
            Denial::NotListed => "not in the allow list",
            Denial::Special(what) => what,
            Denial::Untrusted => "certificate not verified",
        }
    }

    /// The one stderr line for a blocked `host`:`port` (SPEC §3.11), naming the flag that
    /// would allow it.
    pub fn notice(self, host: &str, port: u16) -> String {
        let rule = match port {
            // An address rule allows every port; a name rule without one, 80 and 443.
            _ if host.parse::<IpAddr>().is_ok() => host.to_owned(),
            80 | 443 => host.to_owned(),
            // A refused DNS question: the name, for the web ports.
            DNS_PORT => host.to_owned(),
            p => format!("{host}:{p}"),
        };
        if port == DNS_PORT && host.parse::<IpAddr>().is_err() {
            let how = match self {
                Denial::NoNetwork => "an operator can start the server with --network".to_owned(),
                _ => format!("an operator can add --egress-allow {rule}"),
            };
            return format!("blocked the name {host} ({}; {how})", self.reason());
        }
        let how = match self {
            Denial::NoNetwork => "an operator can start the server with --network".to_owned(),
            Denial::NotListed | Denial::Special(_) => {
                format!("an operator can add --egress-allow {rule}")
            }
            Denial::Untrusted => {
                "an operator can add the CA that signed it with --egress-ca-file".to_owned()
            }
        };
        format!("blocked {host}:{port} ({}; {how})", self.reason())
    }
}

/// One refused connection or name, as a result lists it (`network_blocked`, SPEC §3.11).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Blocked {
    /// The name the program gave (SNI, Host, a DNS question), else the address.
    pub host: String,
    pub port: u16,
    pub reason: String,
}

impl Blocked {
    pub fn new(host: &str, port: u16, why: Denial) -> Blocked {
        Blocked {
            host: host.to_owned(),
            port,
            reason: why.reason().to_owned(),
        }
    }

    /// The stderr notice for it ([`Denial::notice`]).
    pub fn notice(&self) -> String {
        let why = match self.reason.as_str() {
            r if r == Denial::NoNetwork.reason() => Denial::NoNetwork,
            r if r == Denial::Untrusted.reason() => Denial::Untrusted,
            _ => Denial::NotListed,
        };
        let line = why.notice(&self.host, self.port);
        // The reason as it was (a special address says which).
        line.replacen(why.reason(), &self.reason, 1)
    }
}

/// The port a refused DNS question is listed with.
pub const DNS_PORT: u16 = 53;

/// The most entries one result lists.
pub const BLOCKED_MAX: usize = 20;

/// How a connection's address was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The program dialled the address itself.
    Literal,
    /// Resolved by the gate from an allowed name.
    Resolved,
    /// An allowed name pinned to it with `--egress-resolve`.
    Pinned,
}

/// The special ranges an allow list refuses unless a rule names them: what `ip` is, or
/// `None` for a public address. `host` holds the server's own addresses.
pub fn special(ip: IpAddr, host: &[IpAddr]) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    if host.contains(&ip) {
        return Some("the server's own host");
    }
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_link_local() {
        Some("link-local (cloud metadata)")
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        Some("a private address")
    } else if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || a == 0 {
        Some("not a unicast address")
    } else {
        None
    }
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("loopback")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local (cloud metadata)")
    } else if first & 0xfe00 == 0xfc00 {
        Some("a private address")
    } else if ip.is_unspecified() || ip.is_multicast() {
        Some("not a unicast address")
    } else {
        None
    }
}

/// An allow list as a provider with lists of names and networks but no ports sees it (E2B's
/// `allowOut`, Modal's `allowed_domains` / `allowed_cidrs`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Destinations {
    /// `pypi.org`, `*.npmjs.org`.
    pub names: Vec<String>,
    /// `10.0.0.5/32`, `10.0.0.0/8` (an address as a one-address network).
    pub nets: Vec<String>,
}

/// An allow-list rule that `provider`'s lists of names and networks cannot hold: a name
/// with a port of its own (`github.com:22`; a name without one means the web ports, which
/// a provider's name rules are for).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "network rule {rule}: {provider}'s allow lists name hosts and networks without ports; drop the port (a name alone allows the web ports)"
)]
pub struct PortedRule {
    pub rule: Rule,
    pub provider: &'static str,
}

impl Policy {
    /// This allow list as [`Destinations`] for `provider` (`None` for `all` and `none`), or
    /// the first rule such a provider cannot hold ([`PortedRule`]).
    pub fn destinations(&self, provider: &'static str) -> Result<Option<Destinations>, PortedRule> {
        let Policy::Allow(rules) = self else {
            return Ok(None);
        };
        let mut out = Destinations::default();
        for rule in rules {
            match rule {
                Rule::Name {
                    name,
                    ports: Ports::Web,
                } => out.names.push(name.clone()),
                Rule::Subdomains {
                    suffix,
                    ports: Ports::Web,
                } => out.names.push(format!("*.{suffix}")),
                Rule::Net(net) => out.nets.push(net.to_string()),
                other => {
                    return Err(PortedRule {
                        rule: other.clone(),
                        provider,
                    });
                }
            }
        }
        Ok(Some(out))
    }

    /// The server's policy from its flags: `--no-network` wins, then any `--egress-allow`
    /// rule makes an allow list, else everything.
    pub fn of_flags(network: bool, allow: &[String]) -> Result<Policy, BadPolicy> {
        if !network {
            return Ok(Policy::None);
        }
        if allow.is_empty() {
            return Ok(Policy::All);
        }
        Policy::allow(allow.iter().map(String::as_str))
    }

    /// An allow list of `rules` (duplicates dropped, order kept).
    pub fn allow<'a>(rules: impl IntoIterator<Item = &'a str>) -> Result<Policy, BadPolicy> {
        let mut out: Vec<Rule> = Vec::new();
        for raw in rules {
            let rule = raw.parse::<Rule>()?;
            if !out.contains(&rule) {
                out.push(rule);
            }
        }
        match out.len() {
            0 => Err(BadPolicy::Empty),
            n if n > MAX_RULES => Err(BadPolicy::TooMany(n)),
            _ => Ok(Policy::Allow(out)),
        }
    }

    /// The tool argument `network`: `"none"` or `{"allow": [rules]}`.
    pub fn of_argument(v: &serde_json::Value) -> Result<Policy, BadPolicy> {
        use serde_json::Value;
        let shape = || BadPolicy::Shape(crate::json::kind(v));
        match v {
            Value::String(s) if s == "none" => Ok(Policy::None),
            Value::Object(m) if m.len() == 1 => match m.get("allow") {
                Some(Value::Array(items)) => {
                    if items.len() > MAX_RULES {
                        return Err(BadPolicy::TooMany(items.len()));
                    }
                    let texts: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
                    Policy::allow(texts.ok_or_else(shape)?)
                }
                _ => Err(shape()),
            },
            _ => Err(shape()),
        }
    }

    /// The policy of one computer whose agent asked for `asked` (`None`: nothing asked, the
    /// server's own). A request that would widen the server's policy is refused.
    pub fn narrow(&self, asked: Option<&Policy>) -> Result<Policy, Widening> {
        let Some(asked) = asked else {
            return Ok(self.clone());
        };
        match (self, asked) {
            (_, Policy::None) | (Policy::All, _) => Ok(asked.clone()),
            (Policy::None, _) => Err(Widening::NoNetwork),
            (Policy::Allow(_), Policy::All) => Err(Widening::Outside {
                rule: "all".into(),
                server: self.to_string(),
            }),
            (Policy::Allow(server), Policy::Allow(rules)) => {
                match rules.iter().find(|r| !server.iter().any(|s| r.inside(s))) {
                    Some(outside) => Err(Widening::Outside {
                        rule: outside.to_string(),
                        server: self.to_string(),
                    }),
                    None => Ok(asked.clone()),
                }
            }
        }
    }

    /// May a connection to `host` (a name as the program gave it: TLS SNI, HTTP Host, a
    /// DNS question) on `port` go out? The address it then reaches is asked of
    /// [`Policy::allows_addr`] too; an address given as the name is judged as one.
    pub fn allows_name(&self, host: &str, port: u16) -> Result<(), Denial> {
        match self {
            Policy::All => Ok(()),
            Policy::None => Err(Denial::NoNetwork),
            Policy::Allow(rules) => {
                // An address given as a name (`Host: 10.0.0.5`) is an address.
                if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
                    return self.allows_addr(ip, Via::Literal, &[]);
                }
                let name = normal_name(host).ok_or(Denial::NotListed)?;
                match rules.iter().any(|r| r.names(&name, port)) {
                    true => Ok(()),
                    false => Err(Denial::NotListed),
                }
            }
        }
    }

    /// May the gate answer a DNS question for `host` (a name some rule names, on any
    /// port; the ports are asked when the program connects)?
    pub fn allows_lookup(&self, host: &str) -> Result<(), Denial> {
        match self {
            Policy::All => Ok(()),
            Policy::None => Err(Denial::NoNetwork),
            Policy::Allow(rules) => {
                let name = normal_name(host).ok_or(Denial::NotListed)?;
                let named = rules.iter().any(|r| match r {
                    Rule::Name { name: n, .. } => *n == name,
                    Rule::Subdomains { suffix, .. } => is_subdomain(&name, suffix),
                    Rule::Net(_) => false,
                });
                match named {
                    true => Ok(()),
                    false => Err(Denial::NotListed),
                }
            }
        }
    }

    /// May a connection to address `ip` go out, reached `via` a literal, a resolved allowed
    /// name or a pinned one? `host`: the server's own addresses. (An IP or CIDR rule allows
    /// every port; a name's ports were asked of [`Policy::allows_name`].)
    pub fn allows_addr(&self, ip: IpAddr, via: Via, host: &[IpAddr]) -> Result<(), Denial> {
        let Policy::Allow(rules) = self else {
            return match self {
                Policy::None => Err(Denial::NoNetwork),
                _ => Ok(()),
            };
        };
        let by_rule = rules
            .iter()
            .any(|r| matches!(r, Rule::Net(n) if n.contains(&ip)));
        if by_rule || via == Via::Pinned {
            return Ok(());
        }
        if let Some(what) = special(ip, host) {
            return Err(Denial::Special(what));
        }
        match via {
            // An allowed name's public address.
            Via::Resolved => Ok(()),
            _ => Err(Denial::NotListed),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::All => f.write_str("all"),
            Policy::None => f.write_str("none"),
            Policy::Allow(rules) => {
                for (i, r) in rules.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{r}")?;
                }
                Ok(())
            }
        }
    }
}

/// On the wire (`computer_list` items, the executor API): `"all"`, `"none"` or
/// `{"allow": ["pypi.org", ...]}`.
impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Policy::All => s.serialize_str("all"),
            Policy::None => s.serialize_str("none"),
            Policy::Allow(rules) => {
                let texts: Vec<String> = rules.iter().map(Rule::to_string).collect();
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("allow", &texts)?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Policy, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        match &v {
            serde_json::Value::String(s) if s == "all" => Ok(Policy::All),
            other => Policy::of_argument(other).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests;
