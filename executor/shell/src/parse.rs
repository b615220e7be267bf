//! Parsing of scripts with brush-parser, hardened for untrusted input: a cheap pre-scan
//! rejects nesting deep enough to overflow the parser's (recursive) stack, parentheses
//! nested deep enough to make its backtracking exponential, and here-document delimiters
//! its tokenizer cannot end on; any panic inside brush-parser becomes a syntax error.

use std::panic::{AssertUnwindSafe, catch_unwind};

use brush_parser::ast::Program;
use brush_parser::{ParseError, ParserOptions, Token};

/// Deepest nesting of brackets / compound keywords accepted in a script.
pub(crate) const MAX_SYNTAX_NESTING: usize = 40;

/// Deepest nesting of `(` operators (subshells, `((`) accepted. brush-parser backtracks
/// over each open parenthesis of a script that fails to parse, so the time to refuse one
/// doubles with every level: 16 levels cost about 8 ms, 24 about 2 s and 30 over a minute
/// (the fuzz target found it). Real scripts nest subshells a few levels at most.
pub(crate) const MAX_PAREN_NESTING: usize = 16;

/// Most tokens accepted inside one `[[ ... ]]`.
const MAX_TEST_TOKENS: usize = 256;

/// Runs `f`, turning a panic into `None`.
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> Option<T> {
    catch_unwind(AssertUnwindSafe(f)).ok()
}

pub(crate) fn options() -> ParserOptions {
    ParserOptions::default()
}

/// Max nesting of `(`, `{`, `[` in raw text (quotes are not interpreted: over-estimates).
fn bracket_depth(s: &str) -> usize {
    let mut depth: usize = 0;
    let mut max = 0;
    for c in s.chars() {
        match c {
            '(' | '{' | '[' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' | '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// `script` as brush-parser should see it. Its tokenizer loops without end, queueing a token
/// per turn until memory runs out, when the input ends while a here-document with an empty
/// delimiter is pending (`<<\r\t`, `$(cat <<  `, `<<$(\t(${`: delimiters that are blanks,
/// carriage returns or form feeds trim to nothing; the fuzz target found it). Two trailing
/// newlines end such a document (an empty line ends it) before the input does; trailing
/// newlines change nothing else a script means.
fn ended(script: &str) -> std::borrow::Cow<'_, str> {
    if script.contains("<<") {
        format!("{script}\n\n").into()
    } else {
        script.into()
    }
}

/// Max nesting of `(` in operator tokens (what the tokenizer saw outside quotes, words
/// and here-documents).
fn paren_depth(tokens: &[Token]) -> usize {
    let mut depth: usize = 0;
    let mut max = 0;
    for t in tokens {
        if let Token::Operator(op, _) = t {
            for c in op.chars() {
                match c {
                    '(' => {
                        depth += 1;
                        max = max.max(depth);
                    }
                    ')' => depth = depth.saturating_sub(1),
                    _ => {}
                }
            }
        }
    }
    max
}

/// Max nesting of compound keywords (`if`, `while`, ... in command position).
fn keyword_depth(tokens: &[Token]) -> usize {
    let mut depth: usize = 0;
    let mut max = 0;
    let mut prev: Option<&Token> = None;
    // Tokens inside the current `[[ ... ]]` (its parser and evaluator recurse per operator).
    let mut in_test: Option<usize> = None;
    for t in tokens {
        match (t.to_str(), in_test.as_mut()) {
            ("[[", None) => in_test = Some(0),
            ("]]", Some(_)) => in_test = None,
            (_, Some(n)) => {
                *n += 1;
                if *n > MAX_TEST_TOKENS {
                    return usize::MAX / 2;
                }
            }
            _ => {}
        }
        let cmd_pos = match prev {
            None => true,
            Some(Token::Operator(..)) => true,
            Some(Token::Word(w, _)) => matches!(
                w.as_str(),
                "then"
                    | "do"
                    | "else"
                    | "elif"
                    | "if"
                    | "while"
                    | "until"
                    | "!"
                    | "{"
                    | "}"
                    | "in"
                    | "time"
            ),
        };
        if let Token::Word(w, _) = t
            && cmd_pos
        {
            match w.as_str() {
                "if" | "while" | "until" | "for" | "case" | "select" | "{" => {
                    depth += 1;
                    max = max.max(depth);
                }
                "fi" | "done" | "esac" | "}" => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        prev = Some(t);
    }
    max
}

/// Why a script could not be parsed.
pub(crate) enum ParseFail {
    /// Nesting too deep.
    TooDeep,
    /// A syntax error (message without the `sh: ` prefix).
    Syntax(String),
}

fn describe(e: &ParseError) -> String {
    match e {
        ParseError::ParsingNear(p) => {
            format!(
                "syntax error: unexpected token near line {} col {}",
                p.line, p.column
            )
        }
        ParseError::ParsingAtEndOfInput => "syntax error: unexpected end of file".into(),
        ParseError::Tokenizing { inner, position } => match position {
            Some(p) => format!("syntax error: {inner} (line {} col {})", p.line, p.column),
            None => format!("syntax error: {inner}"),
        },
    }
}

/// Parses a whole script.
pub(crate) fn parse_program(script: &str) -> Result<Program, ParseFail> {
    if bracket_depth(script) > MAX_SYNTAX_NESTING {
        return Err(ParseFail::TooDeep);
    }
    let script = &ended(script);
    let opts = options();
    let tokens =
        guarded(|| brush_parser::tokenize_str_with_options(script, &opts.tokenizer_options()))
            .ok_or_else(|| ParseFail::Syntax("syntax error: invalid input".into()))?;
    match tokens {
        Ok(tokens) => {
            if keyword_depth(&tokens) + bracket_depth(script) > MAX_SYNTAX_NESTING
                || paren_depth(&tokens) > MAX_PAREN_NESTING
            {
                return Err(ParseFail::TooDeep);
            }
        }
        Err(e) => {
            let pe = ParseError::Tokenizing {
                inner: e,
                position: None,
            };
            return Err(ParseFail::Syntax(describe(&pe)));
        }
    }
    let res = guarded(|| {
        let mut p = brush_parser::Parser::new(std::io::BufReader::new(script.as_bytes()), &opts);
        p.parse_program()
    });
    match res {
        None => Err(ParseFail::Syntax("syntax error: invalid input".into())),
        Some(Ok(p)) => Ok(p),
        Some(Err(e)) => Err(ParseFail::Syntax(describe(&e))),
    }
}
