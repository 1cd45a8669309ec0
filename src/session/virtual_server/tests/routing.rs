//! Routing and merged answers within their bounds: a list that never ends, a member that never
//! lists, answers past a member's share of the window, an `initialize` that cannot be used, a
//! route that waits, a member passed over for a while.

use std::time::Duration;

use serde_json::{json, Value};

use super::{files, initialized, member, member_initialized, plain, request, session, tool_names};
use crate::upstream::virtual_server::VirtualSession;
use crate::wire::jsonrpc::Message;

#[tokio::test(start_paused = true)]
async fn a_member_whose_list_never_ends_is_read_to_a_bound_and_gives_no_uri_to_those_after_it() {
    fn endless(method: &str, id: &Value, params: &Value) -> Vec<Message> {
        let page = params["cursor"]
            .as_str()
            .unwrap_or("0")
            .parse::<u64>()
            .unwrap_or(0);
        match method {
            "resources/list" => vec![Message::response(
                id,
                json!({ "resources": [{ "uri": format!("memo://{page}") }],
                        "nextCursor": (page + 1).to_string() }),
            )],
            _ => vec![Message::response(id, json!({}))],
        }
    }
    // Before it: served. After it: what it might list is not given to a member after it.
    let (members, heard) = session(vec![member("files", files), member("endless", endless)]).await;
    members
        .send(request(2, "resources/read", json!({ "uri": "file:///a" })))
        .await
        .unwrap();
    let answer = heard.answer(2).await;
    assert_eq!(
        answer["result"]["contents"][0]["uri"], "file:///a",
        "{answer}"
    );
    members
        .send(request(3, "resources/read", json!({ "uri": "memo://99" })))
        .await
        .unwrap();
    assert!(
        heard.answer(3).await["result"].is_object(),
        "within the 100 pages read"
    );
    members
        .send(request(4, "resources/read", json!({ "uri": "memo://100" })))
        .await
        .unwrap();
    assert_eq!(
        heard.answer(4).await["error"]["code"],
        -32603,
        "past them: not known"
    );
    let (members, heard) = session(vec![member("endless", endless), member("files", files)]).await;
    members
        .send(request(2, "resources/read", json!({ "uri": "file:///a" })))
        .await
        .unwrap();
    let refused = heard.answer(2).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "endless (a member of this virtual server): its resources could not be read in full"
        ),
        "{refused}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_members_answer_past_its_share_of_the_window_is_left_out_and_the_others_are_answered() {
    // Half the default window (1 MiB), shared by two: 256 KiB each.
    fn huge(method: &str, id: &Value, _: &Value) -> Vec<Message> {
        let big = "x".repeat(300 << 10);
        match method {
            "tools/list" => vec![Message::response(
                id,
                json!({ "tools": [{ "name": "big", "description": big }] }),
            )],
            _ => vec![Message::response(id, json!({ "nextCursor": big }))],
        }
    }
    let (members, heard) = session(vec![member("a", plain), member("huge", huge)]).await;
    members
        .send(request(2, "tools/list", json!({})))
        .await
        .unwrap();
    assert_eq!(tool_names(&heard.answer(2).await), ["a__real"]);

    // Under its share as it came, past it as it is written again.
    fn numbers(method: &str, id: &Value, _: &Value) -> Vec<Message> {
        match method {
            "tools/list" => {
                let numbers = format!("[{}1e15]", "1e15,".repeat(50_000));
                let text = format!(
                    r#"{{"tools":[{{"name":"n","inputSchema":{{"type":"object","default":{numbers}}}}}]}}"#
                );
                let result: Box<serde_json::value::RawValue> = serde_json::from_str(&text).unwrap();
                let answer = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{}}}"#, result.get());
                vec![Message::parse(answer.into()).unwrap()]
            }
            _ => vec![Message::response(id, json!({}))],
        }
    }
    let (members, heard) = session(vec![member("a", plain), member("numbers", numbers)]).await;
    members
        .send(request(2, "tools/list", json!({})))
        .await
        .unwrap();
    assert_eq!(tool_names(&heard.answer(2).await), ["a__real"]);

    let mut huge_instructions = initialized("huge");
    huge_instructions["instructions"] = Value::from("y".repeat(300 << 10));
    let huge = member_initialized("huge", huge_instructions, plain);
    let (_, heard) = session(vec![member("a", plain), huge]).await;
    let answer = heard.answer(1).await;
    assert_eq!(answer["result"]["instructions"], "a: a", "{answer:.200}");
}

