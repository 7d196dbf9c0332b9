//! The same-node module's reading of a [`Locator`]: which process, which
//! heap, which bytes. Nothing outside this module sees these fields.

use crate::shm::HeapRef;
use taskfold_core::wire::Locator;

/// A place in a same-node process's shared heap, as a [`Locator`] carries
/// it (seven little-endian integers, in this order). Only this module's
/// views and the tests read it; the rest of taskfold passes locators on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The owner's node token ([`super::node_token`]).
    pub node: u64,
    /// The owner's process.
    pub pid: u32,
    /// Where the bytes lie in the owner's heap (its descriptor, inode,
    /// length, and the bytes' offset).
    pub heap: HeapRef,
    /// How many bytes.
    pub len: u64,
}

impl Place {
    /// The locator naming this place.
    pub fn encode(&self) -> Locator {
        Locator::from_words(&[
            (0, &self.node.to_le_bytes()),
            (8, &self.pid.to_le_bytes()),
            (12, &self.heap.fd.to_le_bytes()),
            (16, &self.heap.ino.to_le_bytes()),
            (24, &self.heap.len.to_le_bytes()),
            (32, &self.heap.offset.to_le_bytes()),
            (40, &self.len.to_le_bytes()),
        ])
    }

    /// The place `at` names (any bytes decode; what they name is checked
    /// when the heap is opened and the range read).
    pub fn decode(at: &Locator) -> Place {
        Place {
            node: at.u64_at(0),
            pid: at.u32_at(8),
            heap: HeapRef {
                fd: at.u32_at(12),
                ino: at.u64_at(16),
                len: at.u64_at(24),
                offset: at.u64_at(32),
            },
            len: at.u64_at(40),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskfold_core::wire::LOCATOR_LEN;

    #[test]
    fn a_place_round_trips() {
        let p = Place {
            node: 0x0123_4567_89ab_cdef,
            pid: 77,
            heap: HeapRef {
                fd: 3,
                ino: 12,
                len: 1 << 30,
                offset: 65536,
            },
            len: 4096,
        };
        assert_eq!(Place::decode(&p.encode()), p);
        assert_eq!(Place::decode(&Locator([0; LOCATOR_LEN])).len, 0);
    }
}
