//! `Send` where there are threads, nothing on wasm32.
//!
//! The one place that switches the bound: native hosts (tokio) need `Send` futures, the
//! Worker's futures are not `Send`. Nothing else in the workspace uses `cfg` for this.

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    /// `Send` on native targets.
    pub trait MaybeSend: Send {}
    impl<T: Send + ?Sized> MaybeSend for T {}
    /// `Sync` on native targets.
    pub trait MaybeSync: Sync {}
    impl<T: Sync + ?Sized> MaybeSync for T {}
}

#[cfg(target_arch = "wasm32")]
mod imp {
    /// No bound on wasm32.
    pub trait MaybeSend {}
    impl<T: ?Sized> MaybeSend for T {}
    /// No bound on wasm32.
    pub trait MaybeSync {}
    impl<T: ?Sized> MaybeSync for T {}
}

pub use imp::{MaybeSend, MaybeSync};
