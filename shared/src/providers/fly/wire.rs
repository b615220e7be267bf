//! What goes over the wire to the Machines API: request bodies (only fields of the spec's
//! schemas) and lenient response types.

use super::*;

// ---------------------------------------------------------------------------------------
// Wire types (request bodies: only fields of the spec's schemas)
// ---------------------------------------------------------------------------------------

/// `CreateAppRequest`.
#[derive(Serialize)]
pub(super) struct CreateAppBody<'a> {
    pub(super) name: &'a str,
    pub(super) org_slug: &'a str,
}

/// `CreateMachineRequest`.
#[derive(Serialize)]
pub(super) struct CreateMachineBody<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(super) name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) region: Option<&'a str>,
    pub(super) config: MachineConfigBody<'a>,
}

/// `fly.MachineConfig` (the subset we set).
#[derive(Serialize)]
pub(super) struct MachineConfigBody<'a> {
    pub(super) image: &'a str,
    pub(super) guest: GuestBody<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) rootfs: Option<RootfsBody<'a>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) metadata: BTreeMap<&'a str, &'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) init: Option<InitBody<'a>>,
}

/// `fly.MachineGuest`.
#[derive(Serialize)]
pub(super) struct GuestBody<'a> {
    pub(super) cpu_kind: &'a str,
    pub(super) cpus: u32,
    pub(super) memory_mb: u32,
}

/// `fly.MachineRootfs`.
#[derive(Serialize)]
pub(super) struct RootfsBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) persist: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) size_gb: Option<u32>,
}

/// `fly.MachineInit`.
#[derive(Serialize)]
pub(super) struct InitBody<'a> {
    pub(super) exec: &'a [String],
}

/// `MachineExecRequest`.
#[derive(Serialize)]
pub(super) struct ExecBody<'a> {
    pub(super) command: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stdin: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) timeout: Option<u64>,
}

// Response types: every field optional, unknown fields ignored.

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawMachine {
    pub(super) id: Option<String>,
    pub(super) name: Option<String>,
    pub(super) state: Option<String>,
    pub(super) region: Option<String>,
    pub(super) created_at: Option<String>,
    pub(super) config: Option<RawConfig>,
    pub(super) image_ref: Option<RawImageRef>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawConfig {
    pub(super) image: Option<String>,
    /// String values (the spec's `additionalProperties: string`); a `null` one is dropped.
    pub(super) metadata: Option<BTreeMap<String, Option<String>>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawImageRef {
    pub(super) registry: Option<String>,
    pub(super) repository: Option<String>,
    pub(super) tag: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawApp {
    pub(super) id: Option<String>,
    pub(super) name: Option<String>,
    pub(super) status: Option<String>,
    pub(super) machine_count: Option<i64>,
    pub(super) organization: Option<RawOrg>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawOrg {
    pub(super) slug: Option<String>,
}

/// `flydv1.ExecResponse`.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawExec {
    pub(super) exit_code: Option<i64>,
    pub(super) exit_signal: Option<i64>,
    pub(super) stdout: Option<String>,
    pub(super) stderr: Option<String>,
}

/// `WaitMachineResponse`.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawWait {
    pub(super) ok: Option<bool>,
}

impl RawMachine {
    pub(super) fn into_machine(self) -> Result<Machine, FlyError> {
        let id = self
            .id
            .filter(|id| !id.is_empty())
            .ok_or_else(|| FlyError::Decode("a machine without an `id`".into()))?;
        let config = self.config.unwrap_or_default();
        let image = config
            .image
            .filter(|i| !i.is_empty())
            .or_else(|| self.image_ref.and_then(RawImageRef::reference));
        let metadata = config
            .metadata
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| Some((k, v?)))
            .collect();
        Ok(Machine {
            id,
            name: self.name.unwrap_or_default(),
            state: self.state.unwrap_or_default(),
            region: self.region.filter(|r| !r.is_empty()),
            image,
            metadata,
            created_at: self.created_at.filter(|c| !c.is_empty()),
        })
    }
}

impl RawImageRef {
    pub(super) fn reference(self) -> Option<String> {
        let repo = self.repository.filter(|r| !r.is_empty())?;
        let mut s = match self.registry.filter(|r| !r.is_empty()) {
            Some(reg) => format!("{reg}/{repo}"),
            None => repo,
        };
        if let Some(tag) = self.tag.filter(|t| !t.is_empty()) {
            s.push(':');
            s.push_str(&tag);
        }
        Some(s)
    }
}
