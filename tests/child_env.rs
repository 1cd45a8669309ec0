//! What a stdio child finds in its environment, read by a real child that writes it to a file
//! before it becomes the demo server: never the proxy's own secrets, however the proxy was
//! given them (variable, flag), the `auto` probe's child included; what configuration sets and
//! lets through.

mod common;

use std::path::{Path, PathBuf};

use common::{spawn_proxy_with_env, Client, DEMO};

const SECRET: &str = "9f0c4b1e8d2a7c3f6e5b4a3928170615f4e3d2c1b0a99887766554433221100f";
const OTLP_KEY: &str = "otlp-api-key-5e1d";

/// A directory of its own, and in it a stdio server that writes its environment to
/// `env.<pid>` there, then runs the demo server.
fn recorder(test: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("mcp-child-env-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("server.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nenv > \"{}/env.$$\"\nexec {} demo-server\n",
            dir.display(),
            shell_words::quote(DEMO)
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let command = shell_words::quote(&script.to_string_lossy()).into_owned();
    (dir, command)
}

/// Every environment written so far.
fn environments(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("env."))
        .map(|entry| std::fs::read_to_string(entry.path()).unwrap())
        .collect()
}

fn assert_holds_no_secret(env: &str) {
    for withheld in [SECRET, OTLP_KEY, "MCP_PROXY_", "OTEL_EXPORTER_OTLP_HEADERS"] {
        assert!(
            !env.contains(withheld),
            "{withheld:?} reached a child:\n{env}"
        );
    }
}

#[tokio::test]
async fn a_child_never_inherits_the_proxys_secrets_the_probes_child_included() {
    let (dir, command) = recorder("inherit");
    let (_proxy, addr, _logs, _) = spawn_proxy_with_env(
        &[
            "--listen",
            "127.0.0.1:0",
            "--stdio",
            &command,
            "--upstream-protocol",
            "auto",
        ],
        &[
            ("MCP_PROXY_CLUSTER_SECRET", SECRET),
            ("OTEL_EXPORTER_OTLP_HEADERS", &format!("api-key={OTLP_KEY}")),
            ("A_COPY_OF_THE_SECRET", &format!("Bearer {SECRET}")),
            ("LEFT_ALONE", "visible"),
        ],
    )
    .await;
    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;
    assert_eq!(
        client
            .call_tool("echo", serde_json::json!({"text": "hi"}))
            .await,
        "hi"
    );

    let environments = environments(&dir);
    assert_eq!(environments.len(), 2, "the probe's child and the session's");
    for env in &environments {
        assert_holds_no_secret(env);
        assert!(env.contains("LEFT_ALONE=visible"), "{env}");
        assert!(env.lines().any(|line| line.starts_with("PATH=")), "{env}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_allow_list_passes_what_it_names_and_env_sets_variables_but_no_secret_passes() {
    let (dir, command) = recorder("allow");
    let (_proxy, addr, _logs, _) = spawn_proxy_with_env(
        &[
            "--listen",
            "127.0.0.1:0",
            "--stdio",
            &command,
            "--cluster-secret",
            SECRET,
            "--env-clear",
            "--env-pass",
            "PATH",
            "--env-pass",
            "VAULT_TOKEN",
            "--env",
            "GREETING=hello there",
        ],
        &[
            ("VAULT_TOKEN", SECRET),
            ("HOME", "/home/proxy"),
            ("NOT_PASSED", "x"),
        ],
    )
    .await;
    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;

    let environments = environments(&dir);
    assert_eq!(environments.len(), 2, "the probe's child and the session's");
    for env in &environments {
        assert_holds_no_secret(env);
        assert!(env.contains("GREETING=hello there"), "{env}");
        assert!(env.lines().any(|line| line.starts_with("PATH=")), "{env}");
        for absent in ["HOME=/home/proxy", "NOT_PASSED", "VAULT_TOKEN"] {
            assert!(!env.contains(absent), "{absent} reached the child:\n{env}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn env_pass_without_env_clear_is_refused_naming_the_key() {
    let output = std::process::Command::new(DEMO)
        .args(["--env-pass", "PATH", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("upstream.env_pass"), "{stderr}");
}
