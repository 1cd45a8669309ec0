//! Command-line options over the file: an option given replaces the file's value.

use super::{Cli, ClusterConfig, Config, HttpConfig, SessionConfig, TracingConfig, UpstreamConfig};

impl Config {
    pub(super) fn apply(&mut self, cli: &Cli) {
        set(&mut self.listen, &cli.listen);
        set(&mut self.log_format, &cli.log_format);
        set(&mut self.access_log, &cli.access_log);
        set(&mut self.access_log_sample, &cli.access_log_sample);
        set(&mut self.shutdown_timeout, &cli.shutdown_timeout);
        set(&mut self.drain_delay, &cli.drain_delay);
        set(&mut self.workers, &cli.workers);
        set(&mut self.store, &cli.store);
        apply_cluster(&mut self.cluster, cli);
        apply_tracing(&mut self.tracing, cli);
        apply_upstream(&mut self.upstream, cli);
        apply_session(&mut self.session, cli);
        apply_http(&mut self.http, cli);
        cli.auth.apply(&mut self.auth, &mut self.upstream);
        if let Some(rate) = cli.rate_limit {
            self.limits.requests_per_second = rate;
        }
        if !cli.allow_tools.is_empty() {
            self.tools.allow = cli
                .allow_tools
                .iter()
                .map(|glob| glob.as_str().into())
                .collect();
        }
        if !cli.deny_tools.is_empty() {
            self.tools.deny = cli
                .deny_tools
                .iter()
                .map(|glob| glob.as_str().into())
                .collect();
        }
        if !cli.allow_resources.is_empty() {
            self.resources.allow = cli
                .allow_resources
                .iter()
                .map(|glob| glob.as_str().into())
                .collect();
        }
        if !cli.deny_resources.is_empty() {
            self.resources.deny = cli
                .deny_resources
                .iter()
                .map(|glob| glob.as_str().into())
                .collect();
        }
    }
}

/// An option given replaces the value; one not given leaves it.
fn set<T: Clone>(target: &mut T, value: &Option<T>) {
    if let Some(value) = value {
        *target = value.clone();
    }
}

fn apply_cluster(cluster: &mut ClusterConfig, cli: &Cli) {
    set(&mut cluster.node_id, &cli.node_id);
    set(&mut cluster.advertise, &cli.advertise);
    set(&mut cluster.secret, &cli.cluster_secret);
    if cli.cluster_secret_file.is_some() {
        cluster.secret_file = cli.cluster_secret_file.clone();
    }
    set(&mut cluster.heartbeat, &cli.heartbeat);
    set(&mut cluster.owner_timeout, &cli.owner_timeout);
    set(&mut cluster.takeover_wait, &cli.takeover_wait);
    set(&mut cluster.write_delay, &cli.write_delay);
    set(&mut cluster.max_write_queue, &cli.max_write_queue);
    set(&mut cluster.max_hop_nonces, &cli.max_hop_nonces);
    set(&mut cluster.namespace, &cli.namespace);
}

fn apply_tracing(tracing: &mut TracingConfig, cli: &Cli) {
    set(&mut tracing.otlp_endpoint, &cli.otlp_endpoint);
    set(&mut tracing.service_name, &cli.service_name);
}

