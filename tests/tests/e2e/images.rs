//! Images other than the default: a static BusyBox image (ash, no bash, no coreutils),
//! built by `.ci/run` as `msc-test/busybox`. The exec wrapper must behave the same there.

use std::time::Duration;

use serde_json::json;
use tests::*;

#[tokio::test]
async fn issue_2_busybox_image_falls_back_to_sh() -> anyhow::Result<()> {
    let t = tag("busybox");
    let opts = ServerOpts::default()
        .arg("--image")
        .arg("msc-test/busybox")
        .arg("--tool-instruction-override")
        .arg("BusyBox computer: /bin/sh is ash.");
    let c = stdio_client(&t, &state_dir(&t), &opts).await?;
    let r = exec(
        &c,
        json!({"command": "echo hi; readlink /proc/$$/exe; exit 3"}),
    )
    .await?;
    assert_eq!(
        r["stdout"], "hi\n/bin/busybox\n",
        "no bash here: the shell is /bin/sh"
    );
    assert_eq!(r["exit_code"], 3);
    let r = exec(&c, json!({"args": ["nope"]})).await?;
    assert_eq!(r["exit_code"], 127);
    let r = exec(&c, json!({"command": "pwd", "working_directory": "/nope"})).await?;
    assert_eq!(r["exit_code"], 126);
    let r = exec(
        &c,
        json!({"command": "echo x; sleep 1000 & sleep 1000", "timeout": 1}),
    )
    .await?;
    assert_eq!(r["exit_code"], 124);
    assert_eq!(r["stdout"], "x\n");
    let left = exec(&c, json!({"command": COUNT_SLEEP_1000})).await?;
    assert_eq!(left["stdout"], "0\n");
    let r = exec(&c, json!({"args": ["cat"], "stdin": "piped"})).await?;
    assert_eq!(r["stdout"], "piped");
    c.cancel().await?;
    wait_for_count(&t, 0, Duration::from_secs(15)).await
}
