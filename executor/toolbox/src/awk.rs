//! `awk`: a thin command line over the `awk-rs` interpreter library.
//!
//! Usage: `awk [-F fs] [-v var=val]... [-f progfile]... ['program'] [file|var=val]...`.
//! Assignments (`-v` and operands) go through the interpreter's lvalue
//! assignment, so special variables such as `OFS`, `ORS`, `RS`, `SUBSEP`
//! work. Operand assignments (`var=val` among the files) are applied before
//! the run starts rather than between files. Programs consisting only of
//! `BEGIN` rules do not read input.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};

use awk_rs::ast::{Expr, Pattern};
use awk_rs::{Interpreter, Lexer, Parser, SourceLocation, Value};

/// Parsed command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cli {
    pub fs: Option<String>,
    pub assigns: Vec<(String, String)>,
    pub program: String,
    /// Input operands, in order: files, `-`, or `var=val` assignments.
    pub operands: Vec<String>,
    pub posix: bool,
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    Run(Cli),
    Help,
    Version,
}

/// Decode escape sequences as in an AWK string literal.
pub fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(n) = chars.next() else {
            out.push('\\');
            break;
        };
        match n {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            'a' => out.push('\u{7}'),
            '0'..='7' => {
                let mut value = n.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(value).unwrap_or('\u{fffd}'));
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether `s` is a `name=value` operand with a valid AWK identifier.
pub fn is_assignment(s: &str) -> bool {
    match s.split_once('=') {
        Some((name, _)) => {
            let mut chars = name.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

fn split_assignment(s: &str) -> Result<(String, String), String> {
    if !is_assignment(s) {
        return Err(format!("invalid variable assignment: {s}"));
    }
    let (name, value) = s.split_once('=').unwrap_or((s, ""));
    Ok((name.to_string(), unescape(value)))
}

/// Parse awk's arguments (without argv\[0\]). `read` loads `-f` files.
pub fn parse_args(
    args: &[String],
    read: &dyn Fn(&str) -> io::Result<String>,
) -> Result<Action, String> {
    let mut cli = Cli::default();
    let mut prog_files: Vec<String> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let take = |i: &mut usize, opt: &str| -> Result<String, String> {
            *i += 1;
            args.get(*i)
                .cloned()
                .ok_or_else(|| format!("option requires an argument -- {opt}"))
        };
        match arg.as_str() {
            "--" => {
                i += 1;
                break;
            }
            "--help" | "-h" => return Ok(Action::Help),
            "--version" | "-V" => return Ok(Action::Version),
            "--posix" | "-P" | "--traditional" | "-c" => cli.posix = true,
            "-F" => cli.fs = Some(take(&mut i, "F")?),
            "-v" => cli.assigns.push(split_assignment(&take(&mut i, "v")?)?),
            "-f" => prog_files.push(take(&mut i, "f")?),
            a if a.starts_with("-F") => cli.fs = Some(a[2..].to_string()),
            a if a.starts_with("-v") => cli.assigns.push(split_assignment(&a[2..])?),
            a if a.starts_with("-f") && a.len() > 2 => prog_files.push(a[2..].to_string()),
            a if a.starts_with("--") && a.contains('=') => {
                return Err(format!("unknown option: {a}"));
            }
            a if a.starts_with('-') && a != "-" => return Err(format!("unknown option: {a}")),
            _ => break,
        }
        i += 1;
    }
    let mut rest = args[i..].iter();
    if prog_files.is_empty() {
        cli.program = rest.next().cloned().ok_or_else(|| "__usage".to_string())?;
    } else {
        let mut sources = Vec::new();
        for f in &prog_files {
            let text = read(f).map_err(|e| format!("can't open source file `{f}': {e}"))?;
            sources.push(text);
        }
        cli.program = sources.join("\n");
    }
    cli.operands = rest.cloned().collect();
    if let Some(fs) = &cli.fs {
        // POSIX: -Ft means a tab separator.
        cli.fs = Some(if fs == "t" {
            "\t".to_string()
        } else {
            unescape(fs)
        });
    }
    Ok(Action::Run(cli))
}

fn usage() -> &'static str {
    "usage: awk [-F fs][-v var=value][prog | -f progfile][file ...]"
}

fn set_var(interp: &mut Interpreter, name: &str, value: &str) -> Result<(), String> {
    let target = Expr::Var(name.to_string(), SourceLocation::new(0, 0));
    interp
        .assign_to_lvalue(&target, Value::from_string(value.to_string()))
        .map_err(|e| e.to_string())
}

/// Run an awk program; writes to `out`, returns the exit status.
pub fn run<W: Write>(cli: &Cli, out: &mut W) -> i32 {
    let tokens = match Lexer::new(&cli.program).tokenize() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("awk: {e}");
            return 2;
        }
    };
    let program = match Parser::new(tokens).parse() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("awk: {e}");
            return 2;
        }
    };
    let mut interp = Interpreter::new(&program);
    interp.set_posix_mode(cli.posix);
    if let Some(fs) = &cli.fs {
        interp.set_fs(fs);
    }
    let mut files = Vec::new();
    let mut status = 0;
    for (name, value) in &cli.assigns {
        if let Err(e) = set_var(&mut interp, name, value) {
            eprintln!("awk: {e}");
            return 2;
        }
    }
    for op in &cli.operands {
        if is_assignment(op) {
            if let Ok((name, value)) = split_assignment(op)
                && let Err(e) = set_var(&mut interp, &name, &value)
            {
                eprintln!("awk: {e}");
                return 2;
            }
        } else {
            files.push(op.clone());
        }
    }
    let mut argv = vec!["awk".to_string()];
    argv.extend(cli.operands.iter().cloned());
    interp.set_args(argv);

    let reads_input = program
        .rules
        .iter()
        .any(|r| !matches!(r.pattern, Some(Pattern::Begin)));
    let mut inputs: Vec<Box<dyn BufRead>> = Vec::new();
    let mut names = Vec::new();
    if reads_input {
        if files.is_empty() {
            inputs.push(Box::new(BufReader::new(io::stdin())));
            names.push(String::new());
        }
        for f in &files {
            if f == "-" || f == "/dev/stdin" {
                inputs.push(Box::new(BufReader::new(io::stdin())));
            } else {
                match File::open(f) {
                    Ok(file) => inputs.push(Box::new(BufReader::new(file))),
                    Err(e) => {
                        eprintln!("awk: cannot open \"{f}\" ({})", describe(&e));
                        status = 2;
                        continue;
                    }
                }
            }
            names.push(f.clone());
        }
    }
    interp.set_filenames(names);
    let code = match interp.run(inputs, out) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("awk: {e}");
            2
        }
    };
    if out.flush().is_err() {
        return 2;
    }
    if code != 0 { code } else { status }
}

