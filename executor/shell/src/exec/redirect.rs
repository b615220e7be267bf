//! Redirections: `< > >> >| <> &> 2>&1 <&- <<EOF <<- <<<`, applied to the descriptor table
//! (the caller saves and restores it), and opening their targets: the special files
//! (`/dev/null`, `/dev/zero`, `/dev/stdin`..., `/dev/fd/N`) or a file inside the root.

use super::*;

impl Shell {
    pub(super) async fn apply_redirects_refs(&mut self, redirs: &[&IoRedirect]) -> Result<(), Ctl> {
        for r in redirs {
            self.apply_redirect(r).await?;
        }
        Ok(())
    }

    /// Applies redirections to the descriptor table (the caller saves and restores it).
    pub(crate) async fn apply_redirects(&mut self, redirs: &[IoRedirect]) -> Result<(), Ctl> {
        for r in redirs {
            self.apply_redirect(r).await?;
        }
        Ok(())
    }

    async fn redirect_fail(&mut self, msg: &str) -> Ctl {
        self.err(msg).await;
        Ctl::Fail(1)
    }

    async fn apply_redirect(&mut self, r: &IoRedirect) -> Result<(), Ctl> {
        match r {
            IoRedirect::File(fd, kind, target) => {
                let default = match kind {
                    IoFileRedirectKind::Read
                    | IoFileRedirectKind::ReadAndWrite
                    | IoFileRedirectKind::DuplicateInput => 0,
                    _ => 1,
                };
                let n = usize::try_from(fd.unwrap_or(default)).unwrap_or(usize::MAX);
                if n > 9 {
                    return Err(self
                        .redirect_fail(&format!("{}: Bad file descriptor", fd.unwrap_or(default)))
                        .await);
                }
                match target {
                    IoFileRedirectTarget::Filename(w) => {
                        let path = self.expand_one(&w.value).await?;
                        let mode = match kind {
                            IoFileRedirectKind::Read | IoFileRedirectKind::DuplicateInput => {
                                Mode::Read
                            }
                            IoFileRedirectKind::Append => Mode::Append,
                            IoFileRedirectKind::ReadAndWrite => Mode::ReadWrite,
                            IoFileRedirectKind::Write if self.opts.noclobber => {
                                let abs = fs::resolve(&self.cwd, &path);
                                if special(&abs).is_none()
                                    && fs::metadata(&self.ctx.root, &abs).is_ok_and(|m| m.is_file())
                                {
                                    return Err(self
                                        .redirect_fail(&format!(
                                            "{path}: cannot overwrite existing file"
                                        ))
                                        .await);
                                }
                                Mode::Write
                            }
                            _ => Mode::Write,
                        };
                        let f = self.open_redirect(&path, mode).await?;
                        self.fds.set(n, Some(f));
                    }
                    IoFileRedirectTarget::Fd(m) => self.dup_fd(n, *m).await?,
                    IoFileRedirectTarget::Duplicate(w) => {
                        let s = self.expand_one(&w.value).await?;
                        if s == "-" {
                            self.fds.set(n, None);
                        } else if let Some(num) = s.strip_suffix('-')
                            && let Ok(m) = num.parse::<i32>()
                        {
                            self.dup_fd(n, m).await?;
                            if let Ok(m) = usize::try_from(m)
                                && m != n
                            {
                                self.fds.set(m, None);
                            }
                        } else if let Ok(m) = s.parse::<i32>() {
                            self.dup_fd(n, m).await?;
                        } else if matches!(kind, IoFileRedirectKind::DuplicateOutput) {
                            // `>&file` is `&>file`.
                            let f = self.open_redirect(&s, Mode::Write).await?;
                            if fd.is_none() {
                                self.fds.set(2, Some(f.clone()));
                            }
                            self.fds.set(n, Some(f));
                        } else {
                            return Err(self
                                .redirect_fail(&format!("{s}: ambiguous redirect"))
                                .await);
                        }
                    }
                    IoFileRedirectTarget::ProcessSubstitution(..) => {
                        return Err(self
                            .redirect_fail("process substitution is not supported")
                            .await);
                    }
                }
            }
            IoRedirect::HereDocument(fd, doc) => {
                let mut body = if doc.requires_expansion {
                    self.expand_heredoc(&doc.doc.value).await?
                } else {
                    doc.doc.value.clone()
                };
                if doc.remove_tabs {
                    body = body
                        .split_inclusive('\n')
                        .map(|l| l.trim_start_matches('\t'))
                        .collect();
                }
                let n = usize::try_from(fd.unwrap_or(0)).unwrap_or(usize::MAX);
                if n > 9 {
                    return Err(self.redirect_fail("Bad file descriptor").await);
                }
                let charge = Charge::of(&self.ctx.budget, body.len())?;
                self.fds.set(
                    n,
                    Some(Fd::In(charged_reader(
                        super::super::bytes::encode(&body).into_owned(),
                        charge,
                    ))),
                );
            }
            IoRedirect::HereString(fd, w) => {
                let mut s = self.expand_one(&w.value).await?;
                s.push('\n');
                let n = usize::try_from(fd.unwrap_or(0)).unwrap_or(usize::MAX);
                if n > 9 {
                    return Err(self.redirect_fail("Bad file descriptor").await);
                }
                let charge = Charge::of(&self.ctx.budget, s.len())?;
                self.fds.set(
                    n,
                    Some(Fd::In(charged_reader(
                        super::super::bytes::encode(&s).into_owned(),
                        charge,
                    ))),
                );
            }
            IoRedirect::OutputAndError(w, append) => {
                let path = self.expand_one(&w.value).await?;
                let f = self
                    .open_redirect(&path, if *append { Mode::Append } else { Mode::Write })
                    .await?;
                self.fds.set(1, Some(f.clone()));
                self.fds.set(2, Some(f));
            }
        }
        Ok(())
    }

