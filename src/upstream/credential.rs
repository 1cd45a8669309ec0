//! What an HTTP server gets to authenticate the proxy's requests: a header of the operator's
//! own (`upstream.auth = "static"`), and the client's credential as the front made it for the
//! server (forwarded, passed through or exchanged), the newest one its session's requests
//! brought: read at every request, so a refreshed token reaches the server.

use std::sync::{Arc, RwLock};

use http::{HeaderName, HeaderValue};

/// A session's client credential for its server, shared by the session (which renews it) and
/// its upstream (which sends it); for a virtual server's member, that member's part of its
/// session's (`for_member`).
#[derive(Clone, Default)]
pub struct Credential {
    held: Arc<RwLock<Option<HeaderValue>>>,
    member: Option<Arc<str>>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(…)")
    }
}

impl Credential {
    pub fn new(initial: Option<HeaderValue>) -> Credential {
        Credential {
            held: Arc::new(RwLock::new(initial.map(sensitive))),
            member: None,
        }
    }

    /// What a virtual server's member `member` sends of this (its session's) credential, as
    /// the session renews it: its own part (`auth::members`).
    pub fn for_member(&self, member: &str) -> Credential {
        Credential {
            held: self.held.clone(),
            member: Some(member.into()),
        }
    }

    /// Takes a newer credential; a request without one leaves the last.
    pub fn renew(&self, newer: Option<&HeaderValue>) {
        if let Some(newer) = newer {
            let mut current = self.held.write().unwrap_or_else(|e| e.into_inner());
            if current.as_ref() != Some(newer) {
                *current = Some(sensitive(newer.clone()));
            }
        }
    }

    pub fn current(&self) -> Option<HeaderValue> {
        let held = self
            .held
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()?;
        match &self.member {
            None => Some(held),
            Some(member) => crate::auth::members::of_member(&held, member),
        }
    }
}

fn sensitive(mut value: HeaderValue) -> HeaderValue {
    value.set_sensitive(true);
    value
}

/// A header of the operator's, sent with every request to one server.
#[derive(Clone)]
pub struct StaticHeader {
    pub name: HeaderName,
    pub value: HeaderValue,
}

impl std::fmt::Debug for StaticHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StaticHeader({}: ***)", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_credential_is_sent_and_none_leaves_the_last() {
        let credential = Credential::new(Some(HeaderValue::from_static("Bearer a")));
        credential.renew(None);
        assert_eq!(credential.current().unwrap(), "Bearer a");
        credential.renew(Some(&HeaderValue::from_static("Bearer b")));
        assert_eq!(credential.current().unwrap(), "Bearer b");
        assert!(credential.current().unwrap().is_sensitive());
        assert_eq!(format!("{credential:?}"), "Credential(…)");
    }
}
