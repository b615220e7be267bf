//! The parser front-end as a fuzz target (issue 19): proptest properties over scripts made
//! of shell tokens and over any text. `parse_program` never panics (brush-parser's own
//! panics are caught), never recurses past the nesting bound, and answers a deep script
//! with `TooDeep` instead of overflowing the stack. `PROPTEST_CASES` raises the 1024 cases.

use proptest::prelude::*;

use crate::parse::{MAX_PAREN_NESTING, MAX_SYNTAX_NESTING, ParseFail, parse_program};

/// Shell tokens scripts are made of (also `tests.rs`'s `fuzz_no_panic`).
pub(super) const ATOMS: &[&str] = &[
    "echo",
    " ",
    "'",
    "\"",
    "$",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    "|",
    "&",
    ";",
    "<",
    ">",
    "\\",
    "`",
    "#",
    "*",
    "?",
    "~",
    "$((",
    "))",
    "${",
    "x",
    "=",
    "\n",
    "<<",
    "<<-",
    "EOF",
    "if",
    "then",
    "else",
    "fi",
    "for",
    "while",
    "until",
    "do",
    "done",
    "case",
    "esac",
    "in",
    ":-",
    "%",
    "/",
    "!",
    "-",
    "0",
    "{1..3}",
    "$@",
    "2>&1",
    "<<<",
    "[[",
    "]]",
    "((",
    "\t",
    "é",
    "\u{0}",
    "99999999999999999999",
    ";;",
    "&&",
    "||",
    "function",
    "f()",
    "${x//a/b}",
    "$(",
    "<(",
    ">(",
    "\r",
    "\u{c}",
    "9",
    "$#",
    "{1..99999999999999999999}",
    "~+99999999999999999999",
    "${x:",
    "$[",
    "local",
    "exec",
    "eval",
    "set",
    "-e",
    "-u",
    "read",
    "xargs",
    "kill",
    "wait",
    "%1",
    "break",
    "return",
];

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn scripts_of_shell_tokens(parts in prop::collection::vec(prop::sample::select(ATOMS), 0..48)) {
        let _ = parse_program(&parts.concat());
    }

    #[test]
    fn any_text(script in "\\PC{0,256}") {
        let _ = parse_program(&script);
    }

    #[test]
    fn deep_nesting_is_refused(
        depth in 0usize..3000,
        open in prop::sample::select(&["(", "{ ", "$(", "if true; then ", "while :; do "][..]),
    ) {
        let script = format!("{}true", open.repeat(depth));
        if depth > 2 * MAX_SYNTAX_NESTING || (depth > MAX_PAREN_NESTING && open.starts_with('(')) {
            prop_assert!(matches!(parse_program(&script), Err(ParseFail::TooDeep)), "{depth} x {open:?}");
        } else {
            let _ = parse_program(&script);
        }
    }
}

/// Found by `scripts_of_shell_tokens` (it took CI's test process down): the input ending
/// while a here-document with an empty delimiter was pending made brush-parser's tokenizer
/// allocate until the kernel killed it. Each case is now answered at once.
#[test]
fn here_documents_with_empty_delimiters_end() {
    for script in [
        "<<\r|${",
        "<<\r\t",
        "<<-\r ",
        "cat <<\u{c}\t",
        "$(cat <<  ",
        "cat <<$( \t",
        "<<$(\t(${",
        "<<$(\t(e\t",
        "]$>($?${x//a/b}9>wait$(wait<<-\r||\rEOF${",
    ] {
        let t = std::time::Instant::now();
        let _ = parse_program(script);
        assert!(
            t.elapsed() < std::time::Duration::from_millis(500),
            "{script:?}"
        );
    }
    // Here-strings and ordinary here-documents (CRLF in the body, too) still parse.
    for ok in [
        "cat <<<\r",
        "cat <<< x",
        "cat <<EOF\nab\r\nEOF\n",
        "cat <<EOF\nab\nEOF",
        "cat <<-X\n\tx\nX\n",
        "echo a<<b\nb\n",
        "x=$(cat <<EOF\nhi\nEOF\n)",
    ] {
        assert!(parse_program(ok).is_ok(), "{ok:?}");
    }
}

/// Found by `deep_nesting_is_refused`: 30 unclosed parentheses took 80 s to refuse.
#[test]
fn open_parentheses_are_refused_at_once() {
    for open in ["(", "( ", "((", "(( "] {
        for depth in [17usize, 24, 30, 40, 1000] {
            let script = format!("{}true", open.repeat(depth));
            let t = std::time::Instant::now();
            assert!(
                matches!(parse_program(&script), Err(ParseFail::TooDeep)),
                "{open:?} x {depth}"
            );
            assert!(
                t.elapsed() < std::time::Duration::from_millis(500),
                "{open:?} x {depth}"
            );
        }
    }
    // Nesting that real scripts use still parses.
    for ok in [
        "( ( ( echo a ) ) )",
        "(( (1 + (2 * 3)) ))",
        "echo $(( ((((1)))) ))",
        "case x in (a) echo a;; b) echo b;; esac",
        "f() { ( cd /tmp && ( ls ) ); }",
    ] {
        assert!(parse_program(ok).is_ok(), "{ok}");
    }
}