    async fn dup_fd(&mut self, n: usize, m: i32) -> Result<(), Ctl> {
        let src = usize::try_from(m)
            .ok()
            .and_then(|m| self.fds.get(m).cloned());
        match src {
            Some(f) => {
                self.fds.set(n, Some(f));
                Ok(())
            }
            None => Err(self
                .redirect_fail(&format!("{m}: Bad file descriptor"))
                .await),
        }
    }

    /// Opens a redirection target (special device or a file inside the root).
    pub(crate) async fn open_redirect(&mut self, path: &str, mode: Mode) -> Result<Fd, Ctl> {
        if path.is_empty() {
            return Err(self.redirect_fail(": No such file or directory").await);
        }
        let abs = fs::resolve(&self.cwd, path);
        let reading = matches!(mode, Mode::Read | Mode::ReadWrite);
        match special(&abs) {
            Some(Special::Null) => {
                return Ok(if reading {
                    Fd::In(memory_reader(Vec::new()))
                } else {
                    Fd::Out(SharedWriter::new(Box::new(tokio::io::sink())))
                });
            }
            Some(Special::Zero) => {
                return Ok(if reading {
                    Fd::In(SharedReader::new(Box::new(tokio::io::repeat(0))))
                } else {
                    Fd::Out(SharedWriter::new(Box::new(tokio::io::sink())))
                });
            }
            Some(Special::Random) => {
                return Ok(if reading {
                    Fd::In(SharedReader::new(Box::new(crate::dev::Random)))
                } else {
                    Fd::Out(SharedWriter::new(Box::new(tokio::io::sink())))
                });
            }
            Some(Special::Full) => {
                return Ok(if reading {
                    Fd::In(SharedReader::new(Box::new(tokio::io::repeat(0))))
                } else {
                    Fd::Out(SharedWriter::new(Box::new(crate::dev::Full)))
                });
            }
            Some(Special::Fd(k)) => {
                return match self.fds.get(k).cloned() {
                    Some(f) => Ok(f),
                    None => Err(self
                        .redirect_fail(&format!("{path}: Bad file descriptor"))
                        .await),
                };
            }
            None => {}
        }
        match fs::open(&self.ctx.root, &abs, mode) {
            Ok(f) => Ok(if reading {
                Fd::In(SharedReader::new(Box::new(SyncFile(f))))
            } else {
                Fd::Out(SharedWriter::new(Box::new(SyncFile(f))))
            }),
            Err(e) => Err(self
                .redirect_fail(&format!("{path}: {}", fs::err_msg(&e)))
                .await),
        }
    }
}
