//! Conditional expressions: the `test` / `[` builtins (parsed by brush-parser's test
//! command parser) and `[[ ... ]]` (patterns with `==`, regexes with `=~`). File tests go
//! through cap-std inside the computer's root.

use brush_parser::ast::{BinaryPredicate as BP, ExtendedTestExpr, TestExpr, UnaryPredicate as UP};
use cap_std::fs::{FileTypeExt, MetadataExt, PermissionsExt};

use super::arith;
use super::glob::Pattern;
use super::parse::guarded;
use super::state::{BoxFut, Ctl, Shell};
use super::{dev, fs};

impl Shell {
    fn file_test(&self, pred: &UP, path: &str) -> bool {
        let abs = fs::resolve(&self.cwd, path);
        if path.is_empty() {
            return false;
        }
        if dev::device(&abs).is_some() {
            return matches!(
                pred,
                UP::FileExists
                    | UP::FileExistsAndIsCharSpecialFile
                    | UP::FileExistsAndIsReadable
                    | UP::FileExistsAndIsWritable
            );
        }
        let root = &self.ctx.root;
        if matches!(pred, UP::FileExistsAndIsSymlink) {
            return fs::symlink_metadata(root, &abs).is_ok_and(|m| m.file_type().is_symlink());
        }
        let Ok(m) = fs::metadata(root, &abs) else {
            return false;
        };
        let mode = m.permissions().mode();
        match pred {
            UP::FileExists => true,
            UP::FileExistsAndIsBlockSpecialFile => m.file_type().is_block_device(),
            UP::FileExistsAndIsCharSpecialFile => m.file_type().is_char_device(),
            UP::FileExistsAndIsDir => m.is_dir(),
            UP::FileExistsAndIsRegularFile => m.is_file(),
            UP::FileExistsAndIsSetgid => mode & 0o2000 != 0,
            UP::FileExistsAndHasStickyBit => mode & 0o1000 != 0,
            UP::FileExistsAndIsFifo => m.file_type().is_fifo(),
            UP::FileExistsAndIsReadable => mode & 0o444 != 0,
            UP::FileExistsAndIsNotZeroLength => m.len() > 0,
            UP::FileExistsAndIsSetuid => mode & 0o4000 != 0,
            UP::FileExistsAndIsWritable => mode & 0o222 != 0 && !root.read_only(&abs),
            UP::FileExistsAndIsExecutable => mode & 0o111 != 0,
            UP::FileExistsAndOwnedByEffectiveGroupId | UP::FileExistsAndOwnedByEffectiveUserId => {
                true
            }
            UP::FileExistsAndModifiedSinceLastRead => false,
            UP::FileExistsAndIsSocket => m.file_type().is_socket(),
            _ => false,
        }
    }

    fn unary(&self, pred: &UP, s: &str) -> bool {
        match pred {
            UP::StringHasZeroLength => s.is_empty(),
            UP::StringHasNonZeroLength => !s.is_empty(),
            UP::FdIsOpenTerminal => false,
            UP::ShellVariableIsSetAndAssigned => self.get(s).is_some(),
            UP::ShellVariableIsSetAndNameRef => false,
            UP::ShellOptionEnabled => match s {
                "errexit" => self.opts.errexit,
                "nounset" => self.opts.nounset,
                "xtrace" => self.opts.xtrace,
                "pipefail" => self.opts.pipefail,
                "noglob" => self.opts.noglob,
                "noclobber" => self.opts.noclobber,
                _ => false,
            },
            p => self.file_test(p, s),
        }
    }

    fn mtime(&self, path: &str) -> Option<std::time::SystemTime> {
        let abs = fs::resolve(&self.cwd, path);
        fs::metadata(&self.ctx.root, &abs)
            .ok()?
            .modified()
            .ok()
            .map(cap_std::time::SystemTime::into_std)
    }

