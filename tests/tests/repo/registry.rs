//! Issue 17: `server.json` (the MCP registry's metadata) validates against the registry's
//! published schema (`specs/mcp-registry/server.schema.json`, provenance in
//! `specs/SOURCES.md`), and says only what the binary really takes: its version is the
//! workspace's, and every flag and environment variable it names is one the binary knows.

use serde_json::{Value, json};

fn load(path: &str) -> Value {
    let text = std::fs::read_to_string(super::root().join(path)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn errors(schema: &Value, instance: &Value) -> Vec<String> {
    let v = jsonschema::validator_for(schema).unwrap();
    v.iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn issue_17_server_json_validates_against_the_registry_schema() {
    let schema = load("specs/mcp-registry/server.schema.json");
    let server = load("server.json");
    assert_eq!(
        server["$schema"], schema["$id"],
        "server.json names the schema kept in specs/"
    );
    let errs = errors(&schema, &server);
    assert!(errs.is_empty(), "server.json: {errs:#?}");
    // The validator does refuse what the registry refuses.
    let broken = [
        ("/name", json!("no-namespace")),
        ("/description", json!("x".repeat(101))),
        ("/packages/0/version", json!("latest")),
        ("/packages/0/transport", json!({"type": "carrier-pigeon"})),
    ];
    for (pointer, value) in broken {
        let mut bad = server.clone();
        *bad.pointer_mut(pointer).unwrap() = value;
        assert!(!errors(&schema, &bad).is_empty(), "{pointer} accepted");
    }
}

#[test]
fn issue_17_server_json_names_only_what_the_binary_takes() {
    let server = load("server.json");
    assert_eq!(server["version"], env!("CARGO_PKG_VERSION"));
    let out = std::process::Command::new(tests::binary())
        .arg("--help")
        .env_clear()
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    // Read by the binary outside clap (config.rs, fly.rs, modal), not `env =` flags.
    let outside_clap = [
        "ENABLE_LIFECYCLE_TOOLS",
        "FLY_API_TOKEN",
        "E2B_API_KEY",
        "MODAL_TOKEN_ID",
        "MODAL_TOKEN_SECRET",
    ];
    for package in server["packages"].as_array().unwrap() {
        assert_eq!(package["version"], env!("CARGO_PKG_VERSION"));
        for arg in package["packageArguments"].as_array().unwrap() {
            let name = arg["name"].as_str().unwrap();
            assert!(
                help.contains(&format!("{name} "))
                    || help.contains(&format!("{name}="))
                    || help.contains(&format!("{name}\n")),
                "{name} is not a flag of the binary"
            );
        }
        for var in package["environmentVariables"].as_array().unwrap() {
            let name = var["name"].as_str().unwrap();
            assert!(
                help.contains(&format!("[env: {name}")) || outside_clap.contains(&name),
                "{name} is not read by the binary"
            );
        }
    }
    let src = std::fs::read_to_string(super::root().join("executor/src/config.rs")).unwrap()
        + &std::fs::read_to_string(super::root().join("executor/src/main.rs")).unwrap()
        + &std::fs::read_to_string(super::root().join("executor/src/fly.rs")).unwrap()
        + &std::fs::read_to_string(super::root().join("executor/src/modal/mod.rs")).unwrap()
        + &std::fs::read_to_string(super::root().join("executor/src/e2b.rs")).unwrap()
        + &std::fs::read_to_string(super::root().join("executor/src/cli.rs")).unwrap();
    for name in outside_clap {
        assert!(
            src.contains(&format!("\"{name}\"")),
            "{name} is not read anywhere"
        );
    }
}
