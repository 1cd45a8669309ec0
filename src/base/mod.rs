//! The base every layer stands on: time, keys, ids, the logged event, bounded queues, errors.

pub mod backlog;
pub mod caller;
pub mod carry;
pub mod clock;
pub mod error_chain;
pub mod event;
pub mod ids;
pub mod keys;
pub mod lazy_map;
pub mod memory;
pub mod swap;
pub mod text;
