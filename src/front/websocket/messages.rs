//! What one client message on a WebSocket does: `session/start|resume|end` bind, resume or end
//! the connection's session; anything else goes to it (opened by the first message), or to a
//! data-layer session or handle the message names.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use tracing::debug;

use super::connection::payloads;
use super::{Bound, Connection};
use crate::front::data_layer::legacy::{self, Routed};
use crate::front::data_layer::messages_listen;
use crate::front::rejection::{failed_request, Rejection};
use crate::front::session_methods;
use crate::front::telemetry::Telemetry;
use crate::front::traced;
use crate::session::log::StreamKey;
use crate::session::protocol::{self, is_session_method};
use crate::session::{Session, Shape};
use crate::wire::jsonrpc::{id_key, Kind, Message};

impl Connection {
    /// One client message; returns what to send back at once (before any further delivery).
    pub(super) async fn on_message(&mut self, text: Bytes) -> Vec<Bytes> {
        let message = match session_methods::parse(text) {
            Ok(message) => message,
            Err(error) => return vec![Rejection::from(error).error_body()],
        };
        // Under the principal's rates before anything is started for the request.
        if let Err(error) = self
            .app
            .registry
            .admit(self.caller.principal(), &message)
            .await
        {
            return vec![Rejection::session(&error)
                .with_id(message.id())
                .error_body()];
        }
        let outcome = match message.method().filter(|_| message.kind() == Kind::Request) {
            Some(protocol::START) => self.start(&message).await,
            Some(protocol::RESUME) => self.resume(&message).await,
            Some(protocol::END) => self.end(&message).await,
            Some(method) if is_session_method(method) => {
                Err(Rejection::unknown_session_method(&message))
            }
            _ => self.forward(message).await,
        };
        outcome.unwrap_or_else(|rejection| vec![rejection.error_body()])
    }

    async fn start(&mut self, message: &Message) -> Result<Vec<Bytes>, Rejection> {
        let id = message.id().cloned().unwrap_or(Value::Null);
        match &mut self.bound {
            Some(bound) if !bound.own => Err(Rejection::conflict(format!(
                "this connection already carries session {}; open another connection for another session",
                bound.session.id()
            ))
            .with_id(Some(&id))),
            // The connection's own session becomes a protocol-level one: it now outlives the
            // connection and numbers its events from here on.
            Some(bound) => {
                bound.session.number_events();
                bound.own = false;
                bound.session.store_synced().await;
                Ok(vec![session_methods::started(&id, &bound.session)])
            }
            None => {
                let session = session_methods::start(&self.app, &self.caller)
                        .await
                        .map_err(|r| r.with_id(Some(&id)))?;
                let reader = session.attach(StreamKey::Standalone, None);
                let reply = session_methods::started(&id, &session);
                self.bound = Some(Bound {
                    session,
                    reader,
                    own: false,
                });
                Ok(vec![reply])
            }
        }
    }

    async fn resume(&mut self, message: &Message) -> Result<Vec<Bytes>, Rejection> {
        let id = message.id().cloned().unwrap_or(Value::Null);
        if let Some(bound) = &self.bound {
            return Err(Rejection::conflict(format!(
                "this connection already carries session {}; resume on a new connection",
                bound.session.id()
            ))
            .with_id(Some(&id)));
        }
        let (session_id, last) =
            session_methods::resume_params(message).map_err(|r| r.with_id(Some(&id)))?;
        let (session, resumed) = session_methods::resume(
            &self.app,
            &self.caller,
            &session_id,
            last,
            traced::context_of(message),
        )
        .await
        .map_err(|r| r.with_id(Some(&id)))?;
        let mut replies = vec![session_methods::resumed(&id, resumed.catchup)];
        if let Some(first) = &resumed.first {
            replies.extend(payloads(first));
        }
        self.bound = Some(Bound {
            session,
            reader: resumed.reader,
            own: false,
        });
        Ok(replies)
    }

    async fn end(&mut self, message: &Message) -> Result<Vec<Bytes>, Rejection> {
        let id = message.id().cloned().unwrap_or(Value::Null);
        let session_id = session_methods::end_params(message).map_err(|r| r.with_id(Some(&id)))?;
        session_methods::find(&self.app, &self.caller, &session_id)
            .await
            .map_err(|r| r.with_id(Some(&id)))?;
        // Stop reading first: nothing of the session may follow the answer.
        if self
            .bound
            .as_ref()
            .is_some_and(|bound| bound.session.id() == session_id)
        {
            self.bound = None;
        }
        session_methods::end(&self.app, &self.caller, &session_id)
            .await
            .map_err(|r| r.with_id(Some(&id)))?;
        Ok(vec![session_methods::ended(&id)])
    }

