//! `jq` on top of the jaq interpreter (`jaq-all` without the extra formats).
//!
//! Supported: `jq [-r] [-j] [-a] [-c] [-n] [-s] [-R] [-S] [-e] [--tab]
//! [--indent n] [--arg name v] [--argjson name json] FILTER [file...]`.
//! `$ENV` holds the environment. Pretty output uses two spaces and `": "`
//! like jq. Exit status: 2 usage or input error, 3 compile error, 5 runtime
//! error, with `-e` 1 if the last output was `false`/`null` and 4 if there
//! was none; `halt_error` codes are passed through (and clamped by `main`).

use std::ffi::OsString;
use std::io::{self, Read, Write};

use jaq_all::data::{self, Runner};
use jaq_all::jaq_core::Vars;
use jaq_all::json::{Map, Val, write::Pp};
use jaq_all::load::FileReportsDisp;

/// Parsed command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub raw: bool,
    pub join: bool,
    pub compact: bool,
    pub null_input: bool,
    pub slurp: bool,
    pub raw_input: bool,
    pub sort_keys: bool,
    pub exit_status: bool,
    pub tab: bool,
    pub indent: Option<usize>,
    /// `(name, value, is_json)` for `--arg` / `--argjson`.
    pub vars: Vec<(String, String, bool)>,
    pub filter: String,
    pub files: Vec<String>,
}

/// Parse jq's arguments (without argv\[0\]).
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut filter = None;
    let mut i = 0;
    let mut only_operands = false;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if only_operands || arg == "-" || !arg.starts_with('-') {
            if filter.is_none() {
                filter = Some(arg.clone());
            } else {
                o.files.push(arg.clone());
            }
            continue;
        }
        match arg.as_str() {
            "--" => only_operands = true,
            "--raw-output" => o.raw = true,
            "--join-output" => {
                o.raw = true;
                o.join = true;
            }
            "--compact-output" => o.compact = true,
            "--null-input" => o.null_input = true,
            "--slurp" => o.slurp = true,
            "--raw-input" => o.raw_input = true,
            "--sort-keys" => o.sort_keys = true,
            "--exit-status" => o.exit_status = true,
            "--ascii-output" | "--monochrome-output" | "--color-output" | "--unbuffered" => {}
            "--tab" => o.tab = true,
            "--indent" => {
                let n = args.get(i).ok_or("--indent takes one parameter")?;
                i += 1;
                let n: usize = n.parse().map_err(|_| "--indent takes a number")?;
                o.indent = Some(n.min(7));
            }
            "--arg" | "--argjson" => {
                let (Some(name), Some(value)) = (args.get(i), args.get(i + 1)) else {
                    return Err(format!(
                        "{arg} takes two parameters (e.g. {arg} varname value)"
                    ));
                };
                i += 2;
                o.vars
                    .push((name.clone(), value.clone(), arg == "--argjson"));
            }
            long if long.starts_with("--") => return Err(format!("Unknown option: {long}")),
            short => {
                for c in short.chars().skip(1) {
                    match c {
                        'r' => o.raw = true,
                        'j' => {
                            o.raw = true;
                            o.join = true;
                        }
                        'c' => o.compact = true,
                        'n' => o.null_input = true,
                        's' => o.slurp = true,
                        'R' => o.raw_input = true,
                        'S' => o.sort_keys = true,
                        'e' => o.exit_status = true,
                        'a' | 'M' | 'C' => {}
                        _ => return Err(format!("Unknown option: {short}")),
                    }
                }
            }
        }
    }
    o.filter = filter.ok_or("__usage")?;
    Ok(o)
}

/// Why the run stopped early.
enum Stop {
    Runtime(String),
    Input(String),
    Halt(i32),
    Io,
}

fn env_object() -> Val {
    let mut map = Map::default();
    for (k, v) in std::env::vars_os() {
        map.insert(
            Val::from(k.to_string_lossy().into_owned()),
            Val::from(v.to_string_lossy().into_owned()),
        );
    }
    Val::obj(map)
}

fn read_input(name: &str) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    if name == "-" {
        io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| format!("error reading stdin: {e}"))?;
    } else {
        buf = std::fs::read(name).map_err(|e| format!("error: Could not open {name}: {e}"))?;
    }
    Ok(buf)
}

