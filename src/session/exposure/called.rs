//! What a client's request names, held to what its clients may see (`[tools]`, `[prompts]`,
//! `[resources]`): a tool or prompt goes to the server under the server's name, and one not
//! exposed, or a resource not shown, is answered here, never sent. A completion's reference is
//! held to the same rules as the method it refers to: `ref/prompt` as `prompts/get` (renamed
//! and prefixed the same way), `ref/resource` as a resource template is listed.

use serde_json::Value;

use crate::session::error_answer::ErrorAnswer;
use crate::session::SessionSettings;
use crate::wire::jsonrpc::Message;
use crate::wire::named::Named;

impl SessionSettings {
    /// A `tools/call` (`prompts/get`, a completion of a prompt's argument) names the tool
    /// (prompt) as clients see it: it goes to the server under the server's name, and one they
    /// do not see is unknown (`[tools]`, `[prompts]`).
    pub(in crate::session) fn to_server_name(
        &self,
        request: &mut Message,
        named: Option<&Named>,
    ) -> Result<(), ErrorAnswer> {
        let (exposure, pointer) = match named {
            Some(Named::Tool(_)) => (&self.tools, "/name"),
            Some(Named::Prompt(_)) => (&self.prompts, "/name"),
            Some(Named::PromptReference(_)) => (&self.prompts, "/ref/name"),
            _ => return Ok(()),
        };
        if exposure.is_identity() {
            return Ok(());
        }
        let called = named.map(Named::text).unwrap_or_default();
        let Some(name) = exposure.server_name(called) else {
            return Err(match named {
                Some(Named::Tool(_)) => ErrorAnswer::UnknownTool(called.to_owned()),
                _ => ErrorAnswer::UnknownPrompt(called.to_owned()),
            });
        };
        if name != called {
            let mut params: Value = request
                .params()
                .and_then(|p| serde_json::from_str(p.get()).ok())
                .unwrap_or_default();
            if let Some(slot) = params.pointer_mut(pointer) {
                *slot = Value::from(name);
            }
            if let Ok(raw) = serde_json::value::to_raw_value(&params) {
                request.set_params(raw);
            }
        }
        Ok(())
    }

    /// A `resources/read`, `subscribe` or `unsubscribe` names a resource clients see, and a
    /// completion a resource template they see listed (`[resources]`); one they do not is a
    /// resource not found, never sent.
    pub(in crate::session) fn check_resource_shown(
        &self,
        named: Option<&Named>,
    ) -> Result<(), ErrorAnswer> {
        let exposure = &self.resources;
        match named {
            Some(Named::Resource(uri) | Named::ResourceReference(uri)) if !exposure.shows(uri) => {
                Err(ErrorAnswer::UnknownResource(uri.clone()))
            }
            _ => Ok(()),
        }
    }
}
