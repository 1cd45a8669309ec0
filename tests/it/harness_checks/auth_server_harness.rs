//! The authorization server the OAuth tests run against (oidc-provider, tests/node/auth_server.mjs)
//! issues, rotates, exchanges and introspects tokens as those tests expect.

use crate::harness::auth_server::{claims_of, header_of, AuthServer};
use serde_json::json;

const RESOURCE: &str = "http://127.0.0.1:9/mcp";

#[tokio::test]
async fn a_client_credentials_token_is_a_jwt_for_its_resource_naming_the_client() {
    let server = AuthServer::start().await;

    let token = server.token("alice", RESOURCE, "mcp:tools").await;

    let header = header_of(&token);
    assert_eq!(header["typ"], "at+jwt");
    assert_eq!(header["alg"], "RS256");
    assert!(header["kid"].is_string(), "{header}");
    let claims = claims_of(&token);
    assert_eq!(
        claims["aud"], RESOURCE,
        "one audience, as a string: {claims}"
    );
    assert_eq!(claims["iss"], server.issuer());
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["client_id"], "alice");
    assert_eq!(claims["scope"], "mcp:tools");
    let lifetime = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
    assert_eq!(lifetime, 300);

    let short = claims_of(&server.token_for("bob", RESOURCE, "mcp:admin", 60).await);
    assert_eq!(short["sub"], "bob");
    assert_eq!(
        short["exp"].as_i64().unwrap() - short["iat"].as_i64().unwrap(),
        60
    );
}

#[tokio::test]
async fn after_a_rotation_tokens_carry_the_new_kid_and_the_jwks_lists_both() {
    let server = AuthServer::start().await;
    let before = header_of(&server.token("alice", RESOURCE, "mcp:tools").await)["kid"].clone();

    let kid = server.rotate().await;

    assert_ne!(before, kid.as_str());
    let after = server.token("alice", RESOURCE, "mcp:tools").await;
    assert_eq!(header_of(&after)["kid"], kid.as_str());
    let signed = server.sign(json!({ "sub": "carol" }), "RS256").await;
    assert_eq!(header_of(&signed)["kid"], kid.as_str());

    let jwks = server.get_json(server.jwks_uri()).await;
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["kid"].as_str().unwrap())
        .collect();
    assert_eq!(kids[0], kid, "the new key first: {kids:?}");
    assert!(kids.contains(&before.as_str().unwrap()), "{kids:?}");
    assert!(
        jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .all(|key| key.get("d").is_none()),
        "public keys only"
    );
    for alg in ["ES256", "EdDSA"] {
        let header = header_of(&server.sign(json!({ "sub": "carol" }), alg).await);
        assert_eq!(header["alg"], alg);
        assert!(kids.contains(&header["kid"].as_str().unwrap()), "{alg}");
    }
    assert_eq!(server.requests().await["jwks"], 1);
}

#[tokio::test]
async fn an_exchanged_token_keeps_the_subject_for_the_requested_audience() {
    let server = AuthServer::start().await;
    let subject = server.token("alice", RESOURCE, "mcp:tools").await;
    let upstream = "http://127.0.0.1:9/upstream";

    let exchanged = server.exchange("proxy", &subject, upstream).await.unwrap();

    let claims = claims_of(&exchanged);
    assert_eq!(claims["aud"], upstream);
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["act"], json!({ "sub": "proxy" }));
    assert_eq!(claims["iss"], server.issuer());
    assert_eq!(header_of(&exchanged)["typ"], "at+jwt");

    let expired = server
        .sign(
            json!({ "iss": server.issuer(), "sub": "alice", "aud": RESOURCE, "exp": 1 }),
            "RS256",
        )
        .await;
    let (status, error) = server
        .exchange("proxy", &expired, upstream)
        .await
        .unwrap_err();
    assert_eq!((status, &error["error"]), (400, &json!("invalid_grant")));
    assert_eq!(server.requests_of("exchange").await, 2);
}

#[tokio::test]
async fn an_opaque_token_is_active_to_the_proxy_s_introspection() {
    let server = AuthServer::start().await;
    let resource = "http://127.0.0.1:9/opaque/mcp";

    let token = server.token("bob", resource, "mcp:tools mcp:admin").await;

    assert_ne!(token.split('.').count(), 3, "not a JWT: {token}");
    let answer = server.introspect("proxy", &token).await;
    assert_eq!(answer["active"], true, "{answer}");
    assert_eq!(answer["client_id"], "bob");
    assert_eq!(answer["sub"], "bob");
    assert_eq!(answer["aud"], resource);
    assert_eq!(answer["scope"], "mcp:tools mcp:admin");
    assert_eq!(answer["iss"], server.issuer());
    assert_eq!(server.introspect("proxy", "unknown").await["active"], false);
    assert_eq!(server.requests().await["introspection"], 2);
}

#[tokio::test]
async fn both_discovery_documents_name_the_jwks_and_the_grants() {
    let server = AuthServer::start().await;

    let oauth = server
        .get_json("/.well-known/oauth-authorization-server")
        .await;
    let openid = server.get_json("/.well-known/openid-configuration").await;

    for document in [&oauth, &openid] {
        assert_eq!(document["issuer"], server.issuer());
        assert_eq!(document["jwks_uri"], format!("{}/jwks", server.issuer()));
        assert_eq!(
            document["token_endpoint"],
            format!("{}/token", server.issuer())
        );
        assert_eq!(
            document["introspection_endpoint"],
            format!("{}/token/introspection", server.issuer())
        );
        let grants = document["grant_types_supported"].as_array().unwrap();
        assert!(grants.contains(&json!("client_credentials")));
        assert!(grants.contains(&json!(crate::harness::auth_server::TOKEN_EXCHANGE)));
        let methods = document["token_endpoint_auth_methods_supported"]
            .as_array()
            .unwrap();
        assert!(methods.contains(&json!("client_secret_basic")));
        assert!(methods.contains(&json!("client_secret_post")));
    }
}

#[tokio::test]
async fn a_server_gone_down_answers_503_everywhere_and_counts_what_it_receives() {
    let server = AuthServer::start().await;
    let discovered = server.requests_of("discovery").await;
    let client = crate::harness::Client::new(server.addr());
    let status = |path: &'static str| {
        let client = client.clone();
        async move {
            crate::harness::within(path, client.send_to(path, http::Method::GET, &[], None))
                .await
                .status
        }
    };

    server.go_down().await;

    assert_eq!(status("/jwks").await, 503);
    assert_eq!(status("/.well-known/openid-configuration").await, 503);
    assert_eq!(server.requests_of("jwks").await, 1);
    assert_eq!(server.requests_of("discovery").await, discovered + 1);
    server.come_up().await;
    assert_eq!(status("/jwks").await, 200);
    assert_eq!(server.requests_of("jwks").await, 2);
}