/// Collect all input values according to `-R`, `-s`.
fn inputs(o: &Options, stdin: &dyn Fn() -> Result<Vec<u8>, String>) -> Vec<Result<Val, String>> {
    let mut chunks = Vec::new();
    let mut values = Vec::new();
    if o.files.is_empty() {
        match stdin() {
            Ok(b) => chunks.push(b),
            Err(e) => return vec![Err(e)],
        }
    }
    for f in &o.files {
        match if f == "-" { stdin() } else { read_input(f) } {
            Ok(b) => chunks.push(b),
            Err(e) => values.push(Err(e)),
        }
    }
    if o.raw_input {
        let all: Vec<u8> = chunks.concat();
        if o.slurp {
            values.push(Ok(Val::from(String::from_utf8_lossy(&all).into_owned())));
        } else {
            let text = String::from_utf8_lossy(&all);
            let mut lines: Vec<&str> = text.split('\n').collect();
            if text.ends_with('\n') || text.is_empty() {
                lines.pop();
            }
            values.extend(lines.into_iter().map(|l| Ok(Val::from(l.to_string()))));
        }
        return values;
    }
    let mut parsed = Vec::new();
    'outer: for chunk in &chunks {
        for v in jaq_all::json::read::parse_many(chunk) {
            match v {
                Ok(v) => parsed.push(Ok(v)),
                Err(e) => {
                    parsed.push(Err(format!("error (at <input>): Cannot parse JSON: {e}")));
                    break 'outer;
                }
            }
        }
    }
    if o.slurp {
        let mut arr = Vec::new();
        for v in parsed {
            match v {
                Ok(v) => arr.push(v),
                Err(e) => {
                    values.push(Err(e));
                    return values;
                }
            }
        }
        values.push(Ok(arr.into_iter().collect()));
    } else {
        values.extend(parsed);
    }
    values
}

fn printer(o: &Options) -> Pp {
    let indent = if o.compact {
        None
    } else if o.tab {
        Some("\t".to_string())
    } else {
        Some(" ".repeat(o.indent.unwrap_or(2)))
    };
    let indent = indent.filter(|s| !s.is_empty());
    Pp {
        sep_space: indent.is_some(),
        indent,
        sort_keys: o.sort_keys,
        ..Pp::default()
    }
}

/// Run jq; writes results to `out`, returns the exit status.
pub fn run<W: Write>(o: &Options, stdin: &dyn Fn() -> Result<Vec<u8>, String>, out: &mut W) -> i32 {
    let mut names: Vec<String> = vec!["ENV".to_string()];
    let mut values: Vec<Val> = vec![env_object()];
    for (name, value, json) in &o.vars {
        let v = if *json {
            match jaq_all::json::read::parse_single(value.as_bytes()) {
                Ok(v) => v,
                Err(_) => {
                    eprintln!("jq: Invalid JSON text passed to --argjson");
                    return 2;
                }
            }
        } else {
            Val::from(value.clone())
        };
        names.push(name.clone());
        values.push(v);
    }
    let filter = match jaq_all::compile_with(&o.filter, jaq_all::defs(), data::base_funs(), &names)
    {
        Ok(f) => f,
        Err(reports) => {
            for r in &reports {
                eprint!("jq: {}", FileReportsDisp::new(r));
            }
            eprintln!("jq: 1 compile error");
            return 3;
        }
    };
    let pp = printer(o);
    let runner = Runner {
        null_input: o.null_input,
        ..Runner::default()
    };
    let all_inputs = inputs(o, stdin);
    let input_name = Val::from("<stdin>".to_string());
    let mut last: Option<bool> = None;
    let result = data::run(
        &runner,
        &filter,
        Vars::new(values),
        (&input_name, all_inputs.into_iter()),
        Stop::Input,
        |v| {
            let v = match v {
                Ok(v) => v,
                Err(exn) => {
                    return Err(match exn.get_err() {
                        Ok(err) => Stop::Runtime(err.to_string()),
                        Err(exn) => match exn.get_halt() {
                            Ok(code) => Stop::Halt(code),
                            Err(_) => Stop::Runtime("unexpected exception".into()),
                        },
                    });
                }
            };
            last = Some(!matches!(v, Val::Null | Val::Bool(false)));
            let written = match (&v, o.raw) {
                (Val::TStr(b) | Val::BStr(b), true) => out.write_all(b),
                _ => jaq_all::json::write::write(out, &pp, 0, &v),
            };
            written
                .and_then(|()| if o.join { Ok(()) } else { out.write_all(b"\n") })
                .map_err(|_| Stop::Io)
        },
    );
    let flushed = out.flush();
    let code = match result {
        Ok(()) => 0,
        Err(Stop::Runtime(msg)) => {
            eprintln!("jq: error (at <stdin>): {msg}");
            5
        }
        Err(Stop::Input(msg)) => {
            eprintln!("jq: {msg}");
            2
        }
        Err(Stop::Halt(code)) => return code,
        Err(Stop::Io) => return 2,
    };
    if flushed.is_err() {
        return 2;
    }
    if code == 0 && o.exit_status {
        return match last {
            None => 4,
            Some(true) => 0,
            Some(false) => 1,
        };
    }
    code
}

