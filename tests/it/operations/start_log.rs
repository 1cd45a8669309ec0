//! What the proxy logs, read as an operator reads it: words and numbers, never a type's debug
//! form (`limits=Limits { memory: Some(…) }`, `protocol=Legacy`), from the start with every
//! feature on (TLS, a virtual server of confined members, Redis) to the last line of a stop.

use serde_json::Value;

use crate::harness::cluster::Redis;
use crate::harness::tls::{curl_initialize, Certificates};
use crate::harness::{spawn_proxy, spawn_proxy_with_env, within, DEMO};

/// What a type's debug form looks like in a field or a message.
const DEBUG_SHAPES: &[&str] = &[
    "Some(", "None", " { ", "Legacy", "Modern", "Allow", "Deny", "(unix_", "Ok(", "Err(", "\\\"",
];

/// Fails on any field of `lines` (the message included) that reads as debug output.
fn assert_words_only(lines: &[Value]) {
    for line in lines {
        for (field, value) in line["fields"].as_object().into_iter().flatten() {
            let text = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            let shape = DEBUG_SHAPES.iter().find(|shape| text.contains(*shape));
            assert!(
                shape.is_none(),
                "{field}={text} reads as debug output ({shape:?}): {line}"
            );
            assert!(!text.is_empty(), "{field} is logged empty: {line}");
        }
    }
}

#[tokio::test]
async fn a_confined_start_is_logged_in_words_not_debug_output() {
    let (_proxy, _, _logs, lines) = spawn_proxy(&[
        "--listen",
        "127.0.0.1:0",
        "--sandbox",
        "--sandbox-network",
        "none",
        "--sandbox-memory",
        "256MiB",
        "--sandbox-cpu-seconds",
        "60",
    ])
    .await;
    assert_words_only(&lines);
    let confined = lines
        .iter()
        .find(|line| line["fields"]["limits"].is_string())
        .expect("the confinement is logged");
    assert_eq!(confined["fields"]["limits"], "memory 256 MiB, cpu 60 s");
    assert_eq!(confined["fields"]["network"], "none");
    let probed = lines
        .iter()
        .find(|line| line["fields"]["protocol"].is_string())
        .expect("the probe is logged");
    assert_eq!(probed["fields"]["protocol"], "legacy");
}

/// TLS on the listener, a virtual server over two confined members, Redis: the start, a
/// session over TLS, and the stop, every line of it in words.
#[tokio::test]
async fn a_start_with_every_feature_on_is_logged_in_words_from_start_to_stop() {
    let redis = Redis::start().await;
    let certificates = Certificates::make();
    let dir = std::env::temp_dir().join(format!("mcp-proxy-every-feature-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("proxy.toml");
    let member = |name: &str| {
        format!(
            "[servers.{name}.upstream]\nstdio = \"{DEMO} demo-server\"\n\
             [servers.{name}.upstream.sandbox]\nenabled = true\nnetwork = \"none\"\n\
             memory = \"256MiB\"\ncpu_seconds = 60\n"
        )
    };
    let virtual_server = "[virtual.work]\nservers = [\"notes\", \"tasks\"]\ndefault = true\n";
    std::fs::write(
        &file,
        format!("{}{}{virtual_server}", member("notes"), member("tasks")),
    )
    .unwrap();
    let (cert, key, ca) = (
        certificates.arg("server.pem"),
        certificates.arg("server-key.pem"),
        certificates.arg("ca.pem"),
    );
    let store = redis.url();
    let (mut proxy, addr, mut logs, mut lines) = spawn_proxy_with_env(
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            file.to_str().unwrap(),
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--store",
            &store,
        ],
        &[(
            "MCP_PROXY_CLUSTER_SECRET",
            "every-feature-secret-0123456789abcdef",
        )],
    )
    .await;
    let served = curl_initialize(&format!("https://{addr}/mcp"), &["--cacert", &ca]).await;
    let answer = String::from_utf8_lossy(&served.stdout);
    assert!(
        answer.contains("\"serverInfo\":{\"name\":\"work\""),
        "{answer}"
    );

    let pid = nix::unistd::Pid::from_raw(proxy.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    within("the proxy to stop", async {
        while let Some(line) = logs.next_line().await.unwrap() {
            lines.push(serde_json::from_str(&line).unwrap());
        }
        proxy.wait().await.unwrap()
    })
    .await;
    assert_words_only(&lines);
    let messages: Vec<&str> = lines
        .iter()
        .filter_map(|line| line["fields"]["message"].as_str())
        .collect();
    let listening = messages
        .iter()
        .find(|message| message.starts_with("listening on "))
        .unwrap();
    assert!(
        listening.contains(&format!(
            "https://{addr}/servers/work/mcp (virtual: notes, tasks)"
        )),
        "{listening}"
    );
    // Each member's probe names the member, not only the command both run.
    for member in ["servers.notes.upstream", "servers.tasks.upstream"] {
        assert!(
            lines.iter().any(
                |line| line["fields"]["message"] == "probed the server's protocol"
                    && line["fields"]["server"] == member
            ),
            "{member}'s probe is logged under its key"
        );
    }
    for said in ["joined the replicas sharing", "session created", "stopped"] {
        assert!(
            messages.iter().any(|message| message.starts_with(said)),
            "{said:?} among {messages:#?}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
