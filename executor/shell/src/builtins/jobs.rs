//! The builtins of background jobs and signals: `kill`, `wait`, `trap` (only `EXIT` runs;
//! there are no real signals), and the signal names they share.

use super::*;

const SIGNALS: &[&str] = &[
    "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
    "PIPE", "ALRM", "TERM",
];

fn signal_number(s: &str) -> Option<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return Some(n);
    }
    let u = s.to_uppercase();
    let u = u.strip_prefix("SIG").unwrap_or(&u);
    SIGNALS.iter().position(|x| *x == u).map(|i| i as i32 + 1)
}

impl Shell {
    fn signal_names(&self) -> String {
        SIGNALS
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{:2}) SIG{s}", i + 1))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    }

    fn find_job(&self, spec: &str) -> Option<usize> {
        if let Some(j) = spec.strip_prefix('%') {
            if matches!(j, "%" | "+" | "") {
                return self.jobs.len().checked_sub(1);
            }
            if j == "-" {
                return self.jobs.len().checked_sub(2);
            }
            let id: usize = j.parse().ok()?;
            return self.jobs.iter().position(|x| x.id == id);
        }
        let pid: u32 = spec.parse().ok()?;
        self.jobs.iter().position(|x| x.pid == pid)
    }

    /// `jobs [-p]`: this shell's jobs, and in a subshell those of the shell around it.
    pub(super) async fn bi_jobs(&mut self, args: &[String]) -> R {
        let pids_only = args.iter().any(|a| a == "-p");
        let mut s = String::new();
        for j in self.job_lines() {
            if pids_only {
                s.push_str(&format!("{}\n", j.pid));
            } else {
                let state = if j.running { "Running" } else { "Done" };
                s.push_str(&format!("[{}]  {state}  {}\n", j.id, j.cmd.trim()));
            }
        }
        self.out(&s).await?;
        Ok(0)
    }

    pub(super) async fn bi_kill(&mut self, args: &[String]) -> R {
        let mut sig = 15;
        let mut i = 0;
        while let Some(a) = args.get(i) {
            if a == "-l" || a == "-L" {
                let s = self.signal_names();
                self.out(&s).await?;
                return Ok(0);
            }
            if a == "-s" || a == "-n" {
                i += 1;
                sig = args.get(i).and_then(|s| signal_number(s)).unwrap_or(15);
            } else if a == "--" {
                i += 1;
                break;
            } else if let Some(s) = a.strip_prefix('-') {
                match signal_number(s) {
                    Some(n) => sig = n,
                    None => {
                        self.err(&format!("kill: {s}: invalid signal specification"))
                            .await;
                        return Ok(1);
                    }
                }
            } else {
                break;
            }
            i += 1;
        }
        let targets = args.get(i..).unwrap_or(&[]).to_vec();
        if targets.is_empty() {
            self.err("kill: usage: kill [-s sigspec | -n signum | -sigspec] pid | jobspec ... or kill -l [sigspec]").await;
            return Ok(2);
        }
        let mut st = 0;
        for t in targets {
            if t == "1" || t == "$$" {
                if sig == 0 {
                    continue;
                }
                return Err(Ctl::Exit(128 + sig));
            }
            match self.find_job(&t) {
                Some(idx) => {
                    let Some(job) = self.jobs.get_mut(idx) else {
                        continue;
                    };
                    let running = job.handle.as_ref().is_some_and(|h| !h.is_finished());
                    if sig == 0 {
                        if !running {
                            st = 1;
                        }
                        continue;
                    }
                    if running {
                        if let Some(h) = job.handle.take() {
                            h.abort();
                        }
                        job.status = Some(128 + sig);
                    } else if job.handle.is_none() && job.status.is_some() && !t.starts_with('%') {
                        self.err(&format!("kill: ({t}) - No such process")).await;
                        st = 1;
                    }
                }
                None => {
                    if t.starts_with('%') {
                        self.err(&format!("kill: {t}: no such job")).await;
                    } else {
                        self.err(&format!("kill: ({t}) - No such process")).await;
                    }
                    st = 1;
                }
            }
        }
        Ok(st)
    }

    async fn wait_job(&mut self, idx: usize) -> i32 {
        let Some(job) = self.jobs.get_mut(idx) else {
            return 127;
        };
        if let Some(h) = job.handle.as_mut() {
            let st = match h.await {
                Ok(s) => s,
                Err(e) if e.is_cancelled() => 143,
                Err(_) => 1,
            };
            job.handle = None;
            job.status = Some(st);
        }
        job.status.unwrap_or(0)
    }

    pub(super) async fn bi_wait(&mut self, args: &[String]) -> R {
        let targets: Vec<&String> = args
            .iter()
            .filter(|a| !a.starts_with('-') || a.len() == 1)
            .collect();
        if targets.is_empty() {
            for idx in 0..self.jobs.len() {
                self.wait_job(idx).await;
            }
            self.jobs.clear();
            return Ok(0);
        }
        let mut st = 0;
        for t in targets {
            match self.find_job(t) {
                Some(idx) => {
                    st = self.wait_job(idx).await;
                }
                None => {
                    self.err(&format!("wait: pid {t} is not a child of this shell"))
                        .await;
                    st = 127;
                }
            }
        }
        Ok(st)
    }

    pub(super) async fn bi_trap(&mut self, args: &[String]) -> R {
        if args.is_empty() || args.first().is_some_and(|a| a == "-p") {
            if let Some(t) = &self.exit_trap {
                let s = format!("trap -- {} EXIT\n", quote(t));
                self.out(&s).await?;
            }
            return Ok(0);
        }
        if args.first().is_some_and(|a| a == "-l") {
            let s = self.signal_names();
            self.out(&s).await?;
            return Ok(0);
        }
        let args: Vec<&String> = args.iter().filter(|a| a.as_str() != "--").collect();
        let (action, sigs) = if args.len() == 1 {
            (None, &args[..])
        } else {
            (
                args.first().map(|s| s.to_string()),
                args.get(1..).unwrap_or(&[]),
            )
        };
        for s in sigs {
            let u = s.to_uppercase();
            if matches!(u.as_str(), "EXIT" | "0" | "SIGEXIT") {
                self.exit_trap = match &action {
                    Some(a) if a == "-" => None,
                    Some(a) => Some(a.clone()),
                    None => None,
                };
            } else if signal_number(&u).is_none()
                && !matches!(u.as_str(), "ERR" | "DEBUG" | "RETURN")
            {
                self.err(&format!("trap: {s}: invalid signal specification"))
                    .await;
                return Ok(1);
            }
        }
        Ok(0)
    }
}
