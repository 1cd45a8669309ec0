//! Bringing an upstream to where the session was — a new one after a takeover, or one whose
//! server forgot the session: `initialize` with the client's params (its answer is not the
//! client's; the upstream, holding other traffic meanwhile, is told how it went),
//! `notifications/initialized`, and a `resources/subscribe` per subscription.

use serde_json::json;
use serde_json::value::RawValue;
use tracing::{warn, Instrument};

use super::{Session, SessionError};
use crate::jsonrpc::Message;
use crate::upstream::UpstreamError;

impl Session {
    /// Re-initializes the session's upstream (a no-op for a session never initialized: the
    /// client will).
    pub(crate) async fn reinitialize(&self, init: Option<&str>) -> Result<(), SessionError> {
        let Some(init) = init else {
            return Ok(());
        };
        let params = RawValue::from_string(init.to_owned()).ok();
        let initialized = self.internal_request("initialize", params).await;
        self.upstream.reestablished(initialized.clone());
        initialized?;
        self.upstream
            .send(Message::request(None, "notifications/initialized", None))
            .await?;
        let subscriptions: Vec<String> = self.lock().subscriptions.iter().cloned().collect();
        for uri in subscriptions {
            let params = serde_json::value::to_raw_value(&json!({ "uri": uri })).ok();
            self.internal_request("resources/subscribe", params).await?;
        }
        Ok(())
    }

    /// Its upstream's server forgot the session: re-initializes it in the background.
    pub(in crate::session) fn reestablish(&self) {
        let Some(this) = self.this.upgrade() else {
            return;
        };
        let span = self.span();
        tokio::spawn(
            async move {
                warn!("the upstream server lost the session; re-initializing it");
                let init = this.lock().init.clone();
                let Some(init) = init else {
                    let cause = UpstreamError::NoInitializeParams;
                    warn!(%cause, "re-initializing the upstream failed");
                    this.upstream.reestablished(Err(cause));
                    return;
                };
                if let Err(error) = this.reinitialize(Some(&init)).await {
                    warn!(%error, "re-initializing the upstream failed");
                }
            }
            .instrument(span),
        );
    }
}
