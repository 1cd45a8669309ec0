//! What a stdio child finds in its environment, read by a real child that writes it to a file
//! before it becomes the demo server: never the proxy's own secrets, however the proxy was
//! given them (variable, file), the `auto` probe's child included; what configuration sets and
//! lets through. And what a child can read of the proxy through `/proc` (`tests/servers/
//! snoop.sh`): neither its environment nor its memory, whether it runs as the proxy's user
//! (the proxy is not dumpable) or as `upstream.user`.

use std::path::{Path, PathBuf};

use crate::harness::{eventually, spawn_proxy_command, spawn_proxy_with_env, within, Client, DEMO};
use nix::unistd::{Gid, Uid, User};

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
    let secret_file = dir.join("cluster-secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let (_proxy, addr, _logs, _) = spawn_proxy_with_env(
        &[
            "--listen",
            "127.0.0.1:0",
            "--stdio",
            &command,
            "--cluster-secret-file",
            secret_file.to_str().unwrap(),
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

/// `nobody`'s user and group ids.
fn nobody() -> (u32, u32) {
    let user = User::from_name("nobody")
        .unwrap()
        .expect("a user named nobody");
    (user.uid.as_raw(), user.gid.as_raw())
}

/// Who this test runs as.
fn myself() -> (u32, u32) {
    (Uid::effective().as_raw(), Gid::effective().as_raw())
}

/// The proxy binary as a user without privileges: this test's user, or nobody where the test
/// runs as root (root reads any process's memory), and that user's ids; beside it, the snoop
/// it runs as its server.
fn unprivileged_proxy(test: &str) -> (Snoop, std::process::Command, (u32, u32)) {
    use std::os::unix::process::CommandExt;
    let ids = match Uid::effective().is_root() {
        true => nobody(),
        false => myself(),
    };
    let snoop = Snoop::new(test, ids);
    let mut command = std::process::Command::new(&snoop.binary);
    command.current_dir(&snoop.dir);
    if Uid::effective().is_root() {
        command.uid(ids.0).gid(ids.1);
    }
    (snoop, command, ids)
}

/// Whether the user and group `ids` may run `binary`.
fn runs_as(binary: &Path, (uid, gid): (u32, u32)) -> bool {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(binary);
    if Uid::effective().is_root() {
        command.uid(uid).gid(gid);
    }
    command
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A folder anyone may write to, holding `snoop.sh` and a proxy binary the user `ids` may run
/// (this one, or a copy where its folders are closed to that user).
struct Snoop {
    dir: PathBuf,
    binary: PathBuf,
    /// The stdio command: snoop, then become the demo server.
    command: String,
}

impl Snoop {
    fn new(test: &str, ids: (u32, u32)) -> Snoop {
        use std::os::unix::fs::PermissionsExt;
        let mode = |mode| std::fs::Permissions::from_mode(mode);
        let dir = std::env::temp_dir().join(format!("mcp-snoop-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, mode(0o777)).unwrap();
        let script = dir.join("snoop.sh");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/servers/snoop.sh");
        std::fs::copy(source, &script).unwrap();
        std::fs::set_permissions(&script, mode(0o755)).unwrap();
        let mut binary = PathBuf::from(DEMO);
        if !runs_as(&binary, ids) {
            binary = dir.join("mcp-session-proxy");
            std::fs::copy(DEMO, &binary).unwrap();
            std::fs::set_permissions(&binary, mode(0o755)).unwrap();
            assert!(
                runs_as(&binary, ids),
                "{ids:?} cannot run {}",
                binary.display()
            );
        }
        let words = [
            "/bin/sh".to_owned(),
            script.display().to_string(),
            dir.display().to_string(),
            binary.display().to_string(),
            "demo-server".to_owned(),
        ];
        Snoop {
            command: shell_words::join(words),
            dir,
            binary,
        }
    }

    /// Every report written so far, one per child.
    fn reports(&self) -> Vec<String> {
        std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(|entry| entry.ok())
            .filter(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                name.starts_with("report.") && !name.ends_with(".tmp")
            })
            .map(|entry| std::fs::read_to_string(entry.path()).unwrap())
            .collect()
    }
}

impl Drop for Snoop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The value of `key=` in a report.
fn field<'a>(report: &'a str, key: &str) -> &'a str {
    report
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in the report:\n{report}"))
}

/// What no child may read of the proxy, whoever it runs as.
fn assert_read_nothing_of_the_proxy(report: &str) {
    assert_eq!(field(report, "environ"), "refused", "{report}");
    assert_eq!(field(report, "mem"), "refused", "{report}");
    assert_eq!(field(report, "launcher_environ"), "refused", "{report}");
    assert!(!report.contains(SECRET), "{report}");
}

/// A process may read the environment and open the memory of another of its user's, unless
/// that one is not dumpable: the proxy makes itself so, and its children (of its own user)
/// read neither. Root reads any process's, so as root the proxy runs as `nobody` here.
#[tokio::test]
async fn a_child_of_the_proxys_own_user_reads_neither_its_environment_nor_its_memory() {
    let (snoop, command, ids) = unprivileged_proxy("own-user");
    let (proxy, addr, _logs, _) = spawn_proxy_command(
        command.into(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--stdio",
            &snoop.command,
            "--upstream-protocol",
            "auto",
        ],
        &[("MCP_PROXY_CLUSTER_SECRET", SECRET)],
    )
    .await;
    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;

    let reports = snoop.reports();
    assert_eq!(reports.len(), 2, "the probe's child and the session's");
    for report in &reports {
        assert_eq!(field(report, "uid"), ids.0.to_string(), "the proxy's user");
        assert_eq!(field(report, "parent"), proxy.id().unwrap().to_string());
        assert_read_nothing_of_the_proxy(report);
    }
}

/// With `upstream.user`, every child runs as that user and its group, without the proxy's
/// supplementary groups: the `auto` probe's, the warm ones, the sessions'. As `nobody`, a child
/// of a proxy running as root reads nothing of it.
#[tokio::test]
async fn children_run_as_the_configured_user_without_the_proxys_groups() {
    if !Uid::effective().is_root() {
        eprintln!("skipped: running children as another user needs root, and this test is not");
        return;
    }
    let (uid, gid) = nobody();
    let snoop = Snoop::new("as-nobody", (uid, gid));
    let (_proxy, addr, _logs, _) = spawn_proxy_with_env(
        &[
            "--listen",
            "127.0.0.1:0",
            "--stdio",
            &snoop.command,
            "--upstream-protocol",
            "auto",
            "--warm",
            "1",
            "--upstream-user",
            "nobody",
        ],
        &[("MCP_PROXY_CLUSTER_SECRET", SECRET)],
    )
    .await;
    eventually("the probe's child and the warm one", || {
        snoop.reports().len() >= 2
    })
    .await;
    let mut client = Client::new(addr);
    client.initialize("2025-11-25").await;
    assert_eq!(
        client
            .call_tool("echo", serde_json::json!({"text": "hi"}))
            .await,
        "hi"
    );

    for report in snoop.reports() {
        assert_eq!(field(&report, "uid"), uid.to_string(), "{report}");
        assert_eq!(field(&report, "gid"), gid.to_string(), "{report}");
        assert_eq!(field(&report, "groups"), gid.to_string(), "{report}");
        assert_read_nothing_of_the_proxy(&report);
    }
}

/// A gateway server's `[servers.<name>.upstream]` names its own user and group, by number.
#[tokio::test]
async fn a_gateway_servers_shared_child_runs_as_its_own_user_and_group() {
    if !Uid::effective().is_root() {
        eprintln!("skipped: running children as another user needs root, and this test is not");
        return;
    }
    let (uid, gid) = nobody();
    let snoop = Snoop::new("gateway", (uid, gid));
    let config = snoop.dir.join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            "[servers.tools.upstream]\nstdio = {}\nisolation = \"shared\"\nuser = \"{uid}\"\n\
             group = \"{gid}\"\n",
            // A JSON string is a TOML one.
            serde_json::Value::from(snoop.command.clone())
        ),
    )
    .unwrap();
    let (_proxy, addr, _logs, _) = spawn_proxy_with_env(
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
        &[("MCP_PROXY_CLUSTER_SECRET", SECRET)],
    )
    .await;
    let mut client = Client::new(addr);
    client.path = "/servers/tools/mcp".into();
    client.initialize("2025-11-25").await;
    assert_eq!(
        client
            .call_tool("echo", serde_json::json!({"text": "hi"}))
            .await,
        "hi"
    );

    let reports = snoop.reports();
    assert!(!reports.is_empty());
    for report in reports {
        assert_eq!(field(&report, "uid"), uid.to_string(), "{report}");
        assert_eq!(field(&report, "groups"), gid.to_string(), "{report}");
        assert_read_nothing_of_the_proxy(&report);
    }
}

