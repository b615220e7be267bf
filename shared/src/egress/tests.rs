//! The policy's rules as tables: parsing, narrowing, and the gate's decisions.

use super::*;
use serde_json::json;

fn allow(rules: &[&str]) -> Policy {
    Policy::allow(rules.iter().copied()).unwrap()
}

#[test]
fn rules_parse_to_one_canonical_form() {
    let cases = [
        ("pypi.org", "pypi.org"),
        ("PyPI.org.", "pypi.org"),
        ("  github.com:22 ", "github.com:22"),
        ("*.npmjs.org", "*.npmjs.org"),
        ("*.Example.COM:8443", "*.example.com:8443"),
        ("localhost", "localhost"),
        ("_acme.example.org", "_acme.example.org"),
        ("10.0.0.5", "10.0.0.5"),
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("10.1.2.3/8", "10.0.0.0/8"),
        ("169.254.169.254/32", "169.254.169.254"),
        ("::1", "::1"),
        ("fd00::/8", "fd00::/8"),
    ];
    for (raw, canonical) in cases {
        let rule: Rule = raw.parse().unwrap_or_else(|e| panic!("{raw}: {e}"));
        assert_eq!(rule.to_string(), canonical, "{raw}");
        assert_eq!(canonical.parse::<Rule>().unwrap(), rule, "{raw}");
    }
}

/// Which refusal a bad rule gets.
type Expected = fn(&BadPolicy) -> bool;

#[test]
fn bad_rules_say_what_a_rule_is() {
    let cases: [(&str, Expected); 14] = [
        ("", |e| matches!(e, BadPolicy::Rule(_))),
        ("*", |e| matches!(e, BadPolicy::Rule(_))),
        ("*.", |e| matches!(e, BadPolicy::Rule(_))),
        ("a..b", |e| matches!(e, BadPolicy::Rule(_))),
        ("-a.com", |e| matches!(e, BadPolicy::Rule(_))),
        ("a b.com", |e| matches!(e, BadPolicy::Rule(_))),
        ("https://pypi.org", |e| matches!(e, BadPolicy::Rule(_))),
        ("pypi.org/simple", |e| matches!(e, BadPolicy::Rule(_))),
        ("foo.*.com", |e| matches!(e, BadPolicy::Rule(_))),
        ("pypi.org:0", |e| matches!(e, BadPolicy::Port(_))),
        ("pypi.org:65536", |e| matches!(e, BadPolicy::Port(_))),
        ("10.0.0.5:80", |e| matches!(e, BadPolicy::PortOnAddress(_))),
        ("[::1]:8080", |e| matches!(e, BadPolicy::PortOnAddress(_))),
        ("1.2.3", |e| matches!(e, BadPolicy::Rule(_))),
    ];
    for (raw, expected) in cases {
        let e = raw.parse::<Rule>().unwrap_err();
        assert!(expected(&e), "{raw}: {e:?}");
        assert!(e.to_string().contains(&format!("{raw:?}")), "{e}");
    }
    let long = format!("{}.com", "a".repeat(64));
    assert!(long.parse::<Rule>().is_err());
    let too_long = vec!["ab"; 130].join(".");
    assert!(too_long.parse::<Rule>().is_err());
}

#[test]
fn the_servers_policy_comes_from_its_flags() {
    assert_eq!(Policy::of_flags(true, &[]), Ok(Policy::All));
    assert_eq!(
        Policy::of_flags(false, &["pypi.org".into()]),
        Ok(Policy::None)
    );
    assert_eq!(
        Policy::of_flags(true, &["pypi.org".into(), "PYPI.org".into()]),
        Ok(allow(&["pypi.org"])),
        "duplicates are dropped"
    );
    assert!(matches!(
        Policy::of_flags(true, &["not a rule".into()]),
        Err(BadPolicy::Rule(_))
    ));
    let many: Vec<String> = (0..=MAX_RULES).map(|i| format!("h{i}.example")).collect();
    assert_eq!(
        Policy::of_flags(true, &many),
        Err(BadPolicy::TooMany(MAX_RULES + 1))
    );
}

#[test]
fn the_argument_is_none_or_an_allow_list() {
    assert_eq!(Policy::of_argument(&json!("none")), Ok(Policy::None));
    assert_eq!(
        Policy::of_argument(&json!({"allow": ["pypi.org", "*.npmjs.org"]})),
        Ok(allow(&["pypi.org", "*.npmjs.org"]))
    );
    for bad in [
        json!("all"),
        json!("None"),
        json!({"allow": "pypi.org"}),
        json!({"allow": [1]}),
        json!({"allow": ["pypi.org"], "deny": []}),
        json!({"deny": ["pypi.org"]}),
        json!(["pypi.org"]),
        json!(true),
    ] {
        let e = Policy::of_argument(&bad).unwrap_err();
        assert!(matches!(e, BadPolicy::Shape(_)), "{bad}: {e:?}");
        assert!(e.to_string().contains("\"none\""), "{e}");
    }
    assert_eq!(
        Policy::of_argument(&json!({"allow": []})),
        Err(BadPolicy::Empty)
    );
    assert!(matches!(
        Policy::of_argument(&json!({"allow": ["x y"]})),
        Err(BadPolicy::Rule(_))
    ));
}

