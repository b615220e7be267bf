//! Compound commands: `if`, `while`/`until`, `for`, `for ((..))`, `case`, `((..))`, brace
//! groups and subshells (coprocesses are refused), with `break`/`continue` unwinding out of
//! loops.

use super::*;

impl Shell {
    async fn run_loop_body(&mut self, body: &CompoundList, st: &mut i32) -> Result<bool, Ctl> {
        match self.exec_list(body).await {
            Ok(s) => {
                *st = s;
                Ok(true)
            }
            Err(Ctl::Break(n)) => {
                if n > 1 {
                    Err(Ctl::Break(n - 1))
                } else {
                    Ok(false)
                }
            }
            Err(Ctl::Continue(n)) => {
                if n > 1 {
                    Err(Ctl::Continue(n - 1))
                } else {
                    Ok(true)
                }
            }
            Err(e) => Err(e),
        }
    }

    async fn cond(&mut self, list: &CompoundList) -> R {
        self.cond_depth += 1;
        let r = self.exec_list(list).await;
        self.cond_depth -= 1;
        r
    }

    pub(super) fn exec_compound<'a>(&'a mut self, cc: &'a CompoundCommand) -> BoxFut<'a, R> {
        Box::pin(async move {
            match cc {
                CompoundCommand::Arithmetic(ac) => {
                    if self.opts.xtrace {
                        let t = format!("+ (( {} ))\n", ac.expr.value);
                        let _ = self.write_fd(2, t.as_bytes()).await;
                    }
                    let v = self.arith_subst(&ac.expr.value).await?;
                    Ok(i32::from(v == 0))
                }
                CompoundCommand::ArithmeticForClause(fc) => {
                    if let Some(init) = &fc.initializer {
                        self.arith_subst(&init.value).await?;
                    }
                    self.loop_depth += 1;
                    let r = async {
                        let mut st = 0;
                        loop {
                            tokio::task::yield_now().await;
                            self.ctx.budget.check()?;
                            if let Some(c) = &fc.condition
                                && self.arith_subst(&c.value).await? == 0
                            {
                                break;
                            }
                            if !self.run_loop_body(&fc.body.list, &mut st).await? {
                                break;
                            }
                            if let Some(u) = &fc.updater {
                                self.arith_subst(&u.value).await?;
                            }
                        }
                        Ok(st)
                    }
                    .await;
                    self.loop_depth -= 1;
                    r
                }
                CompoundCommand::BraceGroup(bg) => self.exec_list(&bg.list).await,
                CompoundCommand::Subshell(sc) => {
                    let mut sub = self.subshell();
                    sub.enter().await?;
                    let list = sc.list.clone();
                    let r = sub
                        .on_fresh_stack(Box::new(move |sh| {
                            Box::pin(async move { sh.exec_list(&list).await })
                        }))
                        .await;
                    let st = status_of(r, sub.status);
                    drop(sub);
                    if self.ctx.aborted() {
                        return Err(Ctl::Exit(2));
                    }
                    Ok(st)
                }
                CompoundCommand::ForClause(fc) => {
                    let values = match &fc.values {
                        Some(words) => {
                            let raw: Vec<String> = words.iter().map(|w| w.value.clone()).collect();
                            self.expand_args(&raw).await?
                        }
                        None => self.params.to_vec(),
                    };
                    self.loop_depth += 1;
                    let r = async {
                        let mut st = 0;
                        for v in values {
                            tokio::task::yield_now().await;
                            self.ctx.budget.check()?;
                            if let Err(m) = self.set_var(&fc.variable_name, &v) {
                                self.err(&m).await;
                                return Err(Ctl::Fail(1));
                            }
                            if !self.run_loop_body(&fc.body.list, &mut st).await? {
                                break;
                            }
                        }
                        Ok(st)
                    }
                    .await;
                    self.loop_depth -= 1;
                    r
                }
                CompoundCommand::CaseClause(cc) => {
                    let value = self.expand_one(&cc.value.value).await?;
                    let mut st = 0;
                    let mut i = 0;
                    let mut fall = false;
                    while let Some(item) = cc.cases.get(i) {
                        let mut hit = fall;
                        if !hit {
                            for p in &item.patterns {
                                let pat = self.expand_pattern(&p.value).await?;
                                if Pattern::new(&pat).matches(&value) {
                                    hit = true;
                                    break;
                                }
                            }
                        }
                        fall = false;
                        if hit {
                            st = match &item.cmd {
                                Some(c) => self.exec_list(c).await?,
                                None => 0,
                            };
                            match item.post_action {
                                CaseItemPostAction::ExitCase => break,
                                CaseItemPostAction::UnconditionallyExecuteNextCaseItem => {
                                    fall = true
                                }
                                CaseItemPostAction::ContinueEvaluatingCases => {}
                            }
                        }
                        i += 1;
                    }
                    Ok(st)
                }
                CompoundCommand::IfClause(ic) => {
                    if self.cond(&ic.condition).await? == 0 {
                        return self.exec_list(&ic.then).await;
                    }
                    if let Some(elses) = &ic.elses {
                        for e in elses {
                            match &e.condition {
                                Some(c) => {
                                    if self.cond(c).await? == 0 {
                                        return self.exec_list(&e.body).await;
                                    }
                                }
                                None => return self.exec_list(&e.body).await,
                            }
                        }
                    }
                    Ok(0)
                }
                CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                    let until = matches!(cc, CompoundCommand::UntilClause(_));
                    self.loop_depth += 1;
                    let r = async {
                        let mut st = 0;
                        loop {
                            tokio::task::yield_now().await;
                            self.ctx.budget.check()?;
                            let c = self.cond(&w.0).await?;
                            if (c == 0) == until {
                                break;
                            }
                            if !self.run_loop_body(&w.1.list, &mut st).await? {
                                break;
                            }
                        }
                        Ok(st)
                    }
                    .await;
                    self.loop_depth -= 1;
                    r
                }
                CompoundCommand::Coprocess(_) => {
                    self.err("coproc: not supported").await;
                    Ok(2)
                }
            }
        })
    }
}
