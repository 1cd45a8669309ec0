//! `sandbox-exec -- PROGRAM ARGS…`: the launcher. Reads its confinement from the environment
//! (the server's environment is the rest), sets `no_new_privs`, the limits, the Landlock rules
//! and the seccomp filters on itself, then
//! executes the server in its place. Run by the proxy only, for a configured command.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use super::{seccomp, SandboxError, SandboxSpec, SPEC_VAR};

/// Confines this process as its environment says and executes `args` (the program first, found
/// on `PATH` as a shell would); returns only when that could not be done.
pub fn exec_confined(args: Vec<OsString>) -> SandboxError {
    match confine_and_exec(args) {
        Ok(never) => match never {},
        Err(error) => error,
    }
}

fn confine_and_exec(args: Vec<OsString>) -> Result<std::convert::Infallible, SandboxError> {
    let spec = std::env::var(SPEC_VAR).map_err(|_| SandboxError::NoSpec)?;
    let spec: SandboxSpec =
        serde_json::from_str(&spec).map_err(|e| SandboxError::BadSpec(e.to_string()))?;
    // The server's environment: the launcher's, less its confinement.
    let envp: Vec<CString> = std::env::vars_os()
        .filter(|(name, _)| name != SPEC_VAR)
        .filter_map(|(name, value)| {
            let mut pair = name.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            CString::new(pair).ok()
        })
        .collect();
    let program = args.first().cloned().ok_or(SandboxError::NoCommand)?;
    let argv: Vec<CString> = args
        .iter()
        .map(|arg| CString::new(arg.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| SandboxError::NoCommand)?;
    nix::sys::prctl::set_no_new_privs().map_err(SandboxError::NoNewPrivs)?;
    spec.limits.apply()?;
    spec.paths.restrict(spec.network)?;
    seccomp::install(spec.network)?;
    let error = match nix::unistd::execvpe(&argv[0], &argv, &envp) {
        Ok(never) => match never {},
        Err(error) => error,
    };
    Err(SandboxError::Exec { program, error })
}