    /// Binary predicates. `int` parses an operand of an arithmetic comparison.
    fn binary(&mut self, pred: &BP, l: &str, r: &str, extended: bool) -> Result<bool, String> {
        let int = |sh: &mut Shell, s: &str| -> Result<i64, String> {
            if extended {
                arith::eval_str(sh, s)
            } else {
                arith::parse_int(s).ok_or_else(|| format!("{s}: integer expression expected"))
            }
        };
        Ok(match pred {
            BP::FilesReferToSameDeviceAndInodeNumbers => {
                let a = fs::metadata(&self.ctx.root, &fs::resolve(&self.cwd, l));
                let b = fs::metadata(&self.ctx.root, &fs::resolve(&self.cwd, r));
                match (a, b) {
                    (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
                    _ => false,
                }
            }
            BP::LeftFileIsNewerOrExistsWhenRightDoesNot => match (self.mtime(l), self.mtime(r)) {
                (Some(a), Some(b)) => a > b,
                (Some(_), None) => true,
                _ => false,
            },
            BP::LeftFileIsOlderOrDoesNotExistWhenRightDoes => {
                match (self.mtime(l), self.mtime(r)) {
                    (Some(a), Some(b)) => a < b,
                    (None, Some(_)) => true,
                    _ => false,
                }
            }
            BP::StringExactlyMatchesPattern | BP::StringExactlyMatchesString => {
                if extended {
                    Pattern::new(r).matches(l)
                } else {
                    l == r
                }
            }
            BP::StringDoesNotExactlyMatchPattern | BP::StringDoesNotExactlyMatchString => {
                if extended {
                    !Pattern::new(r).matches(l)
                } else {
                    l != r
                }
            }
            BP::StringMatchesRegex => {
                let re =
                    regex::Regex::new(r).map_err(|_| format!("{r}: invalid regular expression"))?;
                match re.captures(l) {
                    Some(c) => {
                        let whole = c.get(0).map(|m| m.as_str().to_owned()).unwrap_or_default();
                        let _ = self.set_var("BASH_REMATCH", &whole);
                        true
                    }
                    None => false,
                }
            }
            BP::StringContainsSubstring => l.contains(r),
            BP::LeftSortsBeforeRight => l < r,
            BP::LeftSortsAfterRight => l > r,
            BP::ArithmeticEqualTo => int(self, l)? == int(self, r)?,
            BP::ArithmeticNotEqualTo => int(self, l)? != int(self, r)?,
            BP::ArithmeticLessThan => int(self, l)? < int(self, r)?,
            BP::ArithmeticLessThanOrEqualTo => int(self, l)? <= int(self, r)?,
            BP::ArithmeticGreaterThan => int(self, l)? > int(self, r)?,
            BP::ArithmeticGreaterThanOrEqualTo => int(self, l)? >= int(self, r)?,
        })
    }

    fn eval_test(&mut self, e: &TestExpr, depth: usize) -> Result<bool, String> {
        if depth > 200 {
            return Err("expression too complex".into());
        }
        Ok(match e {
            TestExpr::False => false,
            TestExpr::Literal(s) => !s.is_empty(),
            TestExpr::And(a, b) => self.eval_test(a, depth + 1)? && self.eval_test(b, depth + 1)?,
            TestExpr::Or(a, b) => self.eval_test(a, depth + 1)? || self.eval_test(b, depth + 1)?,
            TestExpr::Not(a) => !self.eval_test(a, depth + 1)?,
            TestExpr::Parenthesized(a) => self.eval_test(a, depth + 1)?,
            TestExpr::UnaryTest(p, s) => self.unary(p, s),
            TestExpr::BinaryTest(p, l, r) => self.binary(p, l, r, false)?,
        })
    }

    /// `test` / `[`: returns 0 (true), 1 (false) or 2 (error).
    pub(crate) async fn builtin_test(&mut self, name: &str, args: &[String]) -> i32 {
        if args.len() > 200 {
            self.err(&format!("{name}: too many arguments")).await;
            return 2;
        }
        let parsed = guarded(|| brush_parser::test_command::parse(args));
        let expr = match parsed {
            Some(Ok(e)) => e,
            _ => {
                let what = args.first().map_or("", String::as_str);
                self.err(&format!(
                    "{name}: {what}: unexpected operator or syntax error"
                ))
                .await;
                return 2;
            }
        };
        match self.eval_test(&expr, 0) {
            Ok(b) => i32::from(!b),
            Err(m) => {
                self.err(&format!("{name}: {m}")).await;
                2
            }
        }
    }

    /// `[[ ... ]]`.
    pub(crate) fn eval_extended<'a>(
        &'a mut self,
        e: &'a ExtendedTestExpr,
    ) -> BoxFut<'a, Result<bool, Ctl>> {
        Box::pin(async move {
            Ok(match e {
                ExtendedTestExpr::And(a, b) => {
                    self.eval_extended(a).await? && self.eval_extended(b).await?
                }
                ExtendedTestExpr::Or(a, b) => {
                    self.eval_extended(a).await? || self.eval_extended(b).await?
                }
                ExtendedTestExpr::Not(a) => !self.eval_extended(a).await?,
                ExtendedTestExpr::Parenthesized(a) => self.eval_extended(a).await?,
                ExtendedTestExpr::UnaryTest(p, w) => {
                    let s = self.expand_one(&w.value).await?;
                    self.unary(p, &s)
                }
                ExtendedTestExpr::BinaryTest(p, l, r) => {
                    let ls = self.expand_one(&l.value).await?;
                    let rs = match p {
                        BP::StringExactlyMatchesPattern
                        | BP::StringDoesNotExactlyMatchPattern
                        | BP::StringExactlyMatchesString
                        | BP::StringDoesNotExactlyMatchString => {
                            self.expand_pattern(&r.value).await?
                        }
                        BP::StringMatchesRegex => self.expand_regex(&r.value).await?,
                        _ => self.expand_one(&r.value).await?,
                    };
                    match self.binary(p, &ls, &rs, true) {
                        Ok(b) => b,
                        Err(m) => {
                            self.err(&m).await;
                            return Err(Ctl::Fail(2));
                        }
                    }
                }
            })
        })
    }
}