fn describe(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "No such file or directory".into(),
        io::ErrorKind::PermissionDenied => "Permission denied".into(),
        _ => e.to_string(),
    }
}

/// Entry point of `awk`.
pub fn main(args: Vec<OsString>) -> i32 {
    let args = crate::string_args(&args);
    let read = |p: &str| {
        if p == "-" {
            io::read_to_string(io::stdin())
        } else {
            std::fs::read_to_string(p)
        }
    };
    match parse_args(&args, &read) {
        Ok(Action::Run(cli)) => {
            let mut out = io::BufWriter::new(io::stdout().lock());
            run(&cli, &mut out)
        }
        Ok(Action::Help) => {
            println!("{}", usage());
            0
        }
        Ok(Action::Version) => {
            println!("awk (awk-rs 0.2.0, msc-toolbox)");
            0
        }
        Err(e) if e == "__usage" => {
            eprintln!("{}", usage());
            2
        }
        Err(e) => {
            eprintln!("awk: {e}");
            eprintln!("{}", usage());
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn no_files(_: &str) -> io::Result<String> {
        Err(io::Error::new(io::ErrorKind::NotFound, "none"))
    }

    fn parse(list: &[&str]) -> Cli {
        match parse_args(&args(list), &no_files) {
            Ok(Action::Run(cli)) => cli,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn parses_options() {
        let cli = parse(&["-F:", "-v", "OFS=-", "-vx=1", "{print $1}", "a", "n=2", "b"]);
        assert_eq!(cli.fs.as_deref(), Some(":"));
        assert_eq!(
            cli.assigns,
            vec![("OFS".into(), "-".into()), ("x".into(), "1".into())]
        );
        assert_eq!(cli.program, "{print $1}");
        assert_eq!(cli.operands, vec!["a", "n=2", "b"]);
        assert_eq!(parse(&["-F", "t", "1"]).fs.as_deref(), Some("\t"));
        assert_eq!(parse(&["-F", "\\t", "1"]).fs.as_deref(), Some("\t"));
        assert_eq!(parse(&["--", "{print}"]).program, "{print}");
        assert_eq!(
            parse_args(&args(&["--version"]), &no_files),
            Ok(Action::Version)
        );
        assert!(parse_args(&args(&[]), &no_files).is_err());
        assert!(parse_args(&args(&["-v", "1x=2", "1"]), &no_files).is_err());
        assert!(parse_args(&args(&["-f", "missing.awk"]), &no_files).is_err());
        let read = |_: &str| Ok("BEGIN { print 1 }".to_string());
        match parse_args(&args(&["-f", "p.awk", "file"]), &read) {
            Ok(Action::Run(cli)) => {
                assert_eq!(cli.program, "BEGIN { print 1 }");
                assert_eq!(cli.operands, vec!["file"]);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn unescapes_and_assignments() {
        assert_eq!(unescape("a\\tb\\n\\101\\\\"), "a\tb\nA\\");
        assert!(is_assignment("x_1=foo"));
        assert!(!is_assignment("./x=1"));
        assert!(!is_assignment("file.txt"));
    }

    #[test]
    fn runs_with_special_variables() {
        let cli = parse(&[
            "-v",
            "OFS=:",
            "BEGIN { $0 = \"a b c\"; $1 = $1; print; print \"x\", \"y\" }",
        ]);
        let mut out = Vec::new();
        assert_eq!(run(&cli, &mut out), 0);
        assert_eq!(String::from_utf8(out).expect("utf8"), "a:b:c\nx:y\n");
        let cli = parse(&["BEGIN { exit 3 }"]);
        let mut out = Vec::new();
        assert_eq!(run(&cli, &mut out), 3);
    }

    #[test]
    fn reads_files_with_fs() {
        let dir = std::env::temp_dir().join(format!("tbawk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let f = dir.join("in.txt");
        std::fs::write(&f, "a:1\nb:2\n").expect("write");
        let path = f.to_string_lossy().into_owned();
        let cli = parse(&["-F:", "{ s += $2 } END { print s, NR }", &path]);
        let mut out = Vec::new();
        assert_eq!(run(&cli, &mut out), 0);
        assert_eq!(String::from_utf8(out).expect("utf8"), "3 2\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
