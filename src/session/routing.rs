//! Which stream a server→client message belongs to, and what it may be coalesced with
//! (DESIGN "Which stream a server message goes to"; PROTOCOL "what may be coalesced").
//! Pure: looks at one message; the session resolves the answer against its state.

use serde::Deserialize;
use serde_json::Value;

use crate::wire::jsonrpc::{id_key, Kind, Message};
use crate::wire::methods;

/// Where a server message goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Destination {
    /// A response: the stream of the request with this (upstream) id.
    Response(String),
    /// Progress: the stream of the request that carried this token (key form).
    Progress(String),
    /// Server requests, logging and cancellations: the stream of the request that caused them.
    Related,
    /// Session-wide: the standalone stream.
    SessionWide,
}

/// How a message is filed: its route and, when only the latest one matters, a coalesce key.
#[derive(Debug, PartialEq, Eq)]
pub struct Filing {
    pub route: Destination,
    pub coalesce: Option<String>,
}

#[derive(Deserialize)]
struct Uri {
    uri: String,
}

#[derive(Deserialize)]
struct Progress {
    #[serde(rename = "progressToken")]
    token: Value,
}

#[derive(Deserialize)]
struct TaskStatus {
    #[serde(rename = "taskId")]
    task_id: Value,
}

/// Files one server message. `coalesce_progress` lets a newer progress notification replace
/// an undelivered older one of the same token.
pub fn file(message: &Message, coalesce_progress: bool) -> Filing {
    let method = match message.kind() {
        Kind::Response => {
            let id = message.id().map(id_key).unwrap_or_default();
            return filing(Destination::Response(id), None);
        }
        Kind::Request => return filing(Destination::Related, None),
        Kind::Notification => message.method().unwrap_or_default(),
    };
    match method {
        methods::PROGRESS => match message.params_as::<Progress>() {
            Some(p) => {
                let token = id_key(&p.token);
                let key = coalesce_progress.then(|| format!("progress {token}"));
                filing(Destination::Progress(token), key)
            }
            None => filing(Destination::SessionWide, None),
        },
        methods::MESSAGE | methods::CANCELLED => filing(Destination::Related, None),
        methods::RESOURCES_UPDATED => {
            let key = message
                .params_as::<Uri>()
                .map(|p| format!("{method} {}", p.uri));
            filing(Destination::SessionWide, key)
        }
        methods::TASKS_STATUS => {
            let key = message
                .params_as::<TaskStatus>()
                .map(|p| format!("{method} {}", p.task_id));
            filing(Destination::SessionWide, key)
        }
        m if m.ends_with("/list_changed") => filing(Destination::SessionWide, Some(m.to_owned())),
        _ => filing(Destination::SessionWide, None),
    }
}

fn filing(route: Destination, coalesce: Option<String>) -> Filing {
    Filing { route, coalesce }
}

/// The `_meta.progressToken` of a client request, in key form.
pub fn progress_token(request: &Message) -> Option<String> {
    #[derive(Deserialize)]
    struct Params {
        #[serde(rename = "_meta")]
        meta: Option<Meta>,
    }
    #[derive(Deserialize)]
    struct Meta {
        #[serde(rename = "progressToken")]
        progress_token: Option<Value>,
    }
    let params: Params = request.params_as()?;
    params.meta?.progress_token.as_ref().map(id_key)
}

/// The `uri` a message's params name (`resources/read`, `subscribe`, `unsubscribe`,
/// `notifications/resources/updated`).
pub fn resource_uri(request: &Message) -> Option<String> {
    request.params_as::<Uri>().map(|p| p.uri)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn msg(text: &str) -> Message {
        Message::parse(Bytes::from(text.to_owned())).unwrap()
    }

    #[test]
    fn files_each_kind_of_server_message() {
        let cases = [
            (
                r#"{"jsonrpc":"2.0","id":4,"result":{}}"#,
                Destination::Response("4".into()),
                None,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}"#,
                Destination::Progress("\"t\"".into()),
                None,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{}}"#,
                Destination::Related,
                None,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":1}}"#,
                Destination::Related,
                None,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a://b"}}"#,
                Destination::SessionWide,
                Some("notifications/resources/updated a://b"),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
                Destination::SessionWide,
                Some("notifications/tools/list_changed"),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/other"}"#,
                Destination::SessionWide,
                None,
            ),
        ];
        for (text, route, key) in cases {
            let filing = file(&msg(text), false);
            assert_eq!(filing.route, route, "{text}");
            assert_eq!(filing.coalesce.as_deref(), key, "{text}");
        }
    }

    #[test]
    fn progress_coalesces_only_when_asked() {
        let m = msg(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":1}}"#,
        );
        assert_eq!(file(&m, true).coalesce.as_deref(), Some("progress 7"));
    }

    #[test]
    fn reads_progress_tokens_and_resource_uris() {
        let m = msg(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"p1"}}}"#,
        );
        assert_eq!(progress_token(&m).as_deref(), Some("\"p1\""));
        let m = msg(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#);
        assert_eq!(progress_token(&m), None);
        let m = msg(
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"demo://x"}}"#,
        );
        assert_eq!(resource_uri(&m).as_deref(), Some("demo://x"));
    }
}
