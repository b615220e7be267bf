//! Build-time code generation for Modal's gRPC API (called from a `build.rs`).
//!
//! Compiles `modal_proto/api.proto` and `modal_proto/task_command_router.proto` with
//! `protox` (pure Rust; no `protoc` needed), prunes the descriptor set down to the RPCs in
//! [`MODAL_CLIENT_RPCS`] / [`TASK_COMMAND_ROUTER_RPCS`] and the messages and enums they
//! reach (api.proto is ~5000 lines; all of it would take minutes to compile), then
//! generates prost messages and tonic stubs with `tonic-prost-build`.
//!
//! Output: `modal.client.rs` and `modal.task_command_router.rs` in `out_dir`, to be
//! included with `tonic::include_proto!("modal.client")` etc. inside modules nested as
//! the packages are (`modal::client`, `modal::task_command_router`), because the router
//! messages refer to `super::client::…`. Well-known types map to `prost_types` (and
//! `google.protobuf.Empty` to `()`).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::error::Error;
use std::path::Path;

use prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};

/// `modal.client.ModalClient` methods we call (and the simulator serves).
pub const MODAL_CLIENT_RPCS: &[&str] = &[
    "AppGetOrCreate",
    "ImageGetOrCreate",
    "ImageJoinStreaming",
    "SandboxCreate",
    "SandboxGetCommandRouterAccess",
    "SandboxGetTaskId",
    "SandboxList",
    "SandboxSnapshotFs",
    "SandboxTagsSet",
    "SandboxTerminate",
    "SandboxWait",
    "TaskGetCommandRouterAccess",
];

/// `modal.task_command_router.TaskCommandRouter` methods we call (and the simulator serves).
pub const TASK_COMMAND_ROUTER_RPCS: &[&str] = &[
    "TaskExecStart",
    "TaskExecStdinWrite",
    "TaskExecStdioRead",
    "TaskExecWait",
];

const FILES: &[&str] = &[
    "modal_proto/api.proto",
    "modal_proto/task_command_router.proto",
];

/// Compiles, prunes and generates (see the module docs). `proto_root` is the directory
/// holding `modal_proto/`; the generated files go to `out_dir`.
pub fn generate(
    proto_root: &Path,
    out_dir: &Path,
    build_client: bool,
    build_server: bool,
) -> Result<(), Box<dyn Error>> {
    for f in FILES {
        println!("cargo:rerun-if-changed={}", proto_root.join(f).display());
    }
    let fds = protox::compile(FILES, [proto_root])?;
    let keep = [
        ("modal.client.ModalClient", MODAL_CLIENT_RPCS),
        (
            "modal.task_command_router.TaskCommandRouter",
            TASK_COMMAND_ROUTER_RPCS,
        ),
    ];
    let pruned = prune(fds, &keep)?;
    tonic_prost_build::configure()
        .build_client(build_client)
        .build_server(build_server)
        .build_transport(false)
        .out_dir(out_dir)
        .compile_fds(pruned)?;
    Ok(())
}

/// A declared message or enum.
#[derive(Clone, Debug)]
struct Decl {
    /// Full name of the enclosing message, if nested.
    parent: Option<String>,
    is_message: bool,
}

