//! Each member's catalog, read when routing a URI needs it: every page of its resources and
//! templates, within the catalog's bounds and one request timeout in all (a member that pages
//! slowly holds up the routing of those after it no longer than one slow answer would). A
//! catalog read whole, or cut at a bound, is kept until the member says its resources changed;
//! one whose reading failed is read again when next needed.

use std::sync::Arc;

use serde_json::json;
use tracing::{debug, warn};

use super::catalog::{Catalog, Page, MAX_PAGES};
use super::members::Members;
use crate::upstream::{Upstream, UpstreamError};
use crate::wire::jsonrpc::METHOD_NOT_FOUND;
use crate::wire::methods;

impl Members {
    /// The first member (in `servers`) whose catalog lists `uri` or a template it matches;
    /// `Err` when a member before any that does could not be read whole (it may list `uri`,
    /// and no later member is given what might be its).
    pub(super) async fn member_of_uri(&self, uri: &str) -> Result<Option<usize>, UpstreamError> {
        for index in 0..self.count() {
            let catalog = match self.catalog(index).await {
                Ok(catalog) => catalog,
                Err(UpstreamError::Member { cause, .. }) => {
                    return Err(self.member_error(index, UpstreamError::CatalogUnread(cause)))
                }
                Err(other) => {
                    let cause = UpstreamError::CatalogUnread(Box::new(other));
                    return Err(self.member_error(index, cause));
                }
            };
            if catalog.serves(uri) {
                return Ok(Some(index));
            }
            if !catalog.whole() {
                let cause = UpstreamError::CatalogNotWhole;
                return Err(self.member_error(index, cause));
            }
        }
        Ok(None)
    }

    /// Member `index`'s catalog: kept, or read now. `Err` when the member cannot be opened.
    async fn catalog(&self, index: usize) -> Result<Arc<Catalog>, UpstreamError> {
        let kept = |members: &Members| members.lock().slots[index].catalog.clone();
        if let Some(catalog) = kept(self) {
            return Ok(catalog);
        }
        let _gate = self.catalog_gates[index].lock().await;
        if let Some(catalog) = kept(self) {
            return Ok(catalog);
        }
        let upstream = self
            .ready(index)
            .await
            .inspect_err(|error| self.warn_down(index, error))?;
        let (generation, offers) = {
            let state = self.lock();
            let slot = &state.slots[index];
            let offers = slot
                .result
                .as_ref()
                .is_none_or(|result| result["capabilities"]["resources"].is_object());
            (slot.catalog_generation, offers)
        };
        let mut catalog = Catalog::default();
        if offers {
            let timeout = self.server.members[index].request_timeout;
            let deadline = tokio::time::Instant::now() + timeout;
            for list in [methods::RESOURCES_LIST, methods::RESOURCES_TEMPLATES_LIST] {
                let reading = self.read_pages(index, &upstream, list, &mut catalog);
                if tokio::time::timeout_at(deadline, reading).await.is_err() {
                    catalog.fail();
                    break;
                }
            }
        }
        if catalog.truncated() && self.first_warning(index, "catalog") {
            let (server, member) = (&self.server.name, self.member_name(index));
            warn!(%server, %member, "a member's resources go on past what a session keeps of them: a URI it does not name within them goes to no member after it");
        }
        let catalog = Arc::new(catalog);
        let mut state = self.lock();
        let slot = &mut state.slots[index];
        if slot.catalog_generation == generation && !catalog.failed() {
            slot.catalog = Some(catalog.clone());
        }
        Ok(catalog)
    }

    /// Every page of member `index`'s `list` into `catalog`, within its bounds (what was taken
    /// in stays, should the reading be given up). A member that answers it has no such list
    /// (`-32601`) has none; any other error fails the reading.
    async fn read_pages(
        &self,
        index: usize,
        upstream: &Upstream,
        list: &str,
        catalog: &mut Catalog,
    ) {
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = cursor
                .as_ref()
                .and_then(|c| serde_json::value::to_raw_value(&json!({ "cursor": c })).ok());
            let page = match self.ask(index, upstream, list, params).await {
                Ok(result) => Page::read(result),
                Err(error) => {
                    if !no_such_list(&error) {
                        debug!(%error, list, "a member's list could not be read");
                        catalog.fail();
                    }
                    return;
                }
            };
            cursor = page.next.clone();
            if !catalog.add(page) || cursor.is_none() {
                return;
            }
        }
        catalog.cut_short();
    }
}

/// Whether `error` is a member's answer that it has no such method.
fn no_such_list(error: &UpstreamError) -> bool {
    let UpstreamError::Member { cause, .. } = error else {
        return false;
    };
    let UpstreamError::RefusedOwn { error, .. } = cause.as_ref() else {
        return false;
    };
    serde_json::from_str::<serde_json::Value>(error)
        .is_ok_and(|error| error["code"] == METHOD_NOT_FOUND)
}
