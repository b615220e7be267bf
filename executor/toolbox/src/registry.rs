//! Table of every utility in the toolbox and how to invoke it.
//!
//! uutils utilities get their localization set up (as `uucore::bin!` does)
//! before their `uumain` runs; our own utilities are called directly.

use std::ffi::OsString;

/// Entry point shared by all utilities: full argv (including argv\[0\]) in,
/// exit status out.
pub type MainFn = fn(Vec<OsString>) -> i32;

/// One utility of the toolbox.
pub struct Util {
    /// Name the utility is invoked by.
    pub name: &'static str,
    /// Entry point.
    pub main: MainFn,
    /// Canonical uutils name whose localization must be loaded, if any.
    pub locale: Option<&'static str>,
}

macro_rules! uu {
    ($name:literal, $krate:ident) => {
        uu!($name, $krate, $name)
    };
    ($name:literal, $krate:ident, $canonical:literal) => {
        Util {
            name: $name,
            main: |args| $krate::uumain(args.into_iter()),
            locale: Some($canonical),
        }
    };
}

macro_rules! own {
    ($name:literal, $func:path) => {
        Util {
            name: $name,
            main: $func,
            locale: None,
        }
    };
}

/// Every utility, sorted by name.
static UTILS: &[Util] = &[
    uu!("[", uu_test, "test"),
    own!("awk", crate::awk::main),
    uu!("base32", uu_base32),
    uu!("base64", uu_base64),
    uu!("basename", uu_basename),
    uu!("cat", uu_cat),
    own!("cmp", crate::diff::main_cmp),
    uu!("comm", uu_comm),
    uu!("cp", uu_cp),
    uu!("cut", uu_cut),
    uu!("date", uu_date),
    own!("diff", crate::diff::main),
    uu!("dirname", uu_dirname),
    own!("du", crate::du::main),
    uu!("echo", uu_echo),
    own!("egrep", crate::grep::main_egrep),
    own!("env", crate::env::main_env),
    uu!("expr", uu_expr),
    uu!("false", uu_false),
    own!("fgrep", crate::grep::main_fgrep),
    own!("file", crate::small::main_file),
    own!("find", crate::find::main),
    uu!("fold", uu_fold),
    own!("grep", crate::grep::main),
    own!("gunzip", crate::gzip::main_gunzip),
    own!("gzip", crate::gzip::main_gzip),
    uu!("head", uu_head),
    own!("jq", crate::jq::main),
    uu!("ln", uu_ln),
    uu!("ls", uu_ls),
    uu!("md5sum", uu_md5sum),
    uu!("mkdir", uu_mkdir),
    uu!("mktemp", uu_mktemp),
    uu!("mv", uu_mv),
    uu!("nl", uu_nl),
    uu!("od", uu_od),
    uu!("paste", uu_paste),
    own!("printenv", crate::env::main_printenv),
    uu!("printf", uu_printf),
    uu!("pwd", uu_pwd),
    uu!("readlink", uu_readlink),
    uu!("realpath", uu_realpath),
    own!("rev", crate::small::main_rev),
    uu!("rm", uu_rm),
    uu!("rmdir", uu_rmdir),
    Util {
        name: "sed",
        main: |args| sed::sed::uumain(args.into_iter()),
        locale: None,
    },
    uu!("seq", uu_seq),
    uu!("sha1sum", uu_sha1sum),
    uu!("sha256sum", uu_sha256sum),
    uu!("sha512sum", uu_sha512sum),
    uu!("shuf", uu_shuf),
    uu!("sleep", uu_sleep),
    uu!("sort", uu_sort),
    uu!("split", uu_split),
    own!("stat", crate::stat::main),
    own!("tac", crate::tac::main),
    uu!("tail", uu_tail),
    own!("tar", crate::tar::main),
    uu!("tee", uu_tee),
    uu!("test", uu_test),
    uu!("touch", uu_touch),
    uu!("tr", uu_tr),
    uu!("true", uu_true),
    uu!("uniq", uu_uniq),
    uu!("wc", uu_wc),
    uu!("yes", uu_yes),
    own!("zcat", crate::gzip::main_zcat),
];

/// Names of all utilities, sorted.
pub fn names() -> impl Iterator<Item = &'static str> {
    UTILS.iter().map(|u| u.name)
}

/// Find a utility by name.
pub fn lookup(name: &str) -> Option<&'static Util> {
    UTILS.iter().find(|u| u.name == name)
}

/// Run a utility with its full argv (argv\[0\] included).
pub fn invoke(util: &Util, args: Vec<OsString>) -> i32 {
    if let Some(canonical) = util.locale
        && let Err(err) = uucore::locale::setup_localization(canonical)
    {
        eprintln!("{}: could not initialise localization: {err}", util.name);
    }
    (util.main)(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        let names: Vec<_> = names().collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
    }

    #[test]
    fn lookup_finds_known_utils() {
        assert!(lookup("ls").is_some());
        assert!(lookup("[").is_some());
        assert!(lookup("xargs").is_none());
    }
}
