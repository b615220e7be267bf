//! `--disk`: a size limit on each computer's writable layer (the Engine API's
//! `HostConfig.StorageOpt {"size": …}`, `docker run --storage-opt size=…`), issue 46.
//!
//! Only storage drivers with per-container quotas can hold one: overlay2 on xfs mounted
//! with `pquota`, btrfs, zfs, devicemapper (Podman: overlay on xfs with `pquota`). Plain
//! overlay2 on ext4 cannot. The start is refused with what to change before any computer
//! is made ([`Docker::check_disk_limit`]): a probe container is created (never started)
//! with the limit and removed at once; when the image is not local yet, the driver that
//! `docker info` names decides, and a refused create still says the same.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};

use super::{Docker, DockerError, status_of};

/// Where a limit holds, for the refusal.
pub const SUPPORTED: &str = "overlay2 on xfs mounted with the pquota option, btrfs, zfs or devicemapper (Podman: overlay on xfs with pquota)";

/// The `StorageOpt` of a computer limited to `bytes`.
pub(super) fn storage_opt(bytes: i64) -> HashMap<String, String> {
    HashMap::from([("size".to_owned(), bytes.to_string())])
}

/// Does the engine's refusal say its storage driver cannot limit a container's size?
pub(super) fn unsupported(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    ["storage-opt", "storage opt", "storageopt", "storage option"]
        .iter()
        .any(|s| m.contains(s))
}

/// Whether the driver (`docker info`'s name and backing filesystem) can hold a limit, as
/// far as its name tells: overlay2 needs xfs (and `pquota`, which only the probe sees).
fn driver_can(driver: &str, backing: Option<&str>) -> bool {
    match driver {
        "overlay2" | "overlay" => backing.is_none_or(|b| b.eq_ignore_ascii_case("xfs")),
        "btrfs" | "zfs" | "devicemapper" | "windowsfilter" => true,
        _ => false,
    }
}

impl Docker {
    /// The engine's storage driver and its backing filesystem, in words (`overlay2 on
    /// extfs`), and the two parts.
    async fn storage_driver(&self) -> (String, String, Option<String>) {
        let Ok(info) = self.client.info().await else {
            return ("an unknown storage driver".into(), String::new(), None);
        };
        let driver = info.driver.unwrap_or_default();
        let backing = info
            .driver_status
            .unwrap_or_default()
            .into_iter()
            .find_map(|kv| {
                let [k, v] = <[String; 2]>::try_from(kv).ok()?;
                (k == "Backing Filesystem").then_some(v)
            });
        let words = match &backing {
            Some(b) => format!("{driver} on {b}"),
            None => driver.clone(),
        };
        (words, driver, backing)
    }

    /// The refusal of `--disk` on this engine, with the engine's own words.
    pub(super) async fn disk_refused(&self, detail: &str) -> DockerError {
        let (driver, _, _) = self.storage_driver().await;
        DockerError::DiskLimit {
            driver,
            detail: detail.to_owned(),
        }
    }

    /// With `--disk`: refuses the start when this engine cannot limit a computer's disk.
    pub async fn check_disk_limit(&self) -> Result<(), DockerError> {
        let Some(bytes) = self.cfg.disk_bytes else {
            return Ok(());
        };
        let image = self.cfg.image.clone();
        if self.client.inspect_image(&image).await.is_err() {
            // Not pulled yet: the driver's name decides now, the first create later.
            let (words, driver, backing) = self.storage_driver().await;
            if driver_can(&driver, backing.as_deref()) {
                return Ok(());
            }
            return Err(DockerError::DiskLimit {
                driver: words,
                detail: "the driver has no per-container size limit".into(),
            });
        }
        let name = format!("msc-disk-probe-{:016x}", rand::random::<u64>());
        let body = ContainerCreateBody {
            image: Some(image),
            cmd: Some(vec!["true".into()]),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                storage_opt: Some(storage_opt(bytes)),
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let opts = CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        };
        match self.client.create_container(Some(opts), body).await {
            Ok(_) => {
                let rm = RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                };
                let _ = self.client.remove_container(&name, Some(rm)).await;
                tracing::info!(bytes, "--disk: each computer's writable layer is limited");
                Ok(())
            }
            Err(e) if unsupported(&e.to_string()) => Err(self.disk_refused(&e.to_string()).await),
            Err(e) if status_of(&e).is_some() => Err(DockerError::Engine(format!(
                "--disk {bytes} bytes: the engine refused a computer with this limit: {e}"
            ))),
            Err(e) => Err(DockerError::from_bollard(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_refusals_are_recognised() {
        for m in [
            "Error response from daemon: --storage-opt is supported only for overlay over xfs with 'pquota' mount option",
            "400: --storage-opt is not supported for vfs",
            "storage option size not supported by this driver",
        ] {
            assert!(unsupported(m), "{m}");
        }
        assert!(!unsupported(
            "409: Conflict. The container name is already in use"
        ));
    }

    #[test]
    fn drivers_by_name() {
        assert!(!driver_can("overlay2", Some("extfs")));
        assert!(driver_can("overlay2", Some("xfs")));
        assert!(driver_can("btrfs", Some("btrfs")));
        assert!(driver_can("zfs", None));
        assert!(!driver_can("vfs", Some("extfs")));
        assert_eq!(
            storage_opt(1 << 30).get("size").map(String::as_str),
            Some("1073741824")
        );
    }
}