    /// Any other message goes to the connection's session, opened now if it has none.
    async fn forward(&mut self, mut message: Message) -> Result<Vec<Bytes>, Rejection> {
        let app = self.app.clone();
        let mut telemetry = Telemetry::message(&app, &mut message);
        telemetry.set("mcp_proxy.era", "legacy");
        let outcome = self.forward_message(message).await;
        if let Some(bound) = &self.bound {
            telemetry.set_with("mcp.session.id", || {
                crate::telemetry::redact::session(bound.session.id()).to_string()
            });
        }
        telemetry.end_message(&outcome);
        outcome
    }

    async fn forward_message(&mut self, message: Message) -> Result<Vec<Bytes>, Rejection> {
        let id = message.id().cloned();
        if self.bound.is_none() {
            let session = self
                .app
                .registry
                .create(&self.caller, Shape::SingleStream)
                .await
                .map_err(|e| Rejection::session(&e).with_id(id.as_ref()))?;
            let reader = session.attach(StreamKey::Standalone, None);
            self.bound = Some(Bound {
                session,
                reader,
                own: true,
            });
        }
        let Some(bound) = &self.bound else {
            return Ok(Vec::new());
        };
        let transport = bound.session.clone();
        let (session, message) = match self.named(&transport, message).await? {
            Named::Done(replies) => return Ok(replies),
            Named::To(session, message) => (session, message),
        };
        let kind = message.kind();
        let outcome = self.app.registry.deliver(&session, message).await;
        match (outcome.map(|_| ()), kind) {
            (Err(error), Kind::Request) => Ok(vec![failed_request(
                id.as_ref().unwrap_or(&Value::Null),
                &error,
            )]),
            (Err(error), _) => {
                debug!(%error, "a client message could not be forwarded");
                Ok(Vec::new())
            }
            (Ok(()), _) => Ok(Vec::new()),
        }
    }
}

/// Where a message of the connection goes, once sessions named in messages had their say.
enum Named {
    /// Taken care of: these go back at once (the rest follows on `Connection::named`).
    Done(Vec<Bytes>),
    /// To this session, as this message.
    To(Arc<Session>, Message),
}

impl Connection {
    /// A request naming a data-layer session or a handle (or a `sessions/*` call, a listen) is
    /// answered or relayed here; an answer to a named session's question goes to it.
    async fn named(
        &mut self,
        transport: &Arc<Session>,
        message: Message,
    ) -> Result<Named, Rejection> {
        let app = &self.app;
        match message.kind() {
            Kind::Request if !legacy::may_name_session(app, &message) => {
                Ok(Named::To(transport.clone(), message))
            }
            Kind::Request => {
                let routed = legacy::route(app, &self.caller, transport, message).await?;
                match routed {
                    Routed::Answered(answer) => Ok(Named::Done(vec![answer])),
                    Routed::Listen { session, scope, id } => {
                        messages_listen::relay(app, session, id, scope, self.named.clone());
                        Ok(Named::Done(Vec::new()))
                    }
                    Routed::To(session, message) => {
                        let (app, out) = (app.clone(), self.named.clone());
                        tokio::spawn(async move {
                            legacy::relay_call(&app, session, message, out).await
                        });
                        Ok(Named::Done(Vec::new()))
                    }
                    Routed::Transport(message) => Ok(Named::To(transport.clone(), message)),
                    Routed::ToolsList(message) => {
                        // The answer comes on the connection's one stream: rewritten there.
                        if let Some(id) = message.id() {
                            self.lists.insert(id_key(id));
                        }
                        Ok(Named::To(transport.clone(), message))
                    }
                }
            }
            Kind::Response if !message.id().is_some_and(|id| transport.awaits_answer(id)) => {
                let id = message.id().cloned().unwrap_or(Value::Null);
                let named = app
                    .data_layer
                    .awaiting_answer(&app.registry, &self.caller, &id)
                    .await;
                Ok(Named::To(
                    named.unwrap_or_else(|| transport.clone()),
                    message,
                ))
            }
            _ => Ok(Named::To(transport.clone(), message)),
        }
    }
}
