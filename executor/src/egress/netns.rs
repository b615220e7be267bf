//! The gate's hold on a computer's network namespace: its sockets, opened inside, and the
//! nftables rules that send every outgoing packet to them (or drop it).

use std::io;
use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsFd;

use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

use super::GateError;

/// The TCP listener and the DNS socket of the gate, bound to loopback inside the network
/// namespace of process `pid`. A thread of its own joins the namespace for the binds and
/// ends; the sockets stay in it.
pub(super) fn open_sockets(pid: u32) -> io::Result<(TcpListener, UdpSocket)> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))
                .map_err(io::Error::from)?;
            let tcp = TcpListener::bind("127.0.0.1:0")?;
            let udp = UdpSocket::bind("127.0.0.1:0")?;
            tcp.set_nonblocking(true)?;
            udp.set_nonblocking(true)?;
            Ok((tcp, udp))
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
    })
}

/// The ruleset: IPv4 TCP to the listener, DNS to the DNS socket, everything else that
/// would leave dropped. Loopback inside the computer stays its own. It replaces the
/// table a previous server left (whose listeners died with it: until then the computer
/// reached nothing, the rules sending its connections to closed ports).
pub(super) fn ruleset(tcp_port: u16, udp_port: u16) -> String {
    format!(
        "table inet msc_egress
delete table inet msc_egress
table inet msc_egress {{
  chain nat_out {{
    type nat hook output priority -100; policy accept;
    oifname \"lo\" return
    meta nfproto ipv4 meta l4proto tcp redirect to :{tcp_port}
    meta nfproto ipv4 udp dport 53 redirect to :{udp_port}
  }}
  chain filter_out {{
    type filter hook output priority 0; policy drop;
    oifname \"lo\" accept
    ip daddr 127.0.0.0/8 accept
    ip6 daddr ::1 accept
    ct status dnat accept
  }}
}}
"
    )
}

/// Installs [`ruleset`] in the namespace of `pid` (`nsenter -t PID -n nft -f -`).
pub(super) async fn install_rules(pid: u32, tcp_port: u16, udp_port: u16) -> Result<(), GateError> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-n", "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| GateError::Rules(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(ruleset(tcp_port, udp_port).as_bytes())
            .await
            .map_err(|e| GateError::Rules(e.to_string()))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| GateError::Rules(e.to_string()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(GateError::Rules(format!("{}: {}", out.status, err.trim())));
    }
    Ok(())
}
