//! Issue 17: `scripts/setup` takes debootstrap's mirror from the machine's apt sources
//! (`scripts/debian-mirror`), never a hard-coded host; deb.debian.org only when apt names
//! none.

use std::process::Command;

/// Runs scripts/debian-mirror against an apt directory made of `files` (path, text).
fn mirror(files: &[(&str, &str)], suite: &str) -> String {
    let etc = std::env::temp_dir().join(format!(
        "msc-mirror-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(etc.join("sources.list.d")).unwrap();
    for (path, text) in files {
        std::fs::write(etc.join(path), text).unwrap();
    }
    let out = Command::new(super::root().join("scripts/debian-mirror"))
        .arg(suite)
        .env("APT_ETC", &etc)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&etc).unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

const DEB822: &str = "\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://sec.example/debian-security
Suites: bookworm-security
Components: main

Types: deb
Enabled: no
URIs: http://off.example/debian
Suites: bookworm
Components: main

Types: deb-src deb
URIs: mirror+file:///etc/apt/mirrors.txt
  https://two.example/debian/
Suites: bookworm bookworm-updates
Components: contrib main
";

/// Files of an apt directory, the suite asked for, the mirror expected.
type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);

#[test]
fn issue_17_the_mirror_comes_from_apt_sources() {
    let cases: &[Case] = &[
        // One-line format: options, deb-src, comments and other suites skipped; the
        // trailing slash dropped.
        (
            &[(
                "sources.list",
                "deb [arch=amd64 signed-by=/k.gpg] http://security.example/debian-security bookworm-security main\n\
                 # deb http://commented.example/debian bookworm main\n\
                 deb-src http://src.example/debian bookworm main\n\
                 deb http://noman.example/debian bookworm contrib\n\
                 deb http://one.example/debian/ bookworm contrib main\n",
            )],
            "bookworm",
            "http://one.example/debian",
        ),
        // deb822 stanzas: a disabled one skipped, a continuation line of URIs read, a
        // non-http URI passed over.
        (
            &[("sources.list.d/debian.sources", DEB822)],
            "bookworm",
            "https://two.example/debian",
        ),
        // sources.list first, then sources.list.d.
        (
            &[
                (
                    "sources.list",
                    "deb http://first.example/debian bookworm main\n",
                ),
                ("sources.list.d/debian.sources", DEB822),
            ],
            "bookworm",
            "http://first.example/debian",
        ),
        // *.list files in sources.list.d count too.
        (
            &[(
                "sources.list.d/local.list",
                "deb http://list.example/debian bookworm main\n",
            )],
            "bookworm",
            "http://list.example/debian",
        ),
        // Nothing for the suite: the fallback.
        (
            &[("sources.list.d/debian.sources", DEB822)],
            "trixie",
            "http://deb.debian.org/debian",
        ),
        (&[], "bookworm", "http://deb.debian.org/debian"),
    ];
    for (files, suite, want) in cases {
        assert_eq!(mirror(files, suite), *want, "{files:?} {suite}");
    }
}
