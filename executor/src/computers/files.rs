//! Files on this server's computers (SPEC §3.9): `computer_file_read`, `_write` and
//! `_edit`, on whichever backend holds the computer.
//!
//! A file call names its computer like an exec (the session default when omitted; a
//! first call creates it) and counts as a use of it. The backend moves bytes; the edit is
//! done here once for every backend: read the whole file, replace exactly, write it back
//! atomically with its own mode.

use serde_json::Value;
use shared::files::{
    FileCall, FileEdit, FileRead, FileWrite, MAX_EDIT_BYTES, apply_edit, edit_structured,
    read_structured, write_structured,
};

use super::{Computers, InUse, SessionHost};
use crate::error::ComputerError;
use crate::place::{BackendError, Failure, Place};
use crate::progress::Progress;
use crate::spec::{FileWriteSpec, FileWritten};

impl SessionHost {
    /// Runs a file tool call: attaches (or creates) its computer, then the operation.
    pub(super) async fn file(
        &self,
        call: FileCall,
        progress: &Progress,
    ) -> Result<Value, ComputerError> {
        let (id, _) = self
            .target(call.computer_id(), call.temporary(), progress)
            .await?;
        self.computers.file_on(&self.key(&id), &id, call).await
    }
}

impl Computers {
    /// Runs `call` on computer `key` (the caller's `id`), starting it once if it was
    /// stopped behind our back, and forgetting it if it vanished.
    async fn file_on(&self, key: &str, id: &str, call: FileCall) -> Result<Value, ComputerError> {
        let _in_use = InUse::new(self, key);
        let mut result = self.file_once(key, id, &call).await;
        if matches!(&result, Err(ComputerError::Backend(e)) if e.failure == Failure::NotRunning)
            && self.backend.start(key).await.is_ok()
        {
            result = self.file_once(key, id, &call).await;
        }
        if matches!(&result, Err(e) if e.failure() == Some(Failure::NotFound)) {
            let Ok(()) = self.registry().forget(key);
        }
        result
    }

    async fn file_once(
        &self,
        key: &str,
        id: &str,
        call: &FileCall,
    ) -> Result<Value, ComputerError> {
        match call {
            FileCall::Read(FileRead {
                path,
                offset,
                length,
                ..
            }) => {
                let slice = self.backend.file_read(key, path, *offset, *length).await?;
                Ok(read_structured(id, path, &slice))
            }
            FileCall::Write(w) => {
                let written = self.backend.file_write(key, &write_spec(w)).await?;
                Ok(write_structured(id, &w.path, &written))
            }
            FileCall::Edit(e) => {
                let (replacements, written) = self.edit(key, e).await?;
                Ok(edit_structured(id, &e.path, replacements, written.size))
            }
        }
    }

    /// Reads the whole file, replaces exactly, writes it back in one atomic replace with
    /// its own mode. One slice each way, so the rewrite is atomic: files up to 4 MiB.
    async fn edit(&self, key: &str, e: &FileEdit) -> Result<(u64, FileWritten), ComputerError> {
        let file = self
            .backend
            .file_read(key, &e.path, 0, MAX_EDIT_BYTES)
            .await?;
        if file.size > MAX_EDIT_BYTES || !file.eof() {
            return Err(refused(format!(
                "{} is {} bytes; computer_file_edit rewrites files of at most {MAX_EDIT_BYTES} bytes (4 MiB) atomically: edit it with terminal_execute (e.g. sed -i)",
                e.path, file.size
            )));
        }
        let (edited, replacements) = apply_edit(
            &e.path,
            &file.data,
            &e.old_text,
            &e.new_text,
            e.expected_replacements,
        )
        .map_err(|err| refused(err.to_string()))?;
        if edited.len() as u64 > MAX_EDIT_BYTES {
            return Err(refused(format!(
                "the edited file would be {} bytes, over the 4 MiB computer_file_edit writes at once; nothing changed",
                edited.len()
            )));
        }
        let spec = FileWriteSpec {
            path: &e.path,
            data: &edited,
            append: false,
            create_only: false,
            mode: Some(file.mode),
            make_dirs: false,
        };
        Ok((replacements, self.backend.file_write(key, &spec).await?))
    }
}

fn write_spec(w: &FileWrite) -> FileWriteSpec<'_> {
    FileWriteSpec {
        path: &w.path,
        data: &w.content,
        append: w.append,
        create_only: w.create_only,
        mode: w.mode,
        make_dirs: w.make_dirs,
    }
}

fn refused(message: String) -> ComputerError {
    ComputerError::Backend(BackendError::new(Failure::File, message))
}
