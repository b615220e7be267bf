//! The file tools' definitions (group `files`, SPEC §3.9).

use rmcp::model::Tool;
use serde_json::{Value, json};

use super::{annotations, computer_id_schema, object, ui_meta};
use crate::files::{EDIT_TOOL, MAX_SLICE, READ_TOOL, WRITE_TOOL};

/// The file tools, in listing order.
pub const TOOLS: &[&str] = &[READ_TOOL, WRITE_TOOL, EDIT_TOOL];

fn target() -> (Value, Value, Value) {
    (
        computer_id_schema(
            "Computer to use (as for terminal_execute). Omit to use your default computer (this session's; without sessions, your user's); a first call creates it.",
        ),
        json!({"type": "boolean", "default": true, "description": "Only when this call creates the computer: true removes it when the session ends, false keeps it."}),
        json!({"type": "string", "maxLength": crate::files::MAX_PATH, "pattern": "^/", "description": "Absolute path on the computer."}),
    )
}

fn common_output(extra: Value) -> Value {
    let mut props = json!({
        "computer_id": {"type": "string"},
        "path": {"type": "string"},
        "size": {"type": "integer", "minimum": 0, "description": "The file's size in bytes."},
        "created": {"type": "boolean", "description": super::CREATED},
        "error": {"type": "string"},
    });
    if let (Some(p), Value::Object(extra)) = (props.as_object_mut(), extra) {
        p.extend(extra);
    }
    json!({"type": "object", "properties": props, "required": ["computer_id", "path", "size"]})
}

/// The three file tools.
pub fn tools() -> Vec<Tool> {
    let (id, temporary, path) = target();
    let read_input = json!({
        "type": "object",
        "properties": {
            "computer_id": id, "temporary": temporary, "path": path,
            "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "First byte to read."},
            "length": {"type": "integer", "minimum": 1, "maximum": MAX_SLICE, "default": MAX_SLICE, "description": "Most bytes to read (4 MiB at most)."},
        },
        "required": ["path"],
        "additionalProperties": false,
    });
    let read_output = common_output(json!({
        "offset": {"type": "integer", "minimum": 0},
        "content": {"type": "string", "description": "The slice as text (when it is valid UTF-8)."},
        "content_base64": {"type": "string", "description": "The slice's bytes, base64 (when it is not valid UTF-8)."},
        "eof": {"type": "boolean", "description": "This slice reaches the end of the file."},
        "mode": {"type": "string", "description": "Permission bits, octal (\"0644\")."},
        "mtime": {"type": "string", "description": "Last modification (RFC 3339)."},
    }));
    let write_input = json!({
        "type": "object",
        "properties": {
            "computer_id": id, "temporary": temporary, "path": path,
            "content": {"type": "string", "description": "The file's text (\"\" for an empty file)."},
            "content_base64": {"type": "string", "description": "The file's bytes, base64 (instead of `content`)."},
            "append": {"type": "boolean", "default": false, "description": "Add to the end instead of replacing (write big files in 4 MiB slices)."},
            "create_only": {"type": "boolean", "default": false, "description": "Refuse, changing nothing, if the file exists."},
            "mode": {"type": "string", "pattern": "^(0o)?[0-7]{1,4}$", "default": "0644", "description": "Permission bits, octal."},
            "make_dirs": {"type": "boolean", "default": false, "description": "Create missing parent directories."},
        },
        "required": ["path"],
        "additionalProperties": false,
    });
    let write_output = common_output(json!({
        "sha256": {"type": "string", "description": "SHA-256 of the whole file after the write."},
    }));
    let edit_input = json!({
        "type": "object",
        "properties": {
            "computer_id": id, "temporary": temporary, "path": path,
            "old_text": {"type": "string", "minLength": 1, "description": "The exact text to replace, whitespace included."},
            "new_text": {"type": "string", "description": "What replaces it (\"\" deletes it)."},
            "expected_replacements": {"type": "integer", "minimum": 1, "default": 1, "description": "How many times `old_text` must occur; otherwise nothing changes."},
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": false,
    });
    let edit_output = common_output(json!({
        "replacements": {"type": "integer", "minimum": 0},
    }));
    let defs = [
        (
            READ_TOOL,
            "Read a file",
            "Read a file on a computer as bytes: up to 4 MiB from `offset`. Returns `content` (text) or `content_base64` (when the bytes are not UTF-8), the file's `size`, `mode` and `mtime`, and `eof: true` on the last slice; read a bigger file in slices by advancing `offset`.",
            read_input,
            read_output,
            true,
            false,
            true,
        ),
        (
            WRITE_TOOL,
            "Write a file",
            "Write a file on a computer, exactly these bytes (`content` text or `content_base64`). Replacing is atomic (a temporary file, then a rename), so a failed write leaves the old file. `append` adds to the end (big files: 4 MiB per call), `create_only` refuses an existing file, `mode` sets permissions (default 0644), `make_dirs` creates parents. Returns the new `size` and the whole file's `sha256`.",
            write_input,
            write_output,
            false,
            true,
            false,
        ),
        (
            EDIT_TOOL,
            "Edit a file",
            "Replace exact text in a file on a computer: `old_text` must occur exactly `expected_replacements` times (default 1), or nothing changes and the error says how many times it occurs. The file keeps its mode; the rewrite is atomic.",
            edit_input,
            edit_output,
            false,
            true,
            false,
        ),
    ];
    defs.into_iter()
        .map(
            |(name, title, description, input, output, ro, destructive, idem)| {
                let mut t = Tool::new(name, description, object(input));
                t.title = Some(title.into());
                t.output_schema = Some(object(output));
                t.annotations = Some(annotations(title, ro, destructive, idem));
                t.meta = Some(ui_meta(false));
                t
            },
        )
        .collect()
}
