//! A virtual server whose members are parties of their own: `bank` composes `good`, an honest
//! server with rules of its operator's, and `evil`, one that misbehaves on cue
//! (tests/servers/hostile_member.py), each over stdio or Streamable HTTP. Tried over Streamable
//! HTTP, WebSocket and the 2024-11-05 SSE pair: a member's rules hold on every path that names a
//! thing, an exact rule is not beaten by a query, a fragment or an escape, a member answers,
//! reports progress on and updates only what is its own, its requests ride only its own
//! requests' streams (naming it) and hold no other member's deadline, and a URI goes to the
//! first member that serves it whether or not the client listed anything. What a member sends
//! that is not its own is dropped and counted.

use std::time::Duration;

use crate::harness::line::{Line, Transport};
use crate::harness::{node_dir, spawn_announcing, stdout_of, Proxy};
use mcp_session_proxy::config::{Config, ServerConfig, VirtualConfig};
use serde_json::{json, Value};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/servers/hostile_member.py"
);
const BANK: &str = "/servers/bank/mcp";

/// How the members are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Members {
    Stdio,
    Http,
}

/// The members' servers where they run on their own (over HTTP), kept for the test's length.
struct Running(Vec<tokio::process::Child>);

/// A member `role` (`good`, `evil`) run with `options`: its `[servers.<role>]`.
async fn member(
    role: &str,
    options: &[&str],
    over: Members,
    running: &mut Running,
) -> ServerConfig {
    let mut server = ServerConfig::default();
    let mut args = vec![SCRIPT, "--role", role];
    args.extend_from_slice(options);
    match over {
        Members::Stdio => {
            let words: Vec<String> = args.iter().map(|a| shell_words::quote(a).into()).collect();
            server.upstream.stdio = Some(format!("python3 {}", words.join(" ")));
            server.upstream.shutdown_grace = Duration::from_millis(500);
        }
        Members::Http => {
            let mut command = tokio::process::Command::new("python3");
            command.args(&args).arg("--http");
            let (child, url, _) = spawn_announcing("a member's URL", &mut command).await;
            running.0.push(child);
            server.upstream.http = Some(url);
        }
    }
    server
}

/// `bank` = [`good`, `evil`]: good's resources under its own rules (`/etc`, a secret file and
/// a secret memo denied), good also at `/servers/good/mcp`; `adjust` last.
async fn bank(
    over: Members,
    good: &[&str],
    evil: &[&str],
    adjust: impl FnOnce(&mut Config),
) -> (Proxy, Running) {
    let mut running = Running(Vec::new());
    let mut good = member("good", good, over, &mut running).await;
    good.resources.deny = vec![
        "file:///etc/*".into(),
        "file:///private/secret".into(),
        "memo://good/secret".into(),
    ];
    let mut evil = member("evil", evil, over, &mut running).await;
    evil.serve = false;
    let proxy = Proxy::start_with(move |c: &mut Config| {
        c.upstream.stdio = None;
        c.servers.insert("good".into(), good);
        c.servers.insert("evil".into(), evil);
        let members = vec!["good".into(), "evil".into()];
        let bank = VirtualConfig {
            servers: members,
            ..VirtualConfig::default()
        };
        c.r#virtual.insert("bank".into(), bank);
        adjust(c);
    })
    .await;
    (proxy, running)
}

fn text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a tool's text: {answer}"))
}

fn call(name: &str, arguments: Value) -> Value {
    json!({ "name": name, "arguments": arguments })
}

fn violations(proxy: &Proxy, kind: &str) -> u64 {
    let name = format!(
        r#"mcp_proxy_virtual_member_violations_total{{server="bank",member="evil",kind="{kind}"}}"#
    );
    proxy.metric(&name)
}

/// Runs `scenario` once per client transport.
macro_rules! on_every_transport {
    ($scenario:ident: $($test:ident => $transport:ident),+) => {
        $(
            #[tokio::test]
            async fn $test() {
                $scenario(Transport::$transport).await;
            }
        )+
    };
}

