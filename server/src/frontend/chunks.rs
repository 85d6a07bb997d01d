//! Message blocks and frames cut from shared chunks of memory.

use bytes::{Bytes, BytesMut};

/// Small buffers cut from bigger chunks: one allocation (and one free,
/// which may happen on another worker) per chunk rather than per message.
/// Nothing is allocated until the first buffer, and that one is cut to
/// size: a connection that writes now and then (and lets go of its chunk
/// when quiet, see [`Chunks::release`]) holds no chunk.
#[derive(Default)]
pub struct Chunks(BytesMut);

/// A chunk's size: some tens of messages.
const CHUNK: usize = 8 * 1024;

impl Chunks {
    /// The buffer to write the next one into, with room for `need` bytes.
    pub fn room(&mut self, need: usize) -> &mut BytesMut {
        if self.0.capacity() - self.0.len() < need {
            // None held: the first since a quiet spell.
            let size = match self.0.capacity() {
                0 => need,
                _ => need.max(CHUNK),
            };
            self.0 = BytesMut::with_capacity(size);
        }
        &mut self.0
    }

    /// What was written since the last cut.
    pub fn cut(&mut self) -> Bytes {
        self.0.split().freeze()
    }

    /// Lets go of the chunk: it is freed once the messages cut from it
    /// are, and the next buffer starts another.
    pub fn release(&mut self) {
        self.0 = BytesMut::new();
    }
}
