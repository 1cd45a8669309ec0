//! `sandbox-confine -- PROGRAM ARGS…`: the launcher's second step, started by the first with
//! the server's environment. Reads what it is to do from the environment (the rest is the
//! server's), starts a session of its own (no controlling terminal), keeps only the configured
//! capabilities, sets `no_new_privs` and, with the
//! sandbox, the limits, the Landlock rules and the seccomp filters on itself; makes its view of
//! its command's package cache; marks every descriptor above stderr close-on-exec; then
//! executes the server in its place.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use super::{capabilities, seccomp, Launch, SandboxError, SPEC_VAR};

/// Confines this process as its environment says and executes `args` (the program first, found
/// on `PATH` as a shell would); returns only when that could not be done.
pub(super) fn exec_confined(args: Vec<OsString>) -> SandboxError {
    match confine_and_exec(args) {
        Ok(never) => match never {},
        Err(error) => error,
    }
}

/// What the launcher was told, from this process's environment.
pub(super) fn told() -> Result<Launch, SandboxError> {
    let spec = std::env::var(SPEC_VAR).map_err(|_| SandboxError::NoSpec)?;
    serde_json::from_str(&spec).map_err(|e| SandboxError::BadSpec(e.to_string()))
}

fn confine_and_exec(args: Vec<OsString>) -> Result<std::convert::Infallible, SandboxError> {
    let launch = told()?;
    // The server's environment: this process's, less what the launcher was told.
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
    // A session of its own: no controlling terminal (the one the proxy was started from is
    // not the server's to read, write or type into).
    nix::unistd::setsid().map_err(SandboxError::Session)?;
    if let Some(sandbox) = &launch.sandbox {
        // Before the capabilities go: a limit above the proxy's own takes CAP_SYS_RESOURCE.
        sandbox.limits.apply()?;
    }
    capabilities::keep_only(&launch.capabilities)?;
    nix::sys::prctl::set_no_new_privs().map_err(SandboxError::NoNewPrivs)?;
    if let Some(sandbox) = &launch.sandbox {
        sandbox.paths.restrict(sandbox.network)?;
        seccomp::install(sandbox.sockets())?;
    }
    if let Some(view) = &launch.cache_view {
        // Confined already: it reads the sealed cache and writes its own directory only.
        if let Err(error) = view.build() {
            eprintln!("mcp-session-proxy {}: {error}", super::CONFINE);
        }
    }
    // What this process was given beyond stdin, stdout and stderr (descriptors the proxy
    // inherited without close-on-exec) does not reach the server.
    close_fds::set_fds_cloexec(3, &[]);
    let error = match nix::unistd::execvpe(&argv[0], &argv, &envp) {
        Ok(never) => match never {},
        Err(error) => error,
    };
    Err(SandboxError::Exec { program, error })
}
