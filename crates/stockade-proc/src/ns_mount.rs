//! The mount namespace of a sandboxed session (see `namespaces.rs`).

/// The mount set-up of a session, prepared in the parent.
pub(crate) struct MountPlan {}

impl MountPlan {
    /// The mounts of a session under `spec`; `None`: no mount namespace.
    pub(crate) fn new(_spec: &crate::sandbox::SandboxSpec) -> std::io::Result<Option<MountPlan>> {
        Ok(None)
    }
}

/// Sets the mounts up inside the new mount namespace. Raw system calls only.
///
/// # Safety
/// Between clone and exec only; `plan`'s memory alive.
pub(crate) unsafe fn enter_in_child(_plan: &MountPlan) -> Result<(), i32> {
    Ok(())
}
