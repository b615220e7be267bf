//! Validation of the file tools (SPEC §3.9): paths, slices, content, modes, edits.
//!
//! Content is bytes: `content` (any text, NUL included) or `content_base64`, and an empty
//! `content` is an empty file, not a missing argument (unlike the exec tool's strings).

use serde_json::Value;

use super::{Args, ValidationError, invalid, json_type, whole};
use crate::files::{
    EDIT_TOOL, FileCall, FileEdit, FileRead, FileWrite, MAX_SLICE, READ_TOOL, WRITE_TOOL,
    parse_mode, validate_path,
};

const READ_ARGS: &[&str] = &["computer_id", "temporary", "path", "offset", "length"];
const WRITE_ARGS: &[&str] = &[
    "computer_id",
    "temporary",
    "path",
    "content",
    "content_base64",
    "append",
    "create_only",
    "mode",
    "make_dirs",
];
const EDIT_ARGS: &[&str] = &[
    "computer_id",
    "temporary",
    "path",
    "old_text",
    "new_text",
    "expected_replacements",
];

/// A string argument as given, empty and NUL included (`None` when absent or null).
fn raw_text(raw: Option<&Value>, key: &str) -> Result<Option<String>, ValidationError> {
    match raw.and_then(|r| r.get(key)) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(invalid(format!(
            "`{key}` must be a string, got {}",
            json_type(other)
        ))),
    }
}

fn path(args: &Args, tool: &str) -> Result<String, ValidationError> {
    let p = args.string("path")?.ok_or_else(|| {
        invalid(format!(
            "{tool} needs `path`: the file's absolute path on the computer, like /home/user/notes.txt"
        ))
    })?;
    validate_path(&p).map_err(|e| invalid(e.to_string()))?;
    Ok(p)
}

/// Validates the arguments of a file tool, by its name.
pub fn parse_file(tool: &str, arguments: Option<&Value>) -> Result<FileCall, ValidationError> {
    match tool {
        READ_TOOL => parse_read(arguments).map(FileCall::Read),
        WRITE_TOOL => parse_write(arguments).map(FileCall::Write),
        EDIT_TOOL => parse_edit(arguments).map(FileCall::Edit),
        other => Err(ValidationError::UnknownTool(other.to_owned())),
    }
}

fn parse_read(arguments: Option<&Value>) -> Result<FileRead, ValidationError> {
    let args = Args::new(arguments, READ_ARGS, READ_TOOL)?;
    Ok(FileRead {
        computer_id: args.computer_id()?,
        temporary: args.boolean("temporary")?,
        path: path(&args, READ_TOOL)?,
        offset: whole(&args, "offset", 0, u64::MAX >> 1, "bytes")?.unwrap_or(0),
        length: whole(
            &args,
            "length",
            1,
            MAX_SLICE,
            "bytes (4 MiB at most per call)",
        )?
        .unwrap_or(MAX_SLICE),
    })
}

fn parse_write(arguments: Option<&Value>) -> Result<FileWrite, ValidationError> {
    let args = Args::new(arguments, WRITE_ARGS, WRITE_TOOL)?;
    let text = raw_text(arguments, "content")?;
    let b64 = raw_text(arguments, "content_base64")?;
    let content = match (text, b64) {
        (Some(_), Some(_)) => {
            return Err(invalid("pass `content` or `content_base64`, not both"));
        }
        (Some(t), None) => t.into_bytes(),
        (None, Some(b)) => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .map_err(|e| invalid(format!("`content_base64` is not base64: {e}")))?
        }
        (None, None) => {
            return Err(invalid(format!(
                "{WRITE_TOOL} needs `content` (text) or `content_base64` (bytes); pass \"\" for an empty file"
            )));
        }
    };
    if content.len() as u64 > MAX_SLICE {
        return Err(invalid(format!(
            "the content is {} bytes; at most {MAX_SLICE} bytes (4 MiB) are written per call: write the first 4 MiB, then the rest with `append: true`, or PUT the file to /v1/files over HTTP",
            content.len()
        )));
    }
    let mode = match args.string("mode")? {
        None => None,
        Some(m) => Some(parse_mode(&m).map_err(|e| invalid(e.to_string()))?),
    };
    let append = args.boolean("append")?.unwrap_or(false);
    let create_only = args.boolean("create_only")?.unwrap_or(false);
    Ok(FileWrite {
        computer_id: args.computer_id()?,
        temporary: args.boolean("temporary")?,
        path: path(&args, WRITE_TOOL)?,
        content,
        append,
        create_only,
        mode,
        make_dirs: args.boolean("make_dirs")?.unwrap_or(false),
    })
}