#[test]
fn the_wire_form_reads_back() {
    for p in [
        Policy::All,
        Policy::None,
        allow(&["pypi.org", "*.npmjs.org:8443", "10.0.0.0/8", "::1"]),
    ] {
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            serde_json::from_value::<Policy>(v.clone()).unwrap(),
            p,
            "{v}"
        );
    }
    assert_eq!(
        serde_json::to_value(allow(&["pypi.org"])).unwrap(),
        json!({"allow": ["pypi.org"]})
    );
    assert!(serde_json::from_value::<Policy>(json!("some")).is_err());
}

#[test]
fn an_agent_may_narrow_and_never_widen() {
    let server = allow(&[
        "pypi.org",
        "*.npmjs.org",
        "github.com:22",
        "10.0.0.0/8",
        "example.com:8080",
    ]);
    let inside = [
        allow(&["pypi.org"]),
        allow(&["pypi.org:443"]),
        allow(&["registry.npmjs.org"]),
        allow(&["*.cdn.npmjs.org"]),
        allow(&["*.npmjs.org:80"]),
        allow(&["github.com:22"]),
        allow(&["10.1.0.0/16", "10.2.3.4"]),
        Policy::None,
    ];
    for asked in &inside {
        assert_eq!(server.narrow(Some(asked)).as_ref(), Ok(asked), "{asked}");
    }
    let outside = [
        (allow(&["pypi.org", "evil.com"]), "evil.com"),
        (allow(&["pypi.org:22"]), "pypi.org:22"),
        (allow(&["npmjs.org"]), "npmjs.org"),
        (allow(&["*.org"]), "*.org"),
        (allow(&["github.com"]), "github.com"),
        (allow(&["11.0.0.1"]), "11.0.0.1"),
        (allow(&["10.0.0.0/7"]), "10.0.0.0/7"),
        (allow(&["example.com"]), "example.com"),
        (Policy::All, "all"),
    ];
    for (asked, named) in outside {
        let e = server.narrow(Some(&asked)).unwrap_err();
        assert!(
            matches!(&e, Widening::Outside { rule, .. } if rule == named),
            "{asked}: {e:?}"
        );
        assert!(e.to_string().contains("--egress-allow"), "{e}");
    }
    // Nothing asked: the server's own. An open server takes any narrowing.
    assert_eq!(server.narrow(None), Ok(server.clone()));
    assert_eq!(Policy::All.narrow(Some(&server)), Ok(server.clone()));
    // A server without network grants none, but "none" is fine.
    assert_eq!(
        Policy::None.narrow(Some(&allow(&["pypi.org"]))),
        Err(Widening::NoNetwork)
    );
    assert_eq!(
        Policy::None.narrow(Some(&Policy::All)),
        Err(Widening::NoNetwork)
    );
    assert_eq!(Policy::None.narrow(Some(&Policy::None)), Ok(Policy::None));
}

#[test]
fn names_pass_by_rule_and_port() {
    let p = allow(&["pypi.org", "*.npmjs.org", "github.com:22", "10.0.0.5"]);
    let cases = [
        ("pypi.org", 443, true),
        ("PYPI.ORG.", 80, true),
        ("pypi.org", 8080, false),
        ("files.pypi.org", 443, false),
        ("registry.npmjs.org", 443, true),
        ("a.b.npmjs.org", 80, true),
        ("npmjs.org", 443, false),
        ("evilnpmjs.org", 443, false),
        ("github.com", 22, true),
        ("github.com", 443, false),
        ("10.0.0.5", 9999, true),
        ("[::1]", 443, false),
        ("not a name", 443, false),
        ("", 443, false),
    ];
    for (host, port, ok) in cases {
        assert_eq!(p.allows_name(host, port).is_ok(), ok, "{host}:{port}");
    }
    assert_eq!(Policy::All.allows_name("anything.example", 1), Ok(()));
    assert_eq!(
        Policy::None.allows_name("pypi.org", 443),
        Err(Denial::NoNetwork)
    );
}

