//! A slab of cache entries with CLOCK eviction: a hit sets an entry's reference bit; the
//! hand sweeps the slab, clearing set bits and evicting the first entry whose bit is clear.
//! Near-LRU quality without reordering anything on a hit, and every operation but the
//! sweep is O(1).

/// One slot's entry with its accounted size and reference bit.
struct Slot<E> {
    entry: E,
    bytes: usize,
    referenced: bool,
}

pub struct Clock<E> {
    slots: Vec<Option<Slot<E>>>,
    free: Vec<usize>,
    hand: usize,
    len: usize,
    bytes: usize,
}

impl<E> Default for Clock<E> {
    fn default() -> Clock<E> {
        Clock {
            slots: Vec::new(),
            free: Vec::new(),
            hand: 0,
            len: 0,
            bytes: 0,
        }
    }
}

impl<E> Clock<E> {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Sum of the held entries' accounted sizes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Stores `entry` (accounted as `bytes`) with its reference bit clear; its slot index.
    pub fn insert(&mut self, entry: E, bytes: usize) -> usize {
        let slot = Some(Slot {
            entry,
            bytes,
            referenced: false,
        });
        self.len += 1;
        self.bytes += bytes;
        match self.free.pop() {
            Some(index) => {
                self.slots[index] = slot;
                index
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        }
    }

    pub fn get(&self, index: usize) -> Option<&E> {
        self.slots.get(index)?.as_ref().map(|s| &s.entry)
    }

    pub fn get_mut(&mut self, index: usize) -> Option<&mut E> {
        self.slots.get_mut(index)?.as_mut().map(|s| &mut s.entry)
    }

    /// Marks the entry as used since the hand last passed.
    pub fn touch(&mut self, index: usize) {
        if let Some(Some(slot)) = self.slots.get_mut(index) {
            slot.referenced = true;
        }
    }

    pub fn remove(&mut self, index: usize) -> Option<E> {
        let slot = self.slots.get_mut(index)?.take()?;
        self.len -= 1;
        self.bytes -= slot.bytes;
        self.free.push(index);
        Some(slot.entry)
    }

    /// The slot the hand evicts next: the first one from the hand whose reference bit is
    /// clear, clearing the set bits it passes. `None` when empty.
    pub fn victim(&mut self) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        // Two turns at most: the first clears every bit it passes.
        for _ in 0..2 * self.slots.len() {
            let index = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            if let Some(slot) = &mut self.slots[index] {
                if !slot.referenced {
                    return Some(index);
                }
                slot.referenced = false;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untouched_entries_go_first_and_sizes_are_kept() {
        let mut clock = Clock::default();
        let a = clock.insert("a", 10);
        let b = clock.insert("b", 20);
        let c = clock.insert("c", 30);
        assert_eq!((clock.len(), clock.bytes()), (3, 60));
        clock.touch(a);
        clock.touch(c);
        assert_eq!(clock.victim(), Some(b));
        assert_eq!(clock.remove(b), Some("b"));
        assert_eq!((clock.len(), clock.bytes()), (2, 40));
        // The hand cleared a's bit on its way to b; it clears c's now and comes back to a.
        assert_eq!(clock.victim(), Some(a));
        // The freed slot is reused.
        assert_eq!(clock.insert("d", 1), b);
        assert_eq!(clock.get(b), Some(&"d"));
        assert_eq!(clock.remove(b), Some("d"));
        assert_eq!(clock.remove(b), None);
        clock.remove(a);
        clock.remove(c);
        assert_eq!(clock.victim(), None);
        assert_eq!((clock.len(), clock.bytes()), (0, 0));
    }
}
