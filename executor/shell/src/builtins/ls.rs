//! `ls`, answered by the host: WASI gives a program no modes, owners or link counts, so the
//! toolbox's `ls` could not show them. This one reads the real metadata of the computer's
//! files (the writable layer's host files and the read-only base), shows every file as
//! owned by `root` (the computer's only user), and prints one name a line, as GNU `ls`
//! does when its output is not a terminal. Flags: `-l -a -A -d -h -1 -t -r -S -F -p -R
//! -n -i`; `-C`, `-G` and `--color` are accepted and ignored.

use cap_std::fs::{FileTypeExt, MetadataExt, PermissionsExt};

use super::*;

#[derive(Default)]
struct Opts {
    long: bool,
    all: bool,
    almost: bool,
    dir_only: bool,
    human: bool,
    by_time: bool,
    by_size: bool,
    reverse: bool,
    classify: bool,
    slash: bool,
    recursive: bool,
    numeric: bool,
    inode: bool,
}

/// One entry to print.
struct Entry {
    name: String,
    abs: String,
    meta: Option<cap_std::fs::Metadata>,
}

impl Shell {
    pub(super) async fn bi_ls(&mut self, args: &[String]) -> R {
        let mut o = Opts::default();
        let mut paths = Vec::new();
        let mut opts_done = false;
        for a in args {
            if opts_done || a == "-" || !a.starts_with('-') {
                paths.push(a.clone());
                continue;
            }
            match a.as_str() {
                "--" => opts_done = true,
                "--all" => o.all = true,
                "--almost-all" => o.almost = true,
                "--directory" => o.dir_only = true,
                "--human-readable" => o.human = true,
                "--reverse" => o.reverse = true,
                "--recursive" => o.recursive = true,
                "--classify" => o.classify = true,
                a if a.starts_with("--color") || a == "--full-time" => {}
                a if a.starts_with("--") => {
                    self.err_ls(&format!("unrecognized option '{a}'")).await;
                    return Ok(2);
                }
                a => {
                    for c in a.chars().skip(1) {
                        match c {
                            'l' => o.long = true,
                            'a' => o.all = true,
                            'A' => o.almost = true,
                            'd' => o.dir_only = true,
                            'h' => o.human = true,
                            't' => o.by_time = true,
                            'S' => o.by_size = true,
                            'r' => o.reverse = true,
                            'F' => o.classify = true,
                            'p' => o.slash = true,
                            'R' => o.recursive = true,
                            'n' => {
                                o.numeric = true;
                                o.long = true;
                            }
                            'i' => o.inode = true,
                            '1' | 'C' | 'G' | 'x' | 'U' | 'f' | 'N' | 'b' | 'q' => {}
                            c => {
                                self.err_ls(&format!("invalid option -- '{c}'")).await;
                                return Ok(2);
                            }
                        }
                    }
                }
            }
        }
        if paths.is_empty() {
            paths.push(".".into());
        }
        let mut st = 0;
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        for p in &paths {
            let abs = fs::resolve(&self.cwd, p);
            match fs::metadata(&self.ctx.root, &abs) {
                Ok(m) if m.is_dir() && !o.dir_only => dirs.push((p.clone(), abs)),
                Ok(_) => {
                    let meta = fs::symlink_metadata(&self.ctx.root, &abs).ok();
                    files.push(Entry {
                        name: p.clone(),
                        abs,
                        meta,
                    });
                }
                Err(e) => match fs::symlink_metadata(&self.ctx.root, &abs) {
                    Ok(m) => files.push(Entry {
                        name: p.clone(),
                        abs,
                        meta: Some(m),
                    }),
                    Err(_) => {
                        self.err_ls(&format!("cannot access '{p}': {}", fs::err_msg(&e)))
                            .await;
                        st = 2;
                    }
                },
            }
        }
        let mut out = String::new();
        sort(&mut files, &o);
        self.render(&files, &o, false, &mut out);
        let headers = paths.len() > 1 || o.recursive;
        dirs.sort_by(|a, b| a.0.cmp(&b.0));
        if o.reverse {
            dirs.reverse();
        }
        let mut first = files.is_empty();
        let mut queue: std::collections::VecDeque<(String, String)> = dirs.into();
        while let Some((name, abs)) = queue.pop_front() {
            if !first {
                out.push('\n');
            }
            first = false;
            if headers {
                out.push_str(&format!("{name}:\n"));
            }
            let mut names = fs::list_dir(&self.ctx.root, &abs);
            if o.all {
                names.push(".".into());
                names.push("..".into());
            }
            let mut entries: Vec<Entry> = names
                .into_iter()
                .filter(|n| o.all || o.almost || !n.starts_with('.'))
                .map(|n| {
                    let child = fs::resolve(&abs, &n);
                    let meta = if n == ".." {
                        fs::symlink_metadata(&self.ctx.root, &fs::resolve(&abs, ".."))
                    } else {
                        fs::symlink_metadata(&self.ctx.root, &child)
                    }
                    .ok();
                    Entry {
                        name: n,
                        abs: child,
                        meta,
                    }
                })
                .collect();
            sort(&mut entries, &o);
            self.render(&entries, &o, true, &mut out);
            if o.recursive {
                let subdirs: Vec<(String, String)> = entries
                    .iter()
                    .filter(|e| e.name != "." && e.name != "..")
                    .filter(|e| e.meta.as_ref().is_some_and(|m| m.is_dir()))
                    .map(|e| {
                        let shown = if name.ends_with('/') {
                            format!("{name}{}", e.name)
                        } else {
                            format!("{name}/{}", e.name)
                        };
                        (shown, e.abs.clone())
                    })
                    .collect();
                for (i, d) in subdirs.into_iter().enumerate() {
                    queue.insert(i, d);
                }
            }
            self.ctx.budget.fits(out.len())?;
        }
        self.out(&out).await?;
        Ok(st)
    }

