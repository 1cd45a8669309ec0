//! What a client's request names, held to what its clients may see (`[tools]`, `[prompts]`,
//! `[resources]`): a tool or prompt goes to the server under the server's name, and one not
//! exposed, or a resource not shown, is answered here, never sent.

use serde_json::Value;

use crate::jsonrpc::Message;
use crate::methods;
use crate::session::error_answer::ErrorAnswer;
use crate::session::{routing, Session};

impl Session {
    /// A `tools/call` (`prompts/get`) names the tool (prompt) as clients see it: it goes to
    /// the server under the server's name, and one they do not see is unknown (`[tools]`,
    /// `[prompts]`).
    pub(in crate::session) fn to_server_name(
        &self,
        request: &mut Message,
        method: &str,
    ) -> Result<(), ErrorAnswer> {
        let (exposure, unknown): (_, fn(String) -> ErrorAnswer) = match method {
            methods::TOOLS_CALL => (&self.settings.tools, ErrorAnswer::UnknownTool),
            methods::PROMPTS_GET => (&self.settings.prompts, ErrorAnswer::UnknownPrompt),
            _ => return Ok(()),
        };
        if exposure.is_identity() {
            return Ok(());
        }
        let mut params: Value = request
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let called = params["name"].as_str().unwrap_or_default().to_owned();
        let Some(name) = exposure.server_name(&called) else {
            return Err(unknown(called));
        };
        if name != called {
            params["name"] = Value::from(name);
            if let Ok(raw) = serde_json::value::to_raw_value(&params) {
                request.set_params(raw);
            }
        }
        Ok(())
    }

    /// A `resources/read`, `subscribe` or `unsubscribe` names a resource clients see
    /// (`[resources]`); one they do not is a resource not found, never sent.
    pub(in crate::session) fn check_resource_shown(
        &self,
        request: &Message,
        method: &str,
    ) -> Result<(), ErrorAnswer> {
        let exposure = &self.settings.resources;
        let names_a_resource = matches!(
            method,
            methods::RESOURCES_READ | methods::RESOURCES_SUBSCRIBE | methods::RESOURCES_UNSUBSCRIBE
        );
        if !names_a_resource || exposure.is_identity() {
            return Ok(());
        }
        match routing::resource_uri(request) {
            Some(uri) if !exposure.shows(&uri) => Err(ErrorAnswer::UnknownResource(uri)),
            _ => Ok(()),
        }
    }
}