fn parse_edit(arguments: Option<&Value>) -> Result<FileEdit, ValidationError> {
    let args = Args::new(arguments, EDIT_ARGS, EDIT_TOOL)?;
    let old_text = raw_text(arguments, "old_text")?
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            invalid(format!(
                "{EDIT_TOOL} needs `old_text`: the exact text to replace (not empty; to write a whole file use {WRITE_TOOL})"
            ))
        })?;
    let new_text = raw_text(arguments, "new_text")?.ok_or_else(|| {
        invalid(format!(
            "{EDIT_TOOL} needs `new_text`: the replacement (\"\" deletes `old_text`)"
        ))
    })?;
    Ok(FileEdit {
        computer_id: args.computer_id()?,
        temporary: args.boolean("temporary")?,
        path: path(&args, EDIT_TOOL)?,
        old_text,
        new_text,
        expected_replacements: whole(&args, "expected_replacements", 1, 1 << 20, "replacements")?
            .unwrap_or(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(tool: &str, args: Value) -> String {
        match parse_file(tool, Some(&args)) {
            Err(ValidationError::Invalid(m)) => m,
            other => panic!("{tool} {args}: {other:?}"),
        }
    }

    #[test]
    fn reads() {
        let FileCall::Read(r) = parse_file(READ_TOOL, Some(&json!({"path": "/a"}))).unwrap() else {
            panic!()
        };
        assert_eq!((r.offset, r.length), (0, MAX_SLICE));
        assert!(err(READ_TOOL, json!({})).contains("needs `path`"));
        assert!(err(READ_TOOL, json!({"path": "a"})).contains("absolute"));
        assert!(err(READ_TOOL, json!({"path": "/a", "length": 0})).contains("length"));
        assert!(err(READ_TOOL, json!({"path": "/a", "length": MAX_SLICE + 1})).contains("4 MiB"));
        assert!(err(READ_TOOL, json!({"path": "/a", "offset": -1})).contains("offset"));
        assert!(err(READ_TOOL, json!({"path": "/a", "x": 1})).contains("unknown argument"));
    }

    #[test]
    fn writes() {
        let w = |args: Value| match parse_file(WRITE_TOOL, Some(&args)).unwrap() {
            FileCall::Write(w) => w,
            _ => panic!(),
        };
        assert_eq!(w(json!({"path": "/a", "content": ""})).content, b"");
        assert_eq!(
            w(json!({"path": "/a", "content": "x\u{0}y"})).content,
            b"x\0y"
        );
        assert_eq!(
            w(json!({"path": "/a", "content_base64": "AP8="})).content,
            [0, 255]
        );
        let full = w(
            json!({"path": "/a", "content": "z", "append": true, "create_only": true, "mode": "0755", "make_dirs": true, "temporary": false, "computer_id": "box"}),
        );
        assert!(full.append && full.create_only && full.make_dirs);
        assert_eq!(full.mode, Some(0o755));
        assert_eq!(full.temporary, Some(false));
        assert!(err(WRITE_TOOL, json!({"path": "/a"})).contains("empty file"));
        assert!(
            err(
                WRITE_TOOL,
                json!({"path": "/a", "content": "", "content_base64": ""})
            )
            .contains("not both")
        );
        assert!(err(WRITE_TOOL, json!({"path": "/a", "content_base64": "%%"})).contains("base64"));
        assert!(
            err(
                WRITE_TOOL,
                json!({"path": "/a", "content": "", "mode": "rw"})
            )
            .contains("octal")
        );
        let big = "x".repeat(MAX_SLICE as usize + 1);
        assert!(err(WRITE_TOOL, json!({"path": "/a", "content": big})).contains("append"));
    }

    #[test]
    fn edits() {
        let FileCall::Edit(e) = parse_file(
            EDIT_TOOL,
            Some(&json!({"path": "/a", "old_text": "x", "new_text": ""})),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!((e.new_text.as_str(), e.expected_replacements), ("", 1));
        assert!(
            err(
                EDIT_TOOL,
                json!({"path": "/a", "old_text": "", "new_text": "y"})
            )
            .contains("old_text")
        );
        assert!(err(EDIT_TOOL, json!({"path": "/a", "old_text": "x"})).contains("new_text"));
        assert!(
            err(
                EDIT_TOOL,
                json!({"path": "/a", "old_text": "x", "new_text": "", "expected_replacements": 0})
            )
            .contains("expected_replacements")
        );
    }

    fn write(args: Value) -> FileWrite {
        match parse_file(WRITE_TOOL, Some(&args)) {
            Ok(FileCall::Write(w)) => w,
            other => panic!("{args}: {other:?}"),
        }
    }

    #[test]
    fn exactly_4_mib_is_written_and_read_in_one_call_and_one_byte_more_is_not() {
        let full = "x".repeat(MAX_SLICE as usize);
        assert_eq!(
            write(json!({"path": "/a", "content": full})).content.len() as u64,
            MAX_SLICE
        );
        let e = err(
            WRITE_TOOL,
            json!({"path": "/a", "content": format!("{full}x")}),
        );
        assert!(e.starts_with("the content is 4194305 bytes"), "{e}");
        let FileCall::Read(r) =
            parse_file(READ_TOOL, Some(&json!({"path": "/a", "length": MAX_SLICE}))).unwrap()
        else {
            panic!()
        };
        assert_eq!(r.length, MAX_SLICE);
    }

    #[test]
    fn content_base64_copied_with_surrounding_whitespace_decodes() {
        assert_eq!(
            write(json!({"path": "/a", "content_base64": "  AP8=\n"})).content,
            [0, 255]
        );
        // A null counts as absent, so the other form is used alone.
        assert_eq!(
            write(json!({"path": "/a", "content": null, "content_base64": "eA=="})).content,
            b"x"
        );
    }

    #[test]
    fn expected_replacements_is_a_whole_number_up_to_a_million_or_so() {
        let edit = |n: Value| {
            parse_file(
                EDIT_TOOL,
                Some(
                    &json!({"path": "/a", "old_text": "x", "new_text": "y", "expected_replacements": n}),
                ),
            )
        };
        let Ok(FileCall::Edit(e)) = edit(json!(1 << 20)) else {
            panic!()
        };
        assert_eq!(e.expected_replacements, 1 << 20);
        let Ok(FileCall::Edit(e)) = edit(json!(3.0)) else {
            panic!()
        };
        assert_eq!(e.expected_replacements, 3);
        for bad in [json!((1 << 20) + 1), json!(2.5), json!("2")] {
            let m = edit(bad.clone()).unwrap_err().to_string();
            assert!(
                m.contains("`expected_replacements` must be a whole number of replacements from 1 to 1048576"),
                "{bad}: {m}"
            );
        }
    }

    #[test]
    fn text_arguments_of_the_wrong_type_are_named() {
        assert_eq!(
            err(WRITE_TOOL, json!({"path": "/a", "content": 5})),
            "`content` must be a string, got the number 5"
        );
        assert_eq!(
            err(
                EDIT_TOOL,
                json!({"path": "/a", "old_text": "x", "new_text": false})
            ),
            "`new_text` must be a string, got the boolean false"
        );
        // A null `new_text` is missing, not an empty replacement.
        assert!(
            err(
                EDIT_TOOL,
                json!({"path": "/a", "old_text": "x", "new_text": null})
            )
            .contains("needs `new_text`")
        );
        assert!(err(READ_TOOL, json!({"path": "/"})).contains("root directory"));
        assert!(matches!(
            parse_file("computer_file_delete", Some(&json!({"path": "/a"}))),
            Err(ValidationError::UnknownTool(t)) if t == "computer_file_delete"
        ));
    }

    #[test]
    fn junk_never_panics() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let keys = [
            "path",
            "offset",
            "length",
            "content",
            "content_base64",
            "append",
            "create_only",
            "mode",
            "make_dirs",
            "old_text",
            "new_text",
            "expected_replacements",
            "computer_id",
            "temporary",
            "x",
        ];
        let values = [
            json!(null),
            json!(""),
            json!("/a"),
            json!("a"),
            json!(-1),
            json!(1.5),
            json!(u64::MAX),
            json!(true),
            json!([1]),
            json!({}),
            json!("%%"),
            json!("0999"),
            json!("/\u{0}"),
            json!(0),
        ];
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut m = serde_json::Map::new();
            for i in 0..(seed % 5) {
                let k = keys[((seed >> (8 * i)) as usize) % keys.len()];
                let v = values[((seed >> (3 + 7 * i)) as usize) % values.len()].clone();
                m.insert(k.into(), v);
            }
            let v = Value::Object(m);
            for tool in [READ_TOOL, WRITE_TOOL, EDIT_TOOL] {
                let _ = parse_file(tool, Some(&v));
            }
        }
        for raw in [json!(null), json!(1), json!("x"), json!([])] {
            let _ = parse_file(WRITE_TOOL, Some(&raw));
        }
    }
}
