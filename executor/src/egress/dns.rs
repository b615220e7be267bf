//! The gate's DNS: every question a confined computer sends (to any resolver: the rules
//! bring port 53 here) is answered only for a name the policy allows, with IPv4 addresses
//! the gate resolved itself (`--egress-resolve` pins first, then `--egress-dns`, else the
//! host's resolver). Other names get NXDOMAIN and are logged as refused; IPv6 questions an
//! empty answer (the gate carries IPv4). Messages are read and written by hickory-proto.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use shared::egress::Via;
use tokio::net::UdpSocket;

use super::{Confined, Gate};

/// The TTL of the gate's answers (short: the policy may be stricter than a cache).
const ANSWER_TTL_SECS: u32 = 30;
/// How long the upstream resolver may take.
const UPSTREAM_WAIT: Duration = Duration::from_secs(5);

pub(super) async fn serve(sock: UdpSocket, confined: Arc<Confined>) {
    let sock = Arc::new(sock);
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
            continue;
        };
        let query = buf[..n].to_vec();
        let (sock, confined) = (sock.clone(), confined.clone());
        tokio::spawn(async move {
            if let Some(reply) = answer(&confined, &query).await {
                let _ = sock.send_to(&reply, peer).await;
            }
        });
    }
}

/// The reply to one question (`None`: not a DNS query at all; dropped).
async fn answer(confined: &Confined, bytes: &[u8]) -> Option<Vec<u8>> {
    let msg = Message::from_vec(bytes).ok()?;
    if msg.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut reply = Message::response(msg.metadata.id, msg.metadata.op_code);
    reply.metadata.recursion_desired = msg.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    let Some(query) = msg.queries.first().cloned() else {
        reply.metadata.response_code = ResponseCode::FormErr;
        return reply.to_vec().ok();
    };
    reply.add_query(query.clone());
    if msg.metadata.op_code != OpCode::Query {
        reply.metadata.response_code = ResponseCode::NotImp;
        return reply.to_vec().ok();
    }
    let asked = query.name().to_ascii();
    let asked = asked.trim_end_matches('.');
    let normal = shared::egress::normal_name(asked);
    let allowed = match &normal {
        Some(n) => confined.policy.allows_lookup(n),
        None => Err(shared::egress::Denial::NotListed),
    };
    let name = match (allowed, normal) {
        (Ok(()), Some(n)) => n,
        (Err(why), _) => {
            confined.refuse(asked, shared::egress::DNS_PORT, why);
            reply.metadata.response_code = ResponseCode::NXDomain;
            return reply.to_vec().ok();
        }
        (Ok(()), None) => {
            reply.metadata.response_code = ResponseCode::NXDomain;
            return reply.to_vec().ok();
        }
    };
    let name = name.as_str();
    if query.query_type() == RecordType::A {
        let (addrs, _) = confined.gate.resolve(name).await;
        let v4: Vec<Ipv4Addr> = addrs
            .into_iter()
            .filter_map(|a| match a {
                IpAddr::V4(v4) => Some(v4),
                IpAddr::V6(_) => None,
            })
            .collect();
        if v4.is_empty() {
            reply.metadata.response_code = ResponseCode::NXDomain;
        }
        confined.answered(name, &v4);
        for ip in v4 {
            reply.add_answer(Record::from_rdata(
                query.name().clone(),
                ANSWER_TTL_SECS,
                RData::A(A(ip)),
            ));
        }
    }
    // Other types (AAAA among them): an empty answer; the gate carries IPv4 by name.
    reply.to_vec().ok()
}

impl Gate {
    /// The addresses of an allowed `name` (normal: lower case, no trailing dot), and how
    /// they were found.
    pub(super) async fn resolve(&self, name: &str) -> (Vec<IpAddr>, Via) {
        if let Some(ip) = self.pins.get(name) {
            return (vec![*ip], Via::Pinned);
        }
        let addrs = match self.upstream_dns {
            Some(server) => ask_upstream(server, name).await,
            None => match tokio::net::lookup_host((name, 0)).await {
                Ok(found) => found.map(|a| a.ip()).collect(),
                Err(_) => Vec::new(),
            },
        };
        (addrs, Via::Resolved)
    }
}

