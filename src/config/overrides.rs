//! Command-line options over the file: an option given replaces the file's value.

use super::{Cli, Config};

impl Config {
    pub(super) fn apply(&mut self, cli: &Cli) {
        fn set<T: Clone>(target: &mut T, value: &Option<T>) {
            if let Some(value) = value {
                *target = value.clone();
            }
        }
        set(&mut self.listen, &cli.listen);
        set(&mut self.log_format, &cli.log_format);
        set(&mut self.shutdown_timeout, &cli.shutdown_timeout);
        set(&mut self.workers, &cli.workers);
        set(&mut self.store, &cli.store);
        set(&mut self.cluster.node_id, &cli.node_id);
        set(&mut self.cluster.advertise, &cli.advertise);
        set(&mut self.cluster.secret, &cli.cluster_secret);
        set(&mut self.cluster.heartbeat, &cli.heartbeat);
        set(&mut self.cluster.owner_timeout, &cli.owner_timeout);
        set(&mut self.cluster.write_delay, &cli.write_delay);
        set(&mut self.cluster.max_write_queue, &cli.max_write_queue);
        set(&mut self.tracing.otlp_endpoint, &cli.otlp_endpoint);
        set(&mut self.tracing.service_name, &cli.service_name);
        set(&mut self.cluster.namespace, &cli.namespace);
        // One server is fronted: naming one on the command line replaces the file's.
        if cli.stdio.is_some() || cli.http.is_some() || cli.sse.is_some() {
            self.upstream.stdio = cli.stdio.clone();
            self.upstream.http = cli.http.clone();
            self.upstream.sse = cli.sse.clone();
        }
        set(&mut self.upstream.request_timeout, &cli.request_timeout);
        set(&mut self.upstream.isolation, &cli.isolation);
        set(
            &mut self.upstream.forward_authorization,
            &cli.forward_authorization,
        );
        set(&mut self.upstream.cache_ttl, &cli.cache_ttl);
        set(&mut self.upstream.cache_scope, &cli.cache_scope);
        set(&mut self.upstream.trace_headers, &cli.trace_headers);
        set(&mut self.upstream.warm, &cli.warm);
        self.upstream.env.extend(cli.env.iter().cloned());
        set(&mut self.upstream.env_clear, &cli.env_clear);
        if !cli.env_pass.is_empty() {
            self.upstream.env_pass = cli.env_pass.clone();
        }
        set(&mut self.upstream.protocol, &cli.upstream_protocol);
        if cli.cache_lists.is_some() {
            self.upstream.cache_lists = cli.cache_lists;
        }
        set(&mut self.upstream.max_line_bytes, &cli.max_line_bytes);
        set(&mut self.upstream.shutdown_grace, &cli.shutdown_grace);
        set(&mut self.session.correlation, &cli.correlation);
        set(&mut self.session.require_session, &cli.require_session);
        set(&mut self.session.coalesce_progress, &cli.coalesce_progress);
        set(&mut self.session.anonymous, &cli.anonymous);
        set(&mut self.session.input_ttl, &cli.input_ttl);
        set(
            &mut self.session.max_held_per_principal,
            &cli.max_held_per_principal,
        );
        set(
            &mut self.session.data_session_idle_ttl,
            &cli.data_session_idle_ttl,
        );
        set(
            &mut self.session.data_session_lifetime,
            &cli.data_session_lifetime,
        );
        set(
            &mut self.session.max_data_sessions_per_principal,
            &cli.max_data_sessions_per_principal,
        );
        set(
            &mut self.session.max_session_state_bytes,
            &cli.max_session_state_bytes,
        );
        set(&mut self.http.json_wait, &cli.json_wait);
        if !cli.allowed_origins.is_empty() {
            self.http.allowed_origins = cli.allowed_origins.clone();
        }
        // MCP_PROXY_ALLOWED_HOSTS= (set, empty) names no host: the default stays.
        let allowed_hosts: Vec<String> = cli
            .allowed_hosts
            .iter()
            .filter(|host| !host.trim().is_empty())
            .map(|host| host.trim().to_owned())
            .collect();
        if !allowed_hosts.is_empty() {
            self.http.allowed_hosts = allowed_hosts;
        }
        if cli.principal_header.is_some() {
            self.http.principal_header = cli.principal_header.clone();
        }
        set(
            &mut self.session.max_sessions_per_principal,
            &cli.max_sessions_per_principal,
        );
        set(
            &mut self.session.max_anonymous_sessions,
            &cli.max_anonymous_sessions,
        );
        set(&mut self.session.anonymous_pool, &cli.anonymous_pool);
        set(
            &mut self.session.anonymous_pool_wait,
            &cli.anonymous_pool_wait,
        );
        set(
            &mut self.session.anonymous_pool_reuse,
            &cli.anonymous_pool_reuse,
        );
        set(&mut self.session.idle_ttl, &cli.idle_ttl);
        set(&mut self.session.max_sessions, &cli.max_sessions);
        set(&mut self.session.window_events, &cli.window_events);
        set(&mut self.session.window_bytes, &cli.window_bytes);
        set(&mut self.session.window_age, &cli.window_age);
        set(&mut self.session.max_subscriptions, &cli.max_subscriptions);
        set(&mut self.http.max_body_bytes, &cli.max_body_bytes);
        set(&mut self.http.body_timeout, &cli.body_timeout);
        set(&mut self.http.sse_keep_alive, &cli.sse_keep_alive);
        set(&mut self.http.sse_retry, &cli.sse_retry);
        set(&mut self.http.sse_close_after, &cli.sse_close_after);
        set(&mut self.http.post_response, &cli.post_response);
    }
}