fn apply_upstream(upstream: &mut UpstreamConfig, cli: &Cli) {
    // One server is fronted: naming one on the command line replaces the file's.
    if cli.stdio.is_some() || cli.http.is_some() || cli.sse.is_some() {
        upstream.stdio = cli.stdio.clone();
        upstream.http = cli.http.clone();
        upstream.sse = cli.sse.clone();
    }
    set(&mut upstream.request_timeout, &cli.request_timeout);
    set(&mut upstream.isolation, &cli.isolation);
    set(
        &mut upstream.forward_authorization,
        &cli.forward_authorization,
    );
    set(&mut upstream.cache_ttl, &cli.cache_ttl);
    set(&mut upstream.cache_scope, &cli.cache_scope);
    set(&mut upstream.trace_headers, &cli.trace_headers);
    set(&mut upstream.warm, &cli.warm);
    upstream.env.extend(cli.env.iter().cloned());
    set(&mut upstream.env_clear, &cli.env_clear);
    if !cli.env_pass.is_empty() {
        upstream.env_pass = cli.env_pass.clone();
    }
    set(&mut upstream.user, &cli.upstream_user);
    set(&mut upstream.group, &cli.upstream_group);
    set(&mut upstream.protocol, &cli.upstream_protocol);
    if cli.cache_lists.is_some() {
        upstream.cache_lists = cli.cache_lists;
    }
    set(&mut upstream.max_line_bytes, &cli.max_line_bytes);
    set(&mut upstream.shutdown_grace, &cli.shutdown_grace);
}

fn apply_session(session: &mut SessionConfig, cli: &Cli) {
    set(&mut session.correlation, &cli.correlation);
    set(&mut session.require_session, &cli.require_session);
    set(&mut session.coalesce_progress, &cli.coalesce_progress);
    set(&mut session.anonymous, &cli.anonymous);
    set(&mut session.input_ttl, &cli.input_ttl);
    set(
        &mut session.max_held_per_principal,
        &cli.max_held_per_principal,
    );
    set(
        &mut session.data_session_idle_ttl,
        &cli.data_session_idle_ttl,
    );
    set(
        &mut session.data_session_lifetime,
        &cli.data_session_lifetime,
    );
    set(
        &mut session.max_data_sessions_per_principal,
        &cli.max_data_sessions_per_principal,
    );
    set(
        &mut session.max_session_state_bytes,
        &cli.max_session_state_bytes,
    );
    set(
        &mut session.max_sessions_per_principal,
        &cli.max_sessions_per_principal,
    );
    set(
        &mut session.max_anonymous_sessions,
        &cli.max_anonymous_sessions,
    );
    set(&mut session.anonymous_pool, &cli.anonymous_pool);
    set(&mut session.anonymous_pool_wait, &cli.anonymous_pool_wait);
    set(&mut session.anonymous_pool_reuse, &cli.anonymous_pool_reuse);
    set(&mut session.idle_ttl, &cli.idle_ttl);
    set(&mut session.max_sessions, &cli.max_sessions);
    set(&mut session.window_events, &cli.window_events);
    set(&mut session.window_bytes, &cli.window_bytes);
    set(&mut session.window_age, &cli.window_age);
    set(&mut session.max_subscriptions, &cli.max_subscriptions);
    set(&mut session.max_inflight, &cli.max_inflight);
}

fn apply_http(http: &mut HttpConfig, cli: &Cli) {
    set(&mut http.json_wait, &cli.json_wait);
    set(&mut http.max_connections, &cli.max_connections);
    if !cli.allowed_origins.is_empty() {
        http.allowed_origins = cli.allowed_origins.clone();
    }
    // MCP_PROXY_ALLOWED_HOSTS= (set, empty) names no host: the default stays.
    let allowed_hosts: Vec<String> = cli
        .allowed_hosts
        .iter()
        .filter(|host| !host.trim().is_empty())
        .map(|host| host.trim().to_owned())
        .collect();
    if !allowed_hosts.is_empty() {
        http.allowed_hosts = allowed_hosts;
    }
    if cli.principal_header.is_some() {
        http.principal_header = cli.principal_header.clone();
    }
    if !cli.trusted_proxies.is_empty() {
        http.trusted_proxies = cli.trusted_proxies.clone();
    }
    set(&mut http.max_body_bytes, &cli.max_body_bytes);
    set(&mut http.body_timeout, &cli.body_timeout);
    set(&mut http.sse_keep_alive, &cli.sse_keep_alive);
    set(&mut http.sse_retry, &cli.sse_retry);
    set(&mut http.sse_close_after, &cli.sse_close_after);
    set(&mut http.post_response, &cli.post_response);
}