#[tokio::test(start_paused = true)]
async fn a_member_whose_initialize_cannot_be_used_is_down_and_what_a_client_cannot_read_left_out() {
    let bogus = json!({ "protocolVersion": "0000-bogus", "capabilities": {},
                        "serverInfo": { "name": "bogus", "version": "1" } });
    let odd = json!({ "protocolVersion": "2024-11-05",
                      "capabilities": { "experimental": 5, "sampling": "x" },
                      "serverInfo": { "name": "odd", "version": "1" } });
    let members = vec![
        member("a", plain),
        member_initialized("bogus", bogus, plain),
        member_initialized("odd", odd, plain),
    ];
    let (_, heard) = session(members).await;
    let answer = heard.answer(1).await;
    assert_eq!(
        answer["result"]["protocolVersion"], "2024-11-05",
        "odd's: {answer}"
    );
    assert!(
        answer["result"]["capabilities"]["experimental"].is_null(),
        "{answer}"
    );
    assert!(
        answer["result"]["capabilities"]["sampling"].is_null(),
        "{answer}"
    );
    assert_eq!(answer["result"]["instructions"], "a: a", "bogus is down");
}

/// A member that never lists: a read of a URI it might list waits one request timeout at most,
/// on a task of its own, while the session's other messages go on; then it is refused, not
/// given to a member after it.
#[tokio::test(start_paused = true)]
async fn a_member_that_never_lists_holds_up_one_route_one_request_timeout_at_most() {
    fn silent(method: &str, id: &Value, _: &Value) -> Vec<Message> {
        match method {
            "resources/list" | "resources/templates/list" => Vec::new(),
            _ => vec![Message::response(id, json!({}))],
        }
    }
    let (members, heard) = session(vec![member("silent", silent), member("files", files)]).await;
    let started = tokio::time::Instant::now();
    members
        .send(request(2, "resources/read", json!({ "uri": "file:///a" })))
        .await
        .unwrap();
    members.send(request(3, "ping", json!({}))).await.unwrap();
    heard.answer(3).await;
    assert_eq!(started.elapsed(), Duration::ZERO, "ping answered at once");
    assert!(
        heard.find(2).is_none(),
        "the read still waits for the silent member"
    );
    // Its resources unread, what it might list goes to no member after it.
    let refused = heard.answer(2).await;
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert!(
        started.elapsed() <= Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_member_that_leaves_a_list_unanswered_is_passed_over_for_a_while() {
    fn mute(method: &str, id: &Value, _: &Value) -> Vec<Message> {
        match method {
            "tools/list" => Vec::new(),
            _ => vec![Message::response(id, json!({}))],
        }
    }
    let (members, heard) = session(vec![member("a", plain), member("mute", mute)]).await;
    let started = tokio::time::Instant::now();
    members
        .send(request(2, "tools/list", json!({})))
        .await
        .unwrap();
    assert_eq!(tool_names(&heard.answer(2).await), ["a__real"]);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(10),
        "its request timeout"
    );
    let again = tokio::time::Instant::now();
    members
        .send(request(3, "tools/list", json!({})))
        .await
        .unwrap();
    assert_eq!(tool_names(&heard.answer(3).await), ["a__real"]);
    assert_eq!(
        again.elapsed(),
        Duration::ZERO,
        "passed over, not waited for again"
    );
}