/// Keeps only the listed methods of the listed services (every other service is dropped)
/// and the messages and enums reachable from them; drops `google/protobuf/*` files (they
/// map to `prost_types`) and source info (its paths index the unpruned lists).
fn prune(
    fds: FileDescriptorSet,
    keep: &[(&str, &[&str])],
) -> Result<FileDescriptorSet, Box<dyn Error>> {
    // Index every message and enum by full name (".pkg.Outer.Inner").
    let mut decls: HashMap<String, Decl> = HashMap::new();
    let mut messages: HashMap<String, &DescriptorProto> = HashMap::new();
    fn index_msg<'a>(
        scope: &str,
        parent: Option<&str>,
        m: &'a DescriptorProto,
        decls: &mut HashMap<String, Decl>,
        messages: &mut HashMap<String, &'a DescriptorProto>,
    ) {
        let name = format!("{scope}.{}", m.name());
        decls.insert(
            name.clone(),
            Decl {
                parent: parent.map(str::to_owned),
                is_message: true,
            },
        );
        messages.insert(name.clone(), m);
        for n in &m.nested_type {
            index_msg(&name, Some(&name), n, decls, messages);
        }
        for e in &m.enum_type {
            decls.insert(
                format!("{name}.{}", e.name()),
                Decl {
                    parent: Some(name.clone()),
                    is_message: false,
                },
            );
        }
    }
    for f in &fds.file {
        let scope = if f.package().is_empty() {
            String::new()
        } else {
            format!(".{}", f.package())
        };
        for m in &f.message_type {
            index_msg(&scope, None, m, &mut decls, &mut messages);
        }
        for e in &f.enum_type {
            decls.insert(
                format!("{scope}.{}", e.name()),
                Decl {
                    parent: None,
                    is_message: false,
                },
            );
        }
    }

    // Roots: the kept methods' request and response types.
    let mut queue: VecDeque<String> = VecDeque::new();
    let mut kept_services: HashMap<String, &[&str]> = HashMap::new();
    for (service, methods) in keep {
        let (pkg, name) = service
            .rsplit_once('.')
            .ok_or_else(|| format!("service name {service:?} lacks a package"))?;
        let svc = fds
            .file
            .iter()
            .filter(|f| f.package() == pkg)
            .flat_map(|f| f.service.iter())
            .find(|s| s.name() == name)
            .ok_or_else(|| format!("service {service} not found in the protos"))?;
        for m in *methods {
            let method = svc
                .method
                .iter()
                .find(|x| x.name() == *m)
                .ok_or_else(|| format!("method {service}.{m} not found in the protos"))?;
            queue.push_back(method.input_type().to_owned());
            queue.push_back(method.output_type().to_owned());
        }
        kept_services.insert((*service).to_owned(), methods);
    }

    // Transitive closure; a kept nested type keeps its enclosing message.
    let mut reachable: BTreeSet<String> = BTreeSet::new();
    while let Some(name) = queue.pop_front() {
        if !reachable.insert(name.clone()) {
            continue;
        }
        let Some(decl) = decls.get(&name) else {
            // Types outside the set cannot be resolved by prost either.
            return Err(format!("type {name} is not declared in the compiled protos").into());
        };
        if let Some(p) = &decl.parent {
            queue.push_back(p.clone());
        }
        if decl.is_message
            && let Some(m) = messages.get(&name)
        {
            for field in &m.field {
                if !field.type_name().is_empty() {
                    queue.push_back(field.type_name().to_owned());
                }
            }
        }
    }

    // Rebuild the files with what is reachable.
    fn prune_msg(
        scope: &str,
        m: &DescriptorProto,
        reachable: &BTreeSet<String>,
    ) -> DescriptorProto {
        let name = format!("{scope}.{}", m.name());
        let mut m = m.clone();
        m.nested_type = m
            .nested_type
            .iter()
            .filter(|n| reachable.contains(&format!("{name}.{}", n.name())))
            .map(|n| prune_msg(&name, n, reachable))
            .collect();
        m.enum_type
            .retain(|e| reachable.contains(&format!("{name}.{}", e.name())));
        m
    }
    let mut out: Vec<FileDescriptorProto> = Vec::new();
    for f in &fds.file {
        if f.package() == "google.protobuf" {
            continue;
        }
        let scope = format!(".{}", f.package());
        let mut nf = f.clone();
        nf.source_code_info = None;
        nf.message_type = f
            .message_type
            .iter()
            .filter(|m| reachable.contains(&format!("{scope}.{}", m.name())))
            .map(|m| prune_msg(&scope, m, &reachable))
            .collect();
        nf.enum_type
            .retain(|e| reachable.contains(&format!("{scope}.{}", e.name())));
        nf.service = f
            .service
            .iter()
            .filter_map(|s| {
                let methods = kept_services.get(&format!("{}.{}", f.package(), s.name()))?;
                let mut s = s.clone();
                s.method.retain(|m| methods.contains(&m.name()));
                Some(s)
            })
            .collect();
        nf.dependency
            .retain(|d| !d.starts_with("google/protobuf/") && FILES.contains(&d.as_str()));
        nf.public_dependency.clear();
        nf.weak_dependency.clear();
        out.push(nf);
    }
    Ok(FileDescriptorSet { file: out })
}