#[test]
fn special_addresses_need_a_rule_that_names_them() {
    let host = ["192.0.2.10".parse().unwrap()];
    let p = allow(&["pypi.org", "10.1.0.0/16"]);
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let refused = [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local (cloud metadata)"),
        ("fe80::1", "link-local (cloud metadata)"),
        ("10.2.0.1", "a private address"),
        ("172.16.5.4", "a private address"),
        ("192.168.1.1", "a private address"),
        ("100.64.0.1", "a private address"),
        ("fd12::1", "a private address"),
        ("0.0.0.0", "not a unicast address"),
        ("224.0.0.1", "not a unicast address"),
        ("192.0.2.10", "the server's own host"),
    ];
    for (addr, what) in refused {
        for via in [Via::Literal, Via::Resolved] {
            assert_eq!(
                p.allows_addr(ip(addr), via, &host),
                Err(Denial::Special(what)),
                "{addr} {via:?}"
            );
        }
        // A name pinned to it with --egress-resolve names it exactly.
        assert_eq!(p.allows_addr(ip(addr), Via::Pinned, &host), Ok(()));
    }
    // An IP or CIDR rule names its addresses exactly.
    assert_eq!(p.allows_addr(ip("10.1.2.3"), Via::Literal, &host), Ok(()));
    // A public address: through an allowed name only, never as a literal.
    assert_eq!(
        p.allows_addr(ip("93.184.216.34"), Via::Resolved, &host),
        Ok(())
    );
    assert_eq!(
        p.allows_addr(ip("93.184.216.34"), Via::Literal, &host),
        Err(Denial::NotListed)
    );
    // Without an allow list addresses are not judged (all) or all refused (none).
    assert_eq!(
        Policy::All.allows_addr(ip("127.0.0.1"), Via::Literal, &host),
        Ok(())
    );
    assert_eq!(
        Policy::None.allows_addr(ip("1.1.1.1"), Via::Resolved, &host),
        Err(Denial::NoNetwork)
    );
    assert_eq!(special(ip("8.8.8.8"), &host), None);
    assert_eq!(special(ip("2606:4700::1111"), &host), None);
}

#[test]
fn a_denial_names_the_flag_that_would_allow_it() {
    assert_eq!(
        Denial::NotListed.notice("example.com", 443),
        "blocked example.com:443 (not in the allow list; an operator can add --egress-allow example.com)"
    );
    assert_eq!(
        Denial::NotListed.notice("example.com", 22),
        "blocked example.com:22 (not in the allow list; an operator can add --egress-allow example.com:22)"
    );
    assert_eq!(
        Denial::Special("link-local (cloud metadata)").notice("169.254.169.254", 80),
        "blocked 169.254.169.254:80 (link-local (cloud metadata); an operator can add --egress-allow 169.254.169.254)"
    );
    assert!(Denial::NoNetwork.notice("x.org", 443).contains("--network"));
    // An address rule has no port; a refused name lookup suggests the name.
    assert_eq!(
        Denial::Special("a private address").notice("10.1.2.3", 5432),
        "blocked 10.1.2.3:5432 (a private address; an operator can add --egress-allow 10.1.2.3)"
    );
    assert_eq!(
        Denial::NotListed.notice("evil.test", DNS_PORT),
        "blocked the name evil.test (not in the allow list; an operator can add --egress-allow evil.test)"
    );
    // Each suggested rule parses.
    for (host, port) in [
        ("10.1.2.3", 5432),
        ("fd00::1", 22),
        ("a.test", 53),
        ("a.test", 8080),
    ] {
        let line = Denial::NotListed.notice(host, port);
        let rule = line
            .rsplit("--egress-allow ")
            .next()
            .unwrap()
            .trim_end_matches(')');
        assert!(rule.parse::<Rule>().is_ok(), "{rule} from {line}");
    }
    let b = Blocked::new(
        "169.254.169.254",
        80,
        Denial::Special("link-local (cloud metadata)"),
    );
    assert!(
        b.notice().contains("(link-local (cloud metadata); "),
        "{}",
        b.notice()
    );
}

#[test]
fn allow_lists_map_to_a_providers_names_and_networks_unless_a_rule_has_a_port() {
    let p = Policy::allow(["pypi.org", "*.npmjs.org", "10.0.0.5", "10.1.0.0/16"]).unwrap();
    let d = p.destinations("E2B").unwrap().unwrap();
    assert_eq!(d.names, ["pypi.org", "*.npmjs.org"]);
    assert_eq!(d.nets, ["10.0.0.5/32", "10.1.0.0/16"]);
    assert_eq!(Policy::All.destinations("E2B"), Ok(None));
    assert_eq!(Policy::None.destinations("E2B"), Ok(None));
    let p = Policy::allow(["pypi.org", "github.com:22"]).unwrap();
    let refused = p.destinations("Modal").unwrap_err();
    assert_eq!(refused.rule.to_string(), "github.com:22");
    assert_eq!(
        refused.to_string(),
        "network rule github.com:22: Modal's allow lists name hosts and networks without ports; drop the port (a name alone allows the web ports)"
    );
}