    async fn err_ls(&mut self, msg: &str) {
        if let Some(w) = self.fds.writer(2) {
            use tokio::io::AsyncWriteExt;
            let line = format!("ls: {msg}\n");
            let _ = crate::io::OutHandle(w).write_all(line.as_bytes()).await;
        }
    }

    fn render(&self, entries: &[Entry], o: &Opts, total: bool, out: &mut String) {
        if !o.long {
            for e in entries {
                if o.inode {
                    let ino = e.meta.as_ref().map_or(0, MetadataExt::ino);
                    out.push_str(&format!("{ino} "));
                }
                out.push_str(&e.name);
                out.push_str(&suffix(e, o));
                out.push('\n');
            }
            return;
        }
        let rows: Vec<[String; 4]> = entries
            .iter()
            .map(|e| {
                let m = e.meta.as_ref();
                let dev = crate::dev::device(&e.abs).is_some() && e.abs.starts_with("/dev/");
                let size = m.map_or(0, |m| m.len());
                [
                    m.map_or(0, MetadataExt::ino).to_string(),
                    m.map_or(1, MetadataExt::nlink).to_string(),
                    if dev {
                        "0".into()
                    } else if o.human {
                        human(size)
                    } else {
                        size.to_string()
                    },
                    m.map_or(0, MetadataExt::mtime).to_string(),
                ]
            })
            .collect();
        let w = |k: usize| rows.iter().map(|r| r[k].len()).max().unwrap_or(1);
        let (wi, wl, ws) = (w(0), w(1), w(2));
        if total {
            let blocks: u64 = entries
                .iter()
                .filter_map(|e| e.meta.as_ref())
                .map(|m| m.blocks() / 2)
                .sum();
            let t = if o.human {
                human(blocks * 1024)
            } else {
                blocks.to_string()
            };
            out.push_str(&format!("total {t}\n"));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let owner = if o.numeric { "0" } else { "root" };
        for (e, r) in entries.iter().zip(&rows) {
            if o.inode {
                out.push_str(&format!("{:>wi$} ", r[0]));
            }
            let mtime = e.meta.as_ref().map_or(0, MetadataExt::mtime);
            out.push_str(&format!(
                "{} {:>wl$} {owner} {owner} {:>ws$} {} {}",
                mode_string(e),
                r[1],
                r[2],
                date(mtime, now),
                e.name
            ));
            if e.meta.as_ref().is_some_and(|m| m.file_type().is_symlink()) {
                if let Ok(t) = fs::read_link(&self.ctx.root, &e.abs) {
                    out.push_str(&format!(" -> {}", t.to_string_lossy()));
                }
            } else {
                out.push_str(&suffix(e, o));
            }
            out.push('\n');
        }
    }
}

fn sort(entries: &mut [Entry], o: &Opts) {
    entries.sort_by(|a, b| {
        let (ma, mb) = (a.meta.as_ref(), b.meta.as_ref());
        let by = if o.by_size {
            mb.map_or(0, |m| m.len()).cmp(&ma.map_or(0, |m| m.len()))
        } else if o.by_time {
            let t = |m: Option<&cap_std::fs::Metadata>| {
                m.map_or((0, 0), |m| (m.mtime(), m.mtime_nsec()))
            };
            t(mb).cmp(&t(ma))
        } else {
            std::cmp::Ordering::Equal
        };
        by.then_with(|| a.name.cmp(&b.name))
    });
    if o.reverse {
        entries.reverse();
    }
}

fn suffix(e: &Entry, o: &Opts) -> String {
    let Some(m) = e.meta.as_ref() else {
        return String::new();
    };
    let ft = m.file_type();
    if (o.classify || o.slash) && m.is_dir() {
        "/".into()
    } else if !o.classify {
        String::new()
    } else if ft.is_symlink() {
        "@".into()
    } else if ft.is_fifo() {
        "|".into()
    } else if m.permissions().mode() & 0o111 != 0 && m.is_file() {
        "*".into()
    } else {
        String::new()
    }
}

/// `drwxr-xr-x`: the type and the permission bits (devices of `/dev` as `crw-rw-rw-`).
fn mode_string(e: &Entry) -> String {
    let Some(m) = e.meta.as_ref() else {
        return "??????????".into();
    };
    if e.abs.starts_with("/dev/") && crate::dev::device(&e.abs).is_some() {
        return "crw-rw-rw-".into();
    }
    let ft = m.file_type();
    let kind = if ft.is_symlink() {
        'l'
    } else if m.is_dir() {
        'd'
    } else if ft.is_fifo() {
        'p'
    } else if ft.is_socket() {
        's'
    } else if ft.is_char_device() {
        'c'
    } else if ft.is_block_device() {
        'b'
    } else {
        '-'
    };
    let mode = m.permissions().mode();
    let mut s = String::with_capacity(10);
    s.push(kind);
    for (shift, special, lower, upper) in [(6, 0o4000, 's', 'S'), (3, 0o2000, 's', 'S')] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => lower,
            (false, true) => upper,
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    let bits = mode & 7;
    s.push(if bits & 4 != 0 { 'r' } else { '-' });
    s.push(if bits & 2 != 0 { 'w' } else { '-' });
    s.push(match (bits & 1 != 0, mode & 0o1000 != 0) {
        (true, true) => 't',
        (false, true) => 'T',
        (true, false) => 'x',
        (false, false) => '-',
    });
    s
}

/// GNU `ls -h`: 1023, 1.0K, 9.9K, 10K, 1.5M...
fn human(n: u64) -> String {
    if n < 1024 {
        return n.to_string();
    }
    let mut v = n as f64;
    for unit in ["K", "M", "G", "T", "P", "E"] {
        v /= 1024.0;
        if v < 1024.0 || unit == "E" {
            return if v < 10.0 {
                format!("{:.1}{unit}", (v * 10.0).ceil() / 10.0)
            } else {
                format!("{}{unit}", v.ceil() as u64)
            };
        }
    }
    n.to_string()
}

/// `ls -l`'s date in UTC: `Mon dd HH:MM` within six months of now, else `Mon dd  YYYY`.
fn date(secs: i64, now: i64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mon = MONTHS
        .get(usize::try_from(month - 1).unwrap_or(0))
        .copied()
        .unwrap_or("Jan");
    let half_year = 15_778_476;
    if (now - secs).abs() < half_year {
        format!("{mon} {day:>2} {:02}:{:02}", rem / 3600, rem % 3600 / 60)
    } else {
        format!("{mon} {day:>2}  {year}")
    }
}

#[cfg(test)]
mod tests {
    use super::{date, human};

    #[test]
    fn sizes_and_dates_as_gnu_ls() {
        assert_eq!(human(1023), "1023");
        assert_eq!(human(1024), "1.0K");
        assert_eq!(human(4097), "4.1K");
        assert_eq!(human(20_000), "20K");
        assert_eq!(human(1_572_864), "1.5M");
        // 2026-12-01 10:05 UTC, seen the same day and two years later.
        let t = 1_796_119_500;
        assert_eq!(date(t, t + 60), "Dec  1 10:05");
        assert_eq!(date(t, t + 2 * 31_557_600), "Dec  1  2026");
    }
}
