//! The values the configuration gives sessions, named in one place: the configuration takes
//! them from here rather than from the tables that use them.

pub use super::correlate::held::DEFAULT_LIMIT as MAX_HELD_PER_PRINCIPAL;
pub use super::correlate::named::DataLayerSettings;
pub use super::correlate::pool::{
    DEFAULT_SIZE as ANONYMOUS_POOL_SIZE, DEFAULT_WAIT as ANONYMOUS_POOL_WAIT,
};
pub use super::correlate::Anonymous;
