//! The eviction sink: where a block leaving the cache is offered on its way out (the
//! L2ARC's feed).
//!
//! Owns: the one slot a sink is set in, shared by the ARC lists and the data policy.
//!
//! Promises: with no sink set, an eviction costs one atomic load more; with one, the sink
//! sees every evicted block once, with its stored (compressed) bytes, under the cache's
//! lock.
//!
//! Must never: let a sink wait or do I/O under the cache's lock (the sink's contract:
//! it queues a reference to the bytes, its own workers write them).
use std::sync::{Arc, OnceLock};

use crate::{BlockKey, Class};

/// A block leaving the ARC: its identity, its stored bytes (shared, not copied), its
/// logical size and class, whether it was read ahead and never asked for, and the object
/// set (dataset) whose page it is, when the cache knows (file data under the default data
/// policy, which keeps each page's identity): the L2ARC's `secondarycache` looks at it.
pub struct Departing<'a> {
    pub key: BlockKey,
    pub bytes: &'a Arc<[u8]>,
    pub lsize: u32,
    pub class: Class,
    pub unread_prefetch: bool,
    pub objset: Option<u64>,
}

/// Receives blocks as the cache evicts them. Called under the cache's lock: queue and
/// return.
pub trait EvictSink: Send + Sync {
    fn evicted(&self, block: Departing<'_>);
}

/// The cache's sink, if one is set (shared by the lists and the data policy).
#[derive(Clone, Default)]
pub(crate) struct SinkSlot(Arc<OnceLock<Arc<dyn EvictSink>>>);

impl SinkSlot {
    pub(crate) fn set(&self, sink: Arc<dyn EvictSink>) -> bool {
        self.0.set(sink).is_ok()
    }

    /// Offers an evicted block to the sink, if there is one.
    pub(crate) fn offer(
        &self,
        key: BlockKey,
        bytes: &Arc<[u8]>,
        lsize: u32,
        class: Class,
        unread_prefetch: bool,
        objset: Option<u64>,
    ) {
        if let Some(sink) = self.0.get() {
            sink.evicted(Departing { key, bytes, lsize, class, unread_prefetch, objset });
        }
    }
}