/// The IPv4 addresses `server` gives for `name` (an A question over UDP).
async fn ask_upstream(server: SocketAddr, name: &str) -> Vec<IpAddr> {
    let Ok(qname) = Name::from_ascii(format!("{name}.")) else {
        return Vec::new();
    };
    let mut q = Message::new(rand::random(), MessageType::Query, OpCode::Query);
    q.metadata.recursion_desired = true;
    q.add_query(Query::query(qname, RecordType::A));
    let Ok(bytes) = q.to_vec() else {
        return Vec::new();
    };
    let bind = match server {
        SocketAddr::V4(_) => "0.0.0.0:0",
        SocketAddr::V6(_) => "[::]:0",
    };
    let ask = async {
        let sock = UdpSocket::bind(bind).await.ok()?;
        sock.connect(server).await.ok()?;
        sock.send(&bytes).await.ok()?;
        let mut buf = vec![0u8; 4096];
        loop {
            let n = sock.recv(&mut buf).await.ok()?;
            let Ok(reply) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            if reply.metadata.id == q.metadata.id {
                return Some(reply);
            }
        }
    };
    let Ok(Some(reply)) = tokio::time::timeout(UPSTREAM_WAIT, ask).await else {
        return Vec::new();
    };
    reply
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confined(rules: &[&str], pins: &[(&str, &str)]) -> Confined {
        let pins: Vec<(String, IpAddr)> = pins
            .iter()
            .map(|(n, ip)| ((*n).to_owned(), ip.parse().unwrap()))
            .collect();
        Confined {
            gate: Gate::new(&pins, None, &[], None).unwrap(),
            policy: shared::egress::Policy::allow(rules.iter().copied()).unwrap(),
            swaps: Default::default(),
            log: Default::default(),
            answered: Default::default(),
        }
    }

    fn question(name: &str, t: RecordType) -> Vec<u8> {
        let mut q = Message::new(7, MessageType::Query, OpCode::Query);
        q.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
        q.to_vec().unwrap()
    }

    #[tokio::test]
    async fn allowed_names_are_answered_and_others_refused_and_logged() {
        let c = confined(&["pinned.test"], &[("pinned.test", "203.0.113.7")]);
        let t = std::time::Instant::now();
        let r = Message::from_vec(
            &answer(&c, &question("Pinned.Test.", RecordType::A))
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(r.metadata.id, 7);
        assert_eq!(r.metadata.response_code, ResponseCode::NoError);
        assert_eq!(r.answers.len(), 1);
        assert_eq!(
            c.name_of("203.0.113.7".parse().unwrap()).as_deref(),
            Some("pinned.test")
        );
        let r = Message::from_vec(
            &answer(&c, &question("evil.test.", RecordType::A))
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(r.metadata.response_code, ResponseCode::NXDomain);
        assert!(r.answers.is_empty());
        let blocked = c.blocked_since(t);
        assert_eq!(blocked.len(), 1);
        assert_eq!(blocked[0].host, "evil.test");
        let r = Message::from_vec(
            &answer(&c, &question("pinned.test.", RecordType::AAAA))
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(r.metadata.response_code, ResponseCode::NoError);
        assert!(r.answers.is_empty());
        assert_eq!(c.gate.blocked_total(), 1);
    }

    #[tokio::test]
    async fn junk_is_dropped_or_answered_never_a_panic() {
        let c = confined(&["a.test"], &[("a.test", "203.0.113.1")]);
        let mut seed = 0x0bad_cafe_f00d_u64;
        let good = question("a.test.", RecordType::A);
        for i in 0..5_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut bytes = if i % 2 == 0 { good.clone() } else { Vec::new() };
            for j in 0..(seed % 8) {
                let b = (seed >> (j * 8)) as u8;
                match (seed >> j) % 3 {
                    0 if !bytes.is_empty() => {
                        let at = (b as usize) % bytes.len();
                        bytes[at] = b;
                    }
                    1 => bytes.push(b),
                    _ => {
                        bytes.pop();
                    }
                }
            }
            let _ = answer(&c, &bytes).await;
        }
    }
}
