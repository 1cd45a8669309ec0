//! `docker/compose.yaml`: Redis, two replicas sharing it, and a plain round-robin balancer;
//! Prometheus scraping the replicas, Grafana showing them, Jaeger receiving their spans.
//! Checked with `docker compose config` where Docker Compose exists, and always by reading it.
//! The Grafana dashboard is checked against the `/metrics` of a running proxy.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use crate::harness::{repo_root, Proxy};
use http::{Method, StatusCode};
use serde_json::{json, Value};

#[test]
fn the_compose_file_runs_two_replicas_on_redis_behind_a_non_sticky_balancer() {
    let python = repo_root().join("tests/python/.venv/bin/python");
    let output = Command::new(&python)
        .arg(repo_root().join("tests/python/check_compose.py"))
        .arg(repo_root().join("docker"))
        .output()
        .expect("the tests' Python (scripts/test makes it)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["services"],
        json!([
            "balancer",
            "grafana",
            "jaeger",
            "prometheus",
            "proxy-a",
            "proxy-b",
            "redis"
        ])
    );
    for replica in ["proxy-a", "proxy-b"] {
        let command: Vec<&str> = report["commands"][replica]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let after =
            |flag: &str| command[command.iter().position(|c| *c == flag).unwrap() + 1].to_owned();
        assert_eq!(after("--store"), "redis://redis:6379/0");
        assert_eq!(after("--node-id"), replica);
        assert_eq!(after("--advertise"), format!("http://{replica}:8787"));
        assert_eq!(report["builds"][replica]["dockerfile"], "docker/Dockerfile");
        assert!(report["environment"][replica]["MCP_PROXY_CLUSTER_SECRET"]
            .as_str()
            .unwrap()
            .contains("MCP_PROXY_CLUSTER_SECRET"));
        // The Host names come from the environment, as the image documents: none on the
        // command line, and by default those the balancer, Prometheus and the image's health
        // check send (localhost first: the health check sends the first).
        assert!(!command.contains(&"--allowed-host"), "{command:?}");
        let hosts = report["environment"][replica]["MCP_PROXY_ALLOWED_HOSTS"]
            .as_str()
            .unwrap_or_else(|| panic!("{replica} names its allowed hosts"));
        let defaults = hosts
            .strip_prefix("${MCP_PROXY_ALLOWED_HOSTS:-")
            .and_then(|rest| rest.strip_suffix('}'))
            .unwrap_or_else(|| panic!("overridable, with a default: {hosts}"));
        let defaults: Vec<&str> = defaults.split(',').collect();
        assert_eq!(defaults[0], "localhost", "{defaults:?}");
        for name in ["127.0.0.1", "proxy-a", "proxy-b"] {
            assert!(defaults.contains(&name), "{name} in {defaults:?}");
        }
        assert_eq!(
            report["environment"][replica]["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://jaeger:4318",
            "{replica} exports its spans to Jaeger"
        );
        // The replica's flags are the real binary's.
        let mut args: Vec<String> = command.iter().map(|c| c.to_string()).collect();
        args.push("--help".into());
        let help = Command::new(env!("CARGO_BIN_EXE_mcp-session-proxy"))
            .args(&args)
            .output()
            .unwrap();
        assert!(
            help.status.success(),
            "{}",
            String::from_utf8_lossy(&help.stderr)
        );
    }
    let nginx: String = report["nginx"]
        .as_str()
        .unwrap()
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(nginx.contains("server proxy-a:8787;") && nginx.contains("server proxy-b:8787;"));
    for sticky in ["ip_hash", "sticky", "hash $"] {
        assert!(!nginx.contains(sticky), "no stickiness: {sticky}");
    }
    assert!(
        nginx.contains("proxy_buffering off"),
        "SSE passes through unbuffered"
    );
    assert!(
        nginx.contains("proxy_set_header Upgrade"),
        "WebSockets pass through"
    );

    // What the balancer, Prometheus and Grafana mount is in docker/ (compose resolves `./`
    // against the compose file's folder), and lands where each image reads it.
    let docker = repo_root().join("docker");
    let mut mounts = BTreeMap::new();
    for service in ["balancer", "prometheus", "grafana"] {
        let volumes = report["volumes"][service]
            .as_array()
            .unwrap_or_else(|| panic!("{service} mounts its configuration"));
        for volume in volumes {
            let volume = volume.as_str().unwrap();
            let parts: Vec<&str> = volume.split(':').collect();
            assert!(
                parts.len() == 2 || (parts.len() == 3 && parts[2] == "ro"),
                "{service}: {volume}"
            );
            let host = parts[0]
                .strip_prefix("./")
                .unwrap_or_else(|| panic!("{service}: {volume} names a path in docker/"));
            assert!(
                docker.join(host).exists(),
                "{service} mounts docker/{host}, which does not exist"
            );
            mounts.insert(parts[1].to_owned(), host.to_owned());
        }
    }
    assert_eq!(mounts["/etc/prometheus/prometheus.yml"], "prometheus.yml");
    assert_eq!(mounts["/etc/grafana/provisioning"], "grafana/provisioning");
    assert_eq!(mounts["/var/lib/grafana/dashboards"], "grafana/dashboards");
    let read = |path: &str| std::fs::read_to_string(docker.join(path)).unwrap();
    let prometheus = read("prometheus.yml");
    for target in ["proxy-a:8787", "proxy-b:8787", "/metrics"] {
        assert!(prometheus.contains(target), "Prometheus scrapes {target}");
    }
    assert!(read("grafana/provisioning/datasources/prometheus.yaml")
        .contains("url: http://prometheus:9090"));
    assert!(read("grafana/provisioning/dashboards/dashboards.yaml")
        .contains("path: /var/lib/grafana/dashboards"));
    assert!(docker
        .join("grafana/dashboards/mcp-session-proxy.json")
        .is_file());

    let compose = Command::new("docker").args(["compose", "version"]).output();
    let missing = match &compose {
        Err(error) => Some(format!("no docker command here: {error}")),
        Ok(output) if !output.status.success() => Some(format!(
            "no Docker Compose here (`docker compose version`: {})",
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
        )),
        Ok(_) => None,
    };
    if let Some(missing) = missing {
        eprintln!(
            "skipped: `docker compose config` of docker/compose.yaml, {missing}; the file was \
             checked by reading it only"
        );
    } else {
        let config = Command::new("docker")
            .args(["compose", "-f"])
            .arg(repo_root().join("docker/compose.yaml"))
            .arg("config")
            .env("MCP_PROXY_CLUSTER_SECRET", "x")
            .output()
            .unwrap();
        assert!(
            config.status.success(),
            "{}",
            String::from_utf8_lossy(&config.stderr)
        );
    }
}

/// The instructions of the Dockerfile's last stage (the image), continuation lines joined,
/// comments left out.
fn image_instructions(dockerfile: &str) -> Vec<String> {
    let mut instructions: Vec<String> = Vec::new();
    let mut pending = String::new();
    for line in dockerfile.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && pending.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => pending.push_str(part),
            None => {
                pending.push_str(line);
                instructions.push(std::mem::take(&mut pending));
            }
        }
    }
    let last_stage = instructions
        .iter()
        .rposition(|i| i.starts_with("FROM "))
        .expect("a FROM");
    instructions.split_off(last_stage)
}