// ---- 1. A member's own rules, on every path that names a thing ----

/// What `line` gets for each way of naming `uri`: a read, a subscription, a completion of it
/// as a template's reference.
async fn every_path(line: &mut Line, uri: &str) -> [Value; 3] {
    let read = line.request("resources/read", json!({ "uri": uri })).await;
    let subscribed = line
        .request("resources/subscribe", json!({ "uri": uri }))
        .await;
    let completion = json!({ "ref": { "type": "ref/resource", "uri": uri },
                             "argument": { "name": "path", "value": "" } });
    let completed = line.request("completion/complete", completion).await;
    [read, subscribed, completed]
}

async fn a_members_rules_hold_on_every_path(transport: Transport) {
    let (proxy, _running) = bank(Members::Stdio, &[], &[], |_| {}).await;
    for path in ["/servers/good/mcp", BANK] {
        let mut line = Line::open(proxy.addr(), path, transport).await;
        for denied in ["file:///etc/passwd", "memo://good/secret"] {
            for answer in every_path(&mut line, denied).await {
                assert_eq!(
                    answer["error"]["code"], -32002,
                    "{path}, {denied}: {answer}"
                );
            }
        }
        let [read, subscribed, completed] = every_path(&mut line, "file:///home/a.txt").await;
        let contents = &read["result"]["contents"][0]["text"];
        assert_eq!(contents, "good read file:///home/a.txt", "{path}: {read}");
        assert!(subscribed["result"].is_object(), "{path}: {subscribed}");
        let values = &completed["result"]["completion"]["values"];
        assert_eq!(values, &json!(["good-completion"]), "{path}: {completed}");
    }
}

on_every_transport!(a_members_rules_hold_on_every_path:
    a_members_rules_hold_on_every_path_over_streamable_http => StreamableHttp,
    a_members_rules_hold_on_every_path_over_websocket => WebSocket,
    a_members_rules_hold_on_every_path_over_legacy_sse => LegacySse);

// ---- 5. An exact rule is not beaten by a query, a fragment or an escape ----

async fn an_exact_rule_holds_however_the_uri_is_spelled(transport: Transport) {
    let (proxy, _running) = bank(Members::Stdio, &[], &[], |_| {}).await;
    for path in ["/servers/good/mcp", BANK] {
        let mut line = Line::open(proxy.addr(), path, transport).await;
        for spelling in [
            "file:///private/secret",
            "file:///private/secret?",
            "file:///private/secret#x",
            "file:///private/secret?a=1",
            "file:///private/%73ecret",
            "file:///private/x/../secret",
        ] {
            let read = line
                .request("resources/read", json!({ "uri": spelling }))
                .await;
            assert_eq!(read["error"]["code"], -32002, "{path}, {spelling}: {read}");
        }
        let read = line
            .request(
                "resources/read",
                json!({ "uri": "file:///private/secrets" }),
            )
            .await;
        assert!(read["result"].is_object(), "{path}: another file: {read}");
    }
}

on_every_transport!(an_exact_rule_holds_however_the_uri_is_spelled:
    an_exact_rule_holds_however_the_uri_is_spelled_over_streamable_http => StreamableHttp,
    an_exact_rule_holds_however_the_uri_is_spelled_over_websocket => WebSocket,
    an_exact_rule_holds_however_the_uri_is_spelled_over_legacy_sse => LegacySse);

// ---- 2. A member answers, and reports progress on, only what it was sent ----

