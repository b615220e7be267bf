//! Issue 17: the CLI reference (`docs/cli.md`) is generated from clap, through the real
//! binary's `--help`, and this test fails when it drifts; `completions SHELL` prints
//! scripts a shell accepts.

use std::process::{Command, Output};

const BLESS: &str = "MSC_BLESS=1 cargo test -p tests --test repo cli";

/// The binary with a clean environment (clap shows the values of `env` flags).
fn run(args: &[&str]) -> Output {
    Command::new(tests::binary())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap()
}

fn stdout(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// docs/cli.md as the binary says it now.
fn generated() -> String {
    let help = stdout(&["--help"]);
    format!(
        "# Command line reference\n\n\
         <!-- Generated from the binary's `--help` (clap) by tests/tests/repo/cli.rs, which fails \
         when this file drifts. Regenerate: {BLESS} -->\n\n\
         One binary, three ways to run it: MCP over stdio (the default), MCP over Streamable HTTP \
         (`--transport http`), or the executor REST API for the gateway (`executor`). \
         Every flag below is the same in all three where it applies.\n\n\
         ```text\n$ mcp-sandbox-computer-vm-for-ai --help\n{help}```\n\n\
         Environment besides the flags' own: `ENABLE_LIFECYCLE_TOOLS` (trimmed, case-insensitive \
         `true` adds the lifecycle tools), `FLY_API_TOKEN` / `FLY_TOKEN`, `E2B_API_KEY`, \
         `MODAL_TOKEN_ID` / `MODAL_TOKEN_SECRET`, `RUST_LOG` (logs go to stderr). \
         `AUTO_INSTALL_FLYCTL` is accepted with a notice that it is no longer needed.\n\n\
         Exit statuses: 0 after a clean shutdown (stdin closed, SIGTERM, SIGINT), 2 for a refused \
         configuration (the message says what to pass instead), 1 when the engine cannot be \
         reached or the port cannot be bound.\n\n\
         ## Shell completions\n\n\
         `mcp-sandbox-computer-vm-for-ai completions SHELL` prints a completion script for \
         `bash`, `zsh` or `fish`:\n\n\
         ```sh\n\
         # bash (per session, or put the output in ~/.local/share/bash-completion/completions/)\n\
         source <(mcp-sandbox-computer-vm-for-ai completions bash)\n\
         # zsh: a file named _mcp-sandbox-computer-vm-for-ai on $fpath\n\
         mcp-sandbox-computer-vm-for-ai completions zsh > ~/.zfunc/_mcp-sandbox-computer-vm-for-ai\n\
         # fish\n\
         mcp-sandbox-computer-vm-for-ai completions fish > ~/.config/fish/completions/mcp-sandbox-computer-vm-for-ai.fish\n\
         ```\n"
    )
}

#[test]
fn issue_17_docs_cli_md_is_the_binary_help() {
    let path = super::root().join("docs/cli.md");
    let want = generated();
    if std::env::var_os("MSC_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have != want {
        let line = have
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "the length".to_owned(), |n| format!("line {}", n + 1));
        panic!(
            "docs/cli.md drifted from the binary's --help (first difference: {line}); regenerate it with `{BLESS}` and commit it"
        );
    }
}

#[test]
fn issue_17_completions_for_bash_zsh_and_fish() {
    // bash: the script parses, and sourcing it registers a completion for the binary.
    let bash = stdout(&["completions", "bash"]);
    assert!(
        bash.contains("--backend") && bash.contains("--tool-name"),
        "{bash}"
    );
    let out = Command::new("bash")
        .args([
            "-c",
            "source /dev/stdin && complete -p mcp-sandbox-computer-vm-for-ai",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(bash.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    let registered = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        registered.starts_with("complete ")
            && registered.contains(" -F _mcp")
            && registered
                .trim_end()
                .ends_with(" mcp-sandbox-computer-vm-for-ai"),
        "{registered}"
    );
    let zsh = stdout(&["completions", "zsh"]);
    assert!(
        zsh.starts_with("#compdef mcp-sandbox-computer-vm-for-ai"),
        "{zsh}"
    );
    assert!(zsh.contains("--backend"), "{zsh}");
    let fish = stdout(&["completions", "fish"]);
    assert!(
        fish.contains("complete -c mcp-sandbox-computer-vm-for-ai") && fish.contains("-l backend"),
        "{fish}"
    );
    // Without a shell, or with an unknown one: a clear refusal, exit 2.
    let out = run(&["completions"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("completions bash"));
    let out = run(&["completions", "powershell"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["executor", "bash"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a shell name outside `completions`"
    );
}