/// Entry point of `jq`.
pub fn main(args: Vec<OsString>) -> i32 {
    let args: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match parse_args(&args) {
        Ok(o) => {
            let mut out = io::BufWriter::new(io::stdout().lock());
            run(&o, &|| read_input("-"), &mut out)
        }
        Err(e) => {
            if e != "__usage" {
                eprintln!("jq: {e}");
            }
            eprintln!("Usage: jq [OPTIONS] FILTER [FILES...]");
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

    fn jq(list: &[&str], input: &str) -> (i32, String) {
        let o = parse_args(&args(list)).expect("parse");
        let data = input.as_bytes().to_vec();
        let mut out = Vec::new();
        let code = run(&o, &|| Ok(data.clone()), &mut out);
        (code, String::from_utf8(out).expect("utf8"))
    }

    #[test]
    fn parses_flags() {
        let o = parse_args(&args(&[
            "-rc",
            "--arg",
            "x",
            "1",
            "--argjson",
            "y",
            "[2]",
            ".a",
            "f.json",
        ]))
        .expect("parse");
        assert!(o.raw && o.compact && !o.slurp);
        assert_eq!(o.filter, ".a");
        assert_eq!(o.files, vec!["f.json"]);
        assert_eq!(
            o.vars,
            vec![
                ("x".into(), "1".into(), false),
                ("y".into(), "[2]".into(), true)
            ]
        );
        assert!(parse_args(&args(&["-Z", "."])).is_err());
        assert!(parse_args(&args(&[])).is_err());
        assert!(parse_args(&args(&["--arg", "x"])).is_err());
    }

    #[test]
    fn pretty_and_compact_output() {
        assert_eq!(
            jq(&["."], r#"{"a":1,"b":[true,null]}"#),
            (
                0,
                "{\n  \"a\": 1,\n  \"b\": [\n    true,\n    null\n  ]\n}\n".into()
            )
        );
        assert_eq!(
            jq(&["-c", "."], r#"{"a": 1, "b": [2]}"#).1,
            "{\"a\":1,\"b\":[2]}\n"
        );
        assert_eq!(
            jq(&["-S", "-c", "."], r#"{"b":1,"a":2}"#).1,
            "{\"a\":2,\"b\":1}\n"
        );
        assert_eq!(jq(&["-r", ".[]"], r#"["x","y"]"#).1, "x\ny\n");
        assert_eq!(jq(&["-j", ".[]"], r#"["x",1]"#).1, "x1");
    }

    #[test]
    fn inputs_vars_and_status() {
        assert_eq!(jq(&["-s", "-c", "."], "1 2 3").1, "[1,2,3]\n");
        assert_eq!(
            jq(
                &[
                    "-n",
                    "-c",
                    "[$x, $y]",
                    "--arg",
                    "x",
                    "a",
                    "--argjson",
                    "y",
                    "{\"k\":1}"
                ],
                ""
            )
            .1,
            "[\"a\",{\"k\":1}]\n"
        );
        assert_eq!(jq(&["-R", "-c", "."], "l1\nl2\n").1, "\"l1\"\n\"l2\"\n");
        assert_eq!(jq(&["-n", "1 +"], "").0, 3);
        assert_eq!(jq(&[".a.b"], "[1]").0, 5);
        assert_eq!(jq(&["-e", ".a"], r#"{"a":false}"#).0, 1);
        assert_eq!(jq(&["-e", "empty"], "1").0, 4);
        assert_eq!(jq(&["."], "{bad").0, 2);
        assert_eq!(
            jq(&["-r", "map(.n * 2) | add"], r#"[{"n":1},{"n":2}]"#).1,
            "6\n"
        );
        assert_eq!(jq(&["-n", "$ENV | type"], "").1, "\"object\"\n");
    }
}