/// Good's `balance` in flight (its progress seen); evil forges answers to every id it can
/// guess (small integers, other members' tagged ids, the virtual server's own) and progress on
/// every token; good's call still ends with good's answer and good's progress alone.
async fn forged_answers_and_progress_are_dropped(transport: Transport, over: Members) {
    let (proxy, _running) = bank(over, &[], &[], |_| {}).await;
    let mut line = Line::open(proxy.addr(), BANK, transport).await;
    let mut arguments = call("good__balance", json!({ "delay_ms": 1500 }));
    arguments["_meta"] = json!({ "progressToken": "good-progress" });
    let balance = line.start("tools/call", arguments).await;
    let progress = line.next_for(&balance).await;
    assert_eq!(progress["params"]["progress"], 1, "good's own: {progress}");

    let mut tokens: Vec<Value> = (0..40).map(Value::from).collect();
    tokens.extend([json!("good-progress"), json!("r1"), json!("r2")]);
    let forged = line
        .request(
            "tools/call",
            call("evil__forge_progress", json!({ "tokens": tokens })),
        )
        .await;
    assert_eq!(text(&forged), "forged");
    let mut ids: Vec<Value> = (0..40).map(Value::from).collect();
    for n in 0..5 {
        ids.extend([
            json!(format!("0~{n}")),
            json!(format!("virtual-server/{n}")),
        ]);
    }
    let forged = line
        .request(
            "tools/call",
            call("evil__forge_answers", json!({ "ids": ids })),
        )
        .await;
    assert_eq!(text(&forged), "forged");

    let (before, answer) = line.until_answer(&balance).await;
    assert_eq!(
        text(&answer),
        "balance: 100",
        "{transport:?}, {over:?}: {answer}"
    );
    let everything = [before.as_slice(), line.read_so_far()].concat();
    assert!(
        !everything
            .iter()
            .any(|m| m.to_string().contains("forged by evil")),
        "{transport:?}, {over:?}: nothing of evil's forging reaches the client: {everything:?}"
    );
    assert!(violations(&proxy, "answer") >= 1);
    assert!(violations(&proxy, "progress") >= 1);
    // The session goes on, both members with it.
    let again = line
        .request("tools/call", call("good__balance", json!({})))
        .await;
    assert_eq!(text(&again), "balance: 100");
}

#[tokio::test]
async fn forged_answers_and_progress_are_dropped_over_streamable_http() {
    forged_answers_and_progress_are_dropped(Transport::StreamableHttp, Members::Stdio).await;
}

#[tokio::test]
async fn forged_answers_and_progress_are_dropped_over_websocket() {
    forged_answers_and_progress_are_dropped(Transport::WebSocket, Members::Stdio).await;
}

#[tokio::test]
async fn forged_answers_and_progress_are_dropped_over_legacy_sse() {
    forged_answers_and_progress_are_dropped(Transport::LegacySse, Members::Stdio).await;
}

#[tokio::test]
async fn forged_answers_and_progress_of_http_members_are_dropped() {
    forged_answers_and_progress_are_dropped(Transport::StreamableHttp, Members::Http).await;
}

