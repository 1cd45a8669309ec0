//! What is checked of the stdio servers before the proxy listens: each command can be found,
//! who its children run as, and what of its sandbox this host can enforce.

use anyhow::Context;

use crate::config::{Config, UpstreamConfig};
use crate::upstream::child_user::RunAs;
use crate::upstream::UpstreamSpec;

/// Every stdio server can be started: a command that does not exist, or a user its children
/// cannot run as, stops start-up with its key, instead of failing each session's `initialize`.
/// Checks every stdio server's command (and says who its children run as and how they are
/// confined): the parts of a sandbox this host cannot enforce, by server, once each is
/// warned of (a server whose sandbox `require`s them stops the start instead).
pub(super) fn check_commands(config: &Config) -> anyhow::Result<Vec<(String, &'static str)>> {
    check_principal_header(config)?;
    let mut unenforced = Vec::new();
    for (server, upstream) in served(config) {
        let key = format!("{server}.stdio");
        let server = server.as_str();
        match upstream.child_user(server)? {
            Some(RunAs::User(user)) => tracing::info!(
                server,
                uid = user.uid,
                gid = user.gid,
                "stdio children run as"
            ),
            Some(RunAs::Range(_)) => tracing::info!(
                server,
                user_range = %upstream.user_range,
                "stdio children run each as a user of its own"
            ),
            None => {}
        }
        let spec = upstream.spec(&config.child_secrets())?;
        if let UpstreamSpec::Stdio(stdio) | UpstreamSpec::SharedStdio(stdio) = spec {
            stdio.locate().with_context(|| key.clone())?;
            check_capabilities(server, upstream)?;
            if let Some(sandbox) = &stdio.sandbox {
                let missing = report_sandbox(server, sandbox)?;
                unenforced.extend(missing.into_iter().map(|what| (server.to_owned(), what)));
            }
        }
    }
    Ok(unenforced)
}

/// Each server's upstream the proxy serves, by its key (`upstream`, `servers.<name>.upstream`).
fn served(config: &Config) -> impl Iterator<Item = (String, &UpstreamConfig)> {
    let default = config
        .serves_default()
        .then(|| ("upstream".to_owned(), &config.upstream));
    let named = config
        .servers
        .iter()
        .map(|(name, server)| (format!("servers.{name}.upstream"), &server.upstream));
    default.into_iter().chain(named)
}

/// A principal header is taken only from a peer that proves itself: the proxy's own stdio
/// children share its loopback, so while one may reach the network (a server not confined
/// with `network = "none"`), a loopback address proves nothing. Then the trusted proxies must
/// be listed without loopback, or send a token (`http.trusted_proxy_token_file`); else the
/// start is refused.
fn check_principal_header(config: &Config) -> anyhow::Result<()> {
    let http = &config.http;
    let Some(header) = &http.principal_header else {
        return Ok(());
    };
    let trusts_loopback = http.trusted_proxies.is_empty()
        || http
            .trusted_proxies
            .iter()
            .any(|network| network.holds_loopback());
    if !trusts_loopback || http.trusted_proxy_token_file.is_some() {
        return Ok(());
    }
    let reaching = served(config).find(|(_, upstream)| {
        let stdio = upstream.http.is_none() && upstream.sse.is_none();
        let no_network = upstream.sandbox.enabled
            && upstream.sandbox.network == crate::upstream::sandbox::Network::None;
        stdio && !no_network
    });
    if let Some((key, _)) = reaching {
        anyhow::bail!(
            "http.principal_header = {header:?} is taken from loopback peers, and the children \
             of {key}.stdio share the proxy's loopback and may reach the network: list the \
             trusted proxies without loopback (http.trusted_proxies), or have them send a \
             token (http.trusted_proxy_token_file), or confine those children with \
             {key}.sandbox.network = \"none\""
        );
    }
    Ok(())
}

/// The capabilities a server's children keep are named right, and are the proxy's to give: a
/// child of another user has none. A root proxy running its children as root is warned of.
fn check_capabilities(server: &str, upstream: &UpstreamConfig) -> anyhow::Result<()> {
    for name in &upstream.capabilities {
        crate::upstream::sandbox::parse_capability(name)
            .map_err(|e| anyhow::anyhow!("{server}.capabilities: {e}"))?;
    }
    let own_user = upstream.user.is_empty() && upstream.user_range.is_empty();
    if !upstream.capabilities.is_empty() && !own_user {
        anyhow::bail!(
            "{server}.capabilities: children that run as another user (user, user_range) keep \
             no capability; run them as the proxy's user, or leave capabilities unset"
        );
    }
    if nix::unistd::geteuid().is_root() && !crate::upstream::sandbox::may_cut_bounding_set() {
        tracing::warn!(
            server,
            "the proxy runs as root without CAP_SETPCAP: its stdio children keep the full \
             capability bounding set (they hold no capability, and no_new_privs keeps them \
             from gaining one; add CAP_SETPCAP to cut it too)"
        );
    }
    if own_user && nix::unistd::geteuid().is_root() && !upstream.allow_root_children {
        tracing::warn!(
            server,
            "stdio children run as root (uid 0), without capabilities: as the owner of the \
             system's files they may still change their modes, times and extended attributes \
             (never to a set-id program), which the sandbox does not bound; set {server}.user \
             or {server}.user_range to run them as another user ({server}.allow_root_children \
             = true silences this)"
        );
    }
    Ok(())
}

/// Logs how `server`'s children are confined on this host, and warns of each part it cannot
/// enforce (returned); an error when the sandbox requires them.
fn report_sandbox(
    server: &str,
    sandbox: &crate::upstream::sandbox::SandboxSpec,
) -> anyhow::Result<Vec<&'static str>> {
    let abi = crate::upstream::sandbox::landlock_abi();
    let missing = sandbox.unenforced(abi);
    if sandbox.paths.require && !missing.is_empty() {
        anyhow::bail!(
            "{server}.sandbox.require: this host cannot enforce {} (Landlock ABI {}, the rules \
             need {})",
            missing.join(" and "),
            abi.unwrap_or(0),
            crate::upstream::sandbox::landlock_abi_written_for()
        );
    }
    tracing::info!(
        server,
        landlock_abi = abi.unwrap_or(0),
        network = %sandbox.network,
        udp = %sandbox.udp,
        limits = %sandbox.limits,
        "stdio children confined: no capabilities, no_new_privs, seccomp (an allowlist), \
         Landlock, each reaped with what it starts"
    );
    for what in &missing {
        tracing::warn!(
            server,
            landlock_abi = abi.unwrap_or(0),
            "the sandbox cannot enforce {what} on this host: it is not enforced"
        );
    }
    Ok(missing)
}
