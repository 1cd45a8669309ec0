//! Who reads a session's streams: the attached reader of each, readers through other replicas'
//! views, taps. The readers' part of the session's state (`readers` does the reading).

use tokio::time::Instant;

use super::lazy_map::LazyMap;
use tokio_util::sync::CancellationToken;

use super::log::StreamKey;

/// Who reads the session's streams: the session's state of its readers.
#[derive(Debug)]
pub(super) struct Reading {
    pub(super) attachments: LazyMap<StreamKey, Attachment>,
    /// Streams clients read through other replicas' views, until when (renewed while read):
    /// like an attached reader, they get every message as it comes.
    pub(super) remote_readers: LazyMap<StreamKey, Instant>,
    /// Readers of the session's own messages beside the attached one (`Session::tap`).
    pub(super) taps: usize,
    pub(super) next_generation: u64,
}

impl Default for Reading {
    fn default() -> Reading {
        Reading {
            attachments: LazyMap::new(),
            remote_readers: LazyMap::new(),
            taps: 0,
            next_generation: 1,
        }
    }
}

/// The reader attached to a stream: a newer one detaches it.
#[derive(Debug)]
pub(super) struct Attachment {
    pub(super) generation: u64,
    pub(super) detached: CancellationToken,
}