/// Evil answers the virtual server's own `tools/list` of good (its neighbour's id) with a list
/// of its own making, before good (300 ms late) answers: good's tools are good's.
async fn a_forged_list_is_not_taken_for_anothers(transport: Transport) {
    let (proxy, _running) = bank(
        Members::Stdio,
        &["--list-delay-ms", "300"],
        &["--forge-own"],
        |_| {},
    )
    .await;
    let mut line = Line::open(proxy.addr(), BANK, transport).await;
    let listed = line.request("tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let balance = tools.iter().find(|t| t["name"] == "good__balance");
    let balance = balance.unwrap_or_else(|| panic!("good's balance: {listed}"));
    assert_eq!(balance["description"], "The account's balance.", "{listed}");
    assert!(tools.iter().any(|t| t["name"] == "evil__exfiltrate"));
    assert!(violations(&proxy, "answer") >= 1);
}

on_every_transport!(a_forged_list_is_not_taken_for_anothers:
    a_forged_list_is_not_taken_for_anothers_over_streamable_http => StreamableHttp,
    a_forged_list_is_not_taken_for_anothers_over_websocket => WebSocket,
    a_forged_list_is_not_taken_for_anothers_over_legacy_sse => LegacySse);

/// Evil says that good's subscribed resource changed, then that its own did: only its own
/// reaches the client; good's own word still does.
async fn a_member_updates_only_its_own_subscriptions(transport: Transport) {
    let (proxy, _running) = bank(Members::Stdio, &[], &[], |_| {}).await;
    let mut line = Line::open(proxy.addr(), BANK, transport).await;
    for uri in ["memo://good/notes", "memo://evil/x"] {
        let subscribed = line
            .request("resources/subscribe", json!({ "uri": uri }))
            .await;
        assert!(subscribed["result"].is_object(), "{subscribed}");
    }
    let cue = json!({ "uris": ["memo://good/notes"], "then": "memo://evil/x" });
    let forged = line
        .request("tools/call", call("evil__forge_update", cue))
        .await;
    assert_eq!(text(&forged), "forged");
    let updated = |m: &Value| m["method"] == "notifications/resources/updated";
    let first = line.server_message(updated).await;
    assert_eq!(
        first["params"]["uri"], "memo://evil/x",
        "{transport:?}: {first}"
    );
    assert_eq!(violations(&proxy, "update"), 1);
    let touched = line
        .request(
            "tools/call",
            call("good__touch", json!({ "uri": "memo://good/notes" })),
        )
        .await;
    assert_eq!(text(&touched), "touched");
    let next = line.server_message(updated).await;
    assert_eq!(
        next["params"]["uri"], "memo://good/notes",
        "{transport:?}: {next}"
    );
}

on_every_transport!(a_member_updates_only_its_own_subscriptions:
    a_member_updates_only_its_own_subscriptions_over_streamable_http => StreamableHttp,
    a_member_updates_only_its_own_subscriptions_over_websocket => WebSocket,
    a_member_updates_only_its_own_subscriptions_over_legacy_sse => LegacySse);

// ---- 3. A member's requests ride its own requests, name it, and hold no other's deadline ----

/// Good's `balance` (taking `delay_ms`) in flight, its progress seen, evil asks the client
/// while it has no request of its own in flight: the call's id, and what the client is asked.
async fn evil_asks_during_goods_call(line: &mut Line, delay_ms: u64) -> (Value, Value) {
    let mut arguments = call("good__balance", json!({ "delay_ms": delay_ms }));
    arguments["_meta"] = json!({ "progressToken": "p" });
    let balance = line.start("tools/call", arguments).await;
    line.next_for(&balance).await;
    line.notify("notifications/roots/list_changed", json!({}))
        .await;
    let asked = line
        .server_message(|m| m["method"] == "elicitation/create")
        .await;
    (balance, asked)
}

async fn a_members_request_names_it_and_rides_no_other_members_call(transport: Transport) {
    let (proxy, _running) = bank(Members::Stdio, &[], &[], |_| {}).await;
    let mut line = Line::open(proxy.addr(), BANK, transport).await;
    let (balance, asked) = evil_asks_during_goods_call(&mut line, 1000).await;
    assert_eq!(
        asked["params"]["message"], "evil: Re-enter your bank password",
        "{asked}"
    );
    assert_eq!(asked["params"]["_meta"]["mcp-session-proxy/member"], "evil");
    let (before, answer) = line.until_answer(&balance).await;
    assert_eq!(text(&answer), "balance: 100");
    if transport == Transport::StreamableHttp {
        assert!(
            before.is_empty(),
            "good's call's stream: only good's: {before:?}"
        );
    }
    // The client's answer goes back to evil, and the session goes on.
    let declined =
        json!({ "jsonrpc": "2.0", "id": asked["id"], "result": { "action": "decline" } });
    line.send(declined).await;
    let again = line
        .request("tools/call", call("good__balance", json!({})))
        .await;
    assert_eq!(text(&again), "balance: 100");
}

on_every_transport!(a_members_request_names_it_and_rides_no_other_members_call:
    a_members_request_names_it_and_rides_no_other_members_call_over_streamable_http => StreamableHttp,
    a_members_request_names_it_and_rides_no_other_members_call_over_websocket => WebSocket,
    a_members_request_names_it_and_rides_no_other_members_call_over_legacy_sse => LegacySse);

/// Evil's question, left unanswered, holds no deadline but its own: good's silent call still
/// fails when its server stays silent past the request timeout.
async fn a_members_question_holds_no_other_members_deadline(transport: Transport) {
    let (proxy, _running) = bank(Members::Stdio, &[], &[], |c| {
        for server in c.servers.values_mut() {
            server.upstream.request_timeout = Duration::from_secs(1);
        }
    })
    .await;
    let mut line = Line::open(proxy.addr(), BANK, transport).await;
    let (balance, _) = evil_asks_during_goods_call(&mut line, 60000).await;
    let answer = line.answer(&balance).await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("did not answer"),
        "{transport:?}: {answer}"
    );
}

