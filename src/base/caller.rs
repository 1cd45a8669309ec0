//! Who a request acts for, and what its server may get of the client's credential: made once,
//! where the front admits the request, and carried with it (a request extension), so that every
//! layer takes the two together and none reads them again from the request's headers.

use http::HeaderValue;

use super::ids::Principal;

/// A request's principal and the credential its server may get (the client's `Authorization`
/// as the front made it for the server: forwarded, exchanged, or none).
#[derive(Clone)]
pub struct Caller {
    principal: Principal,
    credential: Option<HeaderValue>,
}

impl Caller {
    pub fn new(principal: Principal, credential: Option<HeaderValue>) -> Caller {
        Caller {
            principal,
            credential,
        }
    }

    /// The proxy acting for `principal` without a request of its (a session taken over for
    /// the replica that restarted under its name).
    pub fn without_credential(principal: Principal) -> Caller {
        Caller::new(principal, None)
    }

    /// A client without a credential.
    pub fn anonymous() -> Caller {
        Caller::without_credential(Principal::anonymous())
    }

    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    pub fn credential(&self) -> Option<&HeaderValue> {
        self.credential.as_ref()
    }
}

/// The credential is never printed.
impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("principal", &self.principal)
            .field("credential", &self.credential.as_ref().map(|_| "…"))
            .finish()
    }
}
