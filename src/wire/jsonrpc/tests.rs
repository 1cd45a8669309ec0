//! Unit tests of the JSON-RPC message model: classification, re-encoding, ids, duplicates.

use super::*;

/// Found by the `duplicates` fuzz target (inputs in fuzz/regressions/duplicates/): a
/// duplicate placed after what the walk over names could not read went unchecked, while
/// the message itself parsed (its params skipped as raw JSON, unknown members ignored).
#[test]
fn a_duplicate_behind_what_cannot_be_read_is_refused() {
    let hidden = r#""name":"echo","arguments":{"text":"a","text":"b"}"#;
    let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
    let cases = [
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"big":1e400,{hidden}}}}}"#).into_bytes(),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"deep":{deep},{hidden}}}}}"#).into_bytes(),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"odd":"\ud800",{hidden}}}}}"#).into_bytes(),
        [
            &br#"{"jsonrpc":"2.0","id":1,"x":""#[..],
            &[0xff],
            format!(r#"","method":"tools/call","params":{{{hidden}}}}}"#).as_bytes(),
        ]
        .concat(),
    ];
    for case in cases {
        let text = String::from_utf8_lossy(&case).into_owned();
        for parse in [Message::parse, Message::parse_without_version] {
            let refused = parse(Bytes::from(case.clone())).expect_err(&text);
            assert_eq!(refused.code(), PARSE_ERROR, "{text}: {refused}");
        }
        // What a server's own check reads is not searched (documented), and takes them.
        assert!(
            Message::parse_from_server(Bytes::from(case)).is_ok(),
            "{text}"
        );
    }
    // Deep or large, but within what every name can be checked in: taken.
    let nested = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let fine = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","deep":{nested},"n":1e300}}}}"#
    );
    assert!(Message::parse(Bytes::from(fine)).is_ok());
}

fn parse(s: &str) -> Result<Message, ParseError> {
    Message::parse(Bytes::from(s.to_owned()))
}

#[test]
fn classifies_requests_notifications_and_responses() {
    let m = parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
    assert_eq!(m.kind(), Kind::Request);
    let m = parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
    assert_eq!(m.kind(), Kind::Notification);
    let m = parse(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap();
    assert_eq!(m.kind(), Kind::Response);
    let m = parse(r#"{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"x"}}"#).unwrap();
    assert!(m.is_error());
}

#[test]
fn rejects_what_is_not_json_rpc() {
    assert!(matches!(parse("{nope"), Err(ParseError::Json(_))));
    assert!(matches!(parse(""), Err(ParseError::Json(_))));
    for bad in [
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        r#""hello""#,
        r#"{"id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"x","result":{}}"#,
    ] {
        assert!(
            matches!(parse(bad), Err(ParseError::NotJsonRpc(_))),
            "accepted {bad}"
        );
    }
}

#[test]
fn forwards_unchanged_bytes_and_rewrites_ids_losslessly() {
    let text = r#"{"jsonrpc":"2.0", "id":7,"method":"tools/call","params":{"n":1.50,"s":"é\n"}}"#;
    let mut m = parse(text).unwrap();
    assert_eq!(&m.to_bytes()[..], text.as_bytes());
    m.set_id(Value::from(42));
    assert_eq!(
        &m.to_bytes()[..],
        r#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"n":1.50,"s":"é\n"}}"#
            .as_bytes()
    );
}

#[test]
fn finds_the_top_level_id_in_the_head_of_a_message() {
    let id = |s: &str| top_level_id(s.as_bytes());
    assert_eq!(
        id(r#"{"id":5,"jsonrpc":"2.0","result":{"content":[{"text":"xxxx"#),
        Some(Value::from(5))
    );
    assert_eq!(
        id(r#"{"jsonrpc":"2.0", "id" : "a\"b", "result":"#),
        Some(Value::from("a\"b"))
    );
    assert_eq!(
        id(r#"{"result":{"id":9,"text":"xxxx"#),
        None,
        "nested ids do not count"
    );
    assert_eq!(
        id(r#"{"result":{"x":"\"id\":3"}, "id": 4}"#),
        Some(Value::from(4))
    );
    assert_eq!(
        id(r#"{"jsonrpc":"2.0","method":"m","params":{"id":1"#),
        None
    );
    assert_eq!(id(r#"{"id":12"#), None, "a number cut short is not trusted");
    assert_eq!(id(""), None);
}

#[test]
fn a_number_id_comes_back_as_the_same_number() {
    for id in ["0.1", "180446744077709551615", "-7", "1e300"] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let mut message = Message::parse(Bytes::from(text)).unwrap();
        let original: f64 = id.parse().unwrap();
        let client_id = message.id().cloned().unwrap();
        message.set_id(Value::from(1));
        message.set_id(client_id);
        let again = Message::parse(message.to_bytes()).unwrap();
        assert_eq!(again.id().unwrap().as_f64(), Some(original), "{id}");
    }
}

#[test]
fn error_responses_carry_code_message_and_data() {
    let b = error_response(
        &Value::from("x"),
        INTERNAL_ERROR,
        "gone",
        Some(Value::from(3)),
    );
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["error"]["code"], INTERNAL_ERROR);
    assert_eq!(v["error"]["data"], 3);
    assert_eq!(v["id"], "x");
}