on_every_transport!(a_members_question_holds_no_other_members_deadline:
    a_members_question_holds_no_other_members_deadline_over_streamable_http => StreamableHttp,
    a_members_question_holds_no_other_members_deadline_over_websocket => WebSocket,
    a_members_question_holds_no_other_members_deadline_over_legacy_sse => LegacySse);

// ---- 4. A URI goes to the first member that serves it, listed or not ----

/// The text `line` reads at `uri`.
async fn read_text(line: &mut Line, uri: &str) -> String {
    let answer = line.request("resources/read", json!({ "uri": uri })).await;
    let text = answer["result"]["contents"][0]["text"].as_str();
    text.unwrap_or_else(|| panic!("{uri}: {answer}")).to_owned()
}

async fn a_uri_goes_to_the_first_member_that_serves_it(transport: Transport) {
    let (proxy, _running) = bank(Members::Stdio, &[], &[], |_| {}).await;
    let mut line = Line::open(proxy.addr(), BANK, transport).await;
    // Good's template matches what evil lists plainly: good, first in `servers`, serves it.
    let notes = "file:///home/notes.txt";
    assert_eq!(
        read_text(&mut line, notes).await,
        format!("good read {notes}")
    );
    let listed = line.request("resources/list", json!({})).await;
    let uris: Vec<&str> = listed["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert!(
        uris.contains(&notes) && uris.contains(&"memo://good/notes"),
        "{uris:?}"
    );
    assert!(
        !uris.contains(&"memo://good/secret"),
        "what good lists, hidden or not, is good's: {uris:?}"
    );
    assert_eq!(
        read_text(&mut line, notes).await,
        format!("good read {notes}"),
        "after the list too"
    );
    assert_eq!(
        read_text(&mut line, "memo://evil/x").await,
        "evil read memo://evil/x"
    );
    // Evil's template matches every URI: good's, however spelled, are still good's.
    for spelling in [
        "MEMO://good/notes",
        "memo://good/%6Eotes",
        "memo://good/./notes",
        "memo://good/notes#x",
    ] {
        let read = read_text(&mut line, spelling).await;
        assert_eq!(read, format!("good read {spelling}"), "{transport:?}");
    }
}

on_every_transport!(a_uri_goes_to_the_first_member_that_serves_it:
    a_uri_goes_to_the_first_member_that_serves_it_over_streamable_http => StreamableHttp,
    a_uri_goes_to_the_first_member_that_serves_it_over_websocket => WebSocket,
    a_uri_goes_to_the_first_member_that_serves_it_over_legacy_sse => LegacySse);

// ---- The official TypeScript client as the victim ----

