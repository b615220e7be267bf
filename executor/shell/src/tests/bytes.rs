//! Issue 16: byte-exact output. Octal and `\x` escapes of `printf`, `echo -e` and `$'..'`
//! are bytes; bytes that are not UTF-8 survive variables, `$(..)`, `read`, here-strings,
//! pipes and redirections; all 256 byte values are checked.

use super::*;

/// Runs `script` and returns its stdout as raw bytes.
async fn bytes_of(script: &str) -> Vec<u8> {
    let root = new_root();
    let out = Collect::default();
    let io = Stdio {
        stdin: Box::new(tokio::io::empty()),
        stdout: Box::new(out.clone()),
        stderr: Box::new(tokio::io::sink()),
    };
    let st = run(script, cfg(&root, "/srv"), io).await.status;
    assert_eq!(st, 0, "{script}");
    out.0.lock().unwrap().clone()
}

/// `printf` format text writing every byte value 0..=255 once, in octal escapes.
fn all_octal() -> String {
    (0..=255u32).map(|b| format!("\\{b:03o}")).collect()
}

fn all_bytes() -> Vec<u8> {
    (0..=255u8).collect()
}

#[tokio::test]
async fn issue_16_printf_escapes_are_bytes() {
    assert_eq!(
        bytes_of(r"printf 'h\303\251 \360\237\214\215'").await,
        "hé 🌍".as_bytes()
    );
    assert_eq!(bytes_of(r"printf '\xc3\xa9\xff'").await, b"\xc3\xa9\xff");
    assert_eq!(bytes_of(r"printf '%b' '\0303\0251'").await, "é".as_bytes());
    assert_eq!(bytes_of(r"echo -e '\xf0\x9f' ").await, b"\xf0\x9f\n");
    assert_eq!(bytes_of(r"echo -n $'\377\xfe'").await, b"\xff\xfe");
}

#[tokio::test]
async fn issue_16_all_256_bytes_through_the_shell() {
    let all = all_bytes();
    assert_eq!(bytes_of(&format!("printf '{}'", all_octal())).await, all);
    // Through a pipe and a program, a redirection and a file read back.
    assert_eq!(
        bytes_of(&format!(
            "printf '{}' | cat > /tmp/all; cat /tmp/all",
            all_octal()
        ))
        .await,
        all
    );
    // A variable holds every byte but NUL (as bash: NUL cannot be in a value).
    let no_nul: Vec<u8> = (1..=255u8).collect();
    let script = format!(
        "x=$(printf '{}'); printf %s \"$x\"; printf %s \"$x\" > /tmp/v; y=$(< /tmp/v); printf %s \"$y\"",
        all_octal()
    );
    let mut twice = no_nul.clone();
    twice.extend_from_slice(&no_nul);
    assert_eq!(bytes_of(&script).await, twice);
    // A here-string, read -r, and echo of what was read (newline and NUL aside).
    let line: Vec<u8> = (1..=255u8).filter(|b| *b != b'\n').collect();
    let script = format!(
        "IFS= read -r l <<< \"$(printf '{}')\"; printf %s \"$l\" | cat",
        line.iter()
            .map(|b| format!("\\{b:03o}"))
            .collect::<String>()
    );
    assert_eq!(bytes_of(&script).await, line);
}