#[tokio::test]
async fn the_image_runs_as_a_non_root_user_and_checks_its_health_with_the_binary() {
    let dockerfile = std::fs::read_to_string(repo_root().join("docker/Dockerfile")).unwrap();
    let image = image_instructions(&dockerfile);
    let find = |keyword: &str| {
        let found: Vec<&String> = image
            .iter()
            .filter(|i| i.starts_with(&format!("{keyword} ")))
            .collect();
        assert_eq!(found.len(), 1, "one {keyword} in the image: {image:?}");
        found[0][keyword.len() + 1..].trim().to_owned()
    };
    assert_eq!(find("USER"), "10001:10001", "numeric, not root");
    assert!(image
        .iter()
        .any(|i| i.contains("useradd") && i.contains("--uid 10001")));
    assert_eq!(find("EXPOSE"), "8787");
    assert_eq!(find("ENTRYPOINT"), r#"["mcp-session-proxy"]"#);
    assert_eq!(find("CMD"), r#"["--listen", "0.0.0.0:8787"]"#);
    assert!(
        dockerfile.contains("MCP_PROXY_ALLOWED_HOSTS="),
        "the image says how to name its hosts"
    );

    // The health check is the binary's own subcommand: run as written against a live proxy
    // (its address given, since the image's port may be taken here).
    let healthcheck = find("HEALTHCHECK");
    let command: Vec<String> = serde_json::from_str(
        healthcheck
            .split_once("CMD ")
            .expect("HEALTHCHECK ... CMD [...]")
            .1,
    )
    .expect("the exec form, a JSON array");
    assert_eq!(command[..2], ["mcp-session-proxy", "health"]);
    let help = Command::new(env!("CARGO_BIN_EXE_mcp-session-proxy"))
        .args(["health", "--help"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("http://127.0.0.1:8787/healthz"),
        "by default it asks the port the image listens on"
    );
    let proxy = Proxy::start().await;
    let asked = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-session-proxy"))
        .args(&command[1..])
        .args(["--url", &format!("http://{}/healthz", proxy.addr())])
        .env_remove("MCP_PROXY_ALLOWED_HOSTS")
        .kill_on_drop(true)
        .output();
    let asked = tokio::time::timeout(std::time::Duration::from_secs(20), asked)
        .await
        .expect("the health check ends on its own")
        .unwrap();
    proxy.stop().await;
    assert!(
        asked.status.success(),
        "{}",
        String::from_utf8_lossy(&asked.stderr)
    );
}

/// Every panel of `list`, and those nested in its rows.
fn panels(list: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    for panel in list.as_array().into_iter().flatten() {
        all.push(panel);
        all.extend(panels(&panel["panels"]));
    }
    all
}

/// The `mcp_proxy_…` names in a PromQL expression, as written (`_bucket` and all).
fn metric_names(expr: &str) -> Vec<String> {
    let name_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("mcp_proxy_") {
        let inside_a_word = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let tail = &rest[at..];
        let end = tail.find(|c: char| !name_char(c)).unwrap_or(tail.len());
        if !inside_a_word {
            names.push(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The histograms of an exposition: the names its `# TYPE <name> histogram` lines declare.
fn histograms(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|declared| declared.strip_suffix(" histogram"))
        .map(str::to_owned)
        .collect()
}

/// Every name an exposition has a sample of (the token before `{` or the space), and the
/// base name of each histogram (whose samples are `_bucket`, `_sum` and `_count`).
fn exposed_names(text: &str, histograms: &BTreeSet<String>) -> BTreeSet<String> {
    let mut names = histograms.clone();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        names.insert(line[..end].to_owned());
    }
    names
}

/// The family a name belongs to: a histogram's `_bucket`, `_sum` and `_count` are its own.
fn family(name: &str, histograms: &BTreeSet<String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if histograms.contains(base) {
                return base.to_owned();
            }
        }
    }
    name.to_owned()
}

#[tokio::test]
async fn the_dashboard_parses_and_every_metric_it_names_exists() {
    let path = repo_root().join("docker/grafana/dashboards/mcp-session-proxy.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "mcp-session-proxy");
    assert_eq!(dashboard["title"], "mcp-session-proxy");
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let server = variables
        .iter()
        .find(|v| v["name"] == "server")
        .expect("a server variable");
    assert_eq!(server["multi"], true);
    assert_eq!(server["includeAll"], true);
    assert!(variables
        .iter()
        .any(|v| v["type"] == "datasource" && v["query"] == "prometheus"));

    let mut named = Vec::new();
    for variable in variables {
        if let Some(definition) = variable["definition"].as_str() {
            named.extend(metric_names(definition));
        }
    }
    let all = panels(&dashboard["panels"]);
    assert!(!all.is_empty());
    for panel in &all {
        assert!(
            panel["title"]
                .as_str()
                .is_some_and(|t| !t.trim().is_empty()),
            "a panel without a title: {panel}"
        );
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = target["expr"].as_str() else {
                continue;
            };
            // Ranges follow the scrape interval and the zoom, never a fixed window.
            for range in expr.split('[').skip(1) {
                assert!(range.starts_with("$__rate_interval]"), "{expr}");
            }
            named.extend(metric_names(expr));
        }
    }

    // A proxy that has served a session and a tool call, so its per-server series exist.
    let proxy = Proxy::start().await;
    let mut client = proxy.initialized_client("2025-06-18").await;
    client.call_tool("counter", json!({})).await;
    let reply = client.send_to("/metrics", Method::GET, &[], None).await;
    assert_eq!(reply.status, StatusCode::OK);
    let text = String::from_utf8(reply.bytes().await.to_vec()).unwrap();
    proxy.stop().await;

    let histograms = histograms(&text);
    let exposed = exposed_names(&text, &histograms);
    let families: BTreeSet<String> = named.iter().map(|n| family(n, &histograms)).collect();
    let missing: Vec<&String> = families.iter().filter(|n| !exposed.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard names metrics /metrics does not expose: {missing:?}\n{text}"
    );
    assert!(
        families.len() >= 20,
        "the dashboard covers the proxy's metrics: {families:?}"
    );
}