#[tokio::test]
async fn the_official_typescript_client_sees_each_member_as_itself() {
    let (proxy, _running) = bank(
        Members::Stdio,
        &["--list-delay-ms", "300"],
        &["--forge-own"],
        |_| {},
    )
    .await;
    let url = format!("http://{}{BANK}", proxy.addr());
    let node = node_dir();
    let mut command = tokio::process::Command::new("node");
    command
        .arg(node.join("hostile_member_client.mjs"))
        .arg(&url)
        .current_dir(&node);
    let stdout = stdout_of("the TypeScript client of the virtual server", &mut command).await;
    let report: Value = serde_json::from_slice(&stdout).expect("a JSON report");
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["description"], "The account's balance.", "{report}");
    assert_eq!(report["balance"], "balance: 100", "{report}");
    assert_eq!(
        report["progress"],
        json!([1]),
        "good's progress alone: {report}"
    );
    let asked = &report["elicitation"];
    assert_eq!(
        asked["message"], "evil: Re-enter your bank password",
        "{report}"
    );
    assert_eq!(
        asked["_meta"]["mcp-session-proxy/member"], "evil",
        "{report}"
    );
    assert!(violations(&proxy, "answer") >= 1);
    assert!(violations(&proxy, "progress") >= 1);
}

// ---- A member holds up, and asks, nothing it may not ----

/// Evil stops reading its stdin, and the client sends it more than its pipe and queue hold:
/// good's call is answered all the same, on the same connection (a WebSocket connection, or
/// the 2024-11-05 pair, whose messages a session takes in order; each Streamable HTTP POST is
/// a request of its own).
async fn a_member_that_stops_reading_holds_up_no_other(transport: Transport) {
    let (proxy, _running) = bank(Members::Stdio, &[], &[], |_| {}).await;
    let mut line = Line::open(proxy.addr(), BANK, transport).await;
    let stopped = line
        .request("tools/call", call("evil__stop_reading", json!({})))
        .await;
    assert_eq!(text(&stopped), "no longer reading");
    let padding = "x".repeat(4096);
    for _ in 0..200 {
        let arguments = json!({ "padding": padding });
        line.start("tools/call", call("evil__exfiltrate", arguments))
            .await;
    }
    let balance = line
        .request("tools/call", call("good__balance", json!({})))
        .await;
    assert_eq!(text(&balance), "balance: 100", "{transport:?}");
}

on_every_transport!(a_member_that_stops_reading_holds_up_no_other:
    a_member_that_stops_reading_holds_up_no_other_over_websocket => WebSocket,
    a_member_that_stops_reading_holds_up_no_other_over_legacy_sse => LegacySse);

/// Evil asks the client for its task store and for a PIN as a task: neither reaches the client;
/// evil is refused (and says so in a log message), and counted.
async fn a_member_asks_only_what_a_server_may(transport: Transport) {
    let (proxy, _running) = bank(Members::Stdio, &[], &[], |_| {}).await;
    let mut line = Line::open(proxy.addr(), BANK, transport).await;
    let id = line
        .start("tools/call", call("evil__ask_tasks", json!({})))
        .await;
    // Evil's log messages come on the call's own stream while it is in flight (over
    // Streamable HTTP, its POST stream), or after it on the session's stream.
    let (during, asked) = line.until_answer(&id).await;
    assert_eq!(text(&asked), "asked");
    for refused in ["evil-tasks", "evil-task"] {
        let about = |m: &Value| {
            m["method"] == "notifications/message"
                && m["params"]["data"]["answered"]["id"] == refused
        };
        let said = match during.iter().find(|m| about(m)) {
            Some(said) => said.clone(),
            None => line.server_message(about).await,
        };
        let error = &said["params"]["data"]["answered"]["error"];
        assert_eq!(error["code"], -32601, "{transport:?}: {said}");
    }
    let asked_the_client = line
        .read_so_far()
        .iter()
        .chain(&during)
        .any(|m| m["method"] == "tasks/list" || m["method"] == "elicitation/create");
    assert!(!asked_the_client, "{transport:?}: {:?}", line.read_so_far());
    assert_eq!(violations(&proxy, "request"), 2);
}

on_every_transport!(a_member_asks_only_what_a_server_may:
    a_member_asks_only_what_a_server_may_over_streamable_http => StreamableHttp,
    a_member_asks_only_what_a_server_may_over_websocket => WebSocket,
    a_member_asks_only_what_a_server_may_over_legacy_sse => LegacySse);
