//! `sessions/create` and `sessions/delete` (and the earlier drafts' `session/create` and
//! `session/delete`), the same for both eras: the result object, which each front wraps in its
//! own response.

use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::cookie::{Cookie, DRAFT_META_KEY};
use crate::base::caller::Caller;
use crate::front::rejection::Rejection;
use crate::front::App;
use crate::session::data_layer::{LayerKind, META_KEY};

pub use crate::wire::methods::NamedVerb as Verb;

/// `sessions/create`: a new data-layer session, its metadata in the result (and in `_meta`,
/// under the draft's key too when asked the draft's way).
pub async fn create(
    app: &App,
    caller: &Caller,
    draft: bool,
    init: Value,
) -> Result<Value, Rejection> {
    let named = super::open(app, caller, LayerKind::Session, init).await?;
    let layer = named.session.layer().expect("just set");
    let expires_at = layer.expires_at(Instant::now());
    let metadata = json!({
        "sessionId": named.session.id(),
        "expiresAt": expires_at,
        "state": layer.state,
    });
    let mut meta = Map::new();
    meta.insert(META_KEY.into(), metadata.clone());
    if draft {
        meta.insert(
            DRAFT_META_KEY.into(),
            json!({ "id": named.session.id(), "expiry": expires_at }),
        );
    }
    Ok(json!({ "session": metadata, "_meta": meta }))
}

/// `sessions/delete`: ends the session the cookie names (the draft: or `params.id`); the
/// result revokes the cookie (`null`).
pub async fn delete(
    app: &App,
    caller: &Caller,
    cookie: Option<Cookie>,
    params: &Value,
) -> Result<Value, Rejection> {
    let named = match (&cookie, params.get("id").and_then(Value::as_str)) {
        (Some(cookie), _) => super::resolve(app, caller, cookie).await?,
        // The earlier drafts name the session in the params.
        (None, Some(id)) => super::resolve_id(app, caller, id, LayerKind::Session).await?,
        (None, None) => return Err(Rejection::data_session_not_found("")),
    };
    app.data_layer.close(&app.registry, named);
    Ok(json!({ "_meta": { META_KEY: null } }))
}