/// The proxy's stderr and whether it failed, when it stops at start.
async fn refused(mut command: tokio::process::Command, args: &[&str]) -> String {
    let output = within(
        "the proxy to refuse",
        command
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{args:?} started: {stderr}");
    stderr
}

/// Children as another user where the proxy may not switch (neither root nor CAP_SETUID and
/// CAP_SETGID), as a user or group that does not exist, or for a server that is no child:
/// start-up stops, naming the key, rather than running children as the proxy's user.
#[tokio::test]
async fn another_user_for_children_is_refused_at_start_where_it_cannot_be_had() {
    let cases: [(&[&str], &str, &str); 3] = [
        (
            &["--upstream-user", "no-such-user-4f2a"],
            "upstream.user",
            "no-such-user-4f2a",
        ),
        (
            &["--upstream-group", "no-such-group-4f2a"],
            "upstream.group",
            "no-such-group-4f2a",
        ),
        (
            &[
                "--http",
                "http://127.0.0.1:1/mcp",
                "--upstream-user",
                "nobody",
            ],
            "upstream.user",
            "stdio",
        ),
    ];
    for (args, key, named) in cases {
        let stderr = refused(tokio::process::Command::new(DEMO), args).await;
        assert!(
            stderr.contains(key) && stderr.contains(named),
            "{args:?}: {stderr}"
        );
    }

    // An unprivileged proxy: this test's user, or nobody where it is root.
    let (_snoop, command, _) = unprivileged_proxy("unprivileged");
    let stderr = refused(command.into(), &["--upstream-user", "0"]).await;
    assert!(
        stderr.contains("upstream.user") && stderr.contains("CAP_SETUID"),
        "{stderr}"
    );
}
