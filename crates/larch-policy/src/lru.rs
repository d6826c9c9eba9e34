//! Least-recently-used replacement over variable-size blocks: the baseline every policy is
//! compared with.

use crate::list::{Header, List, NIL, Slab};
use crate::{Access, Action, BlockKey, BufType, HitCounters, Outcome, Policy, State};

/// LRU with a byte capacity. Blocks are kept in one list; a hit moves a block to the head,
/// a miss inserts it there and evicts from the tail until the blocks fit.
#[derive(Clone)]
pub struct Lru {
    capacity_bytes: u64,
    slab: Slab,
    list: List,
    counters: HitCounters,
}

impl Lru {
    /// An empty LRU cache of `capacity_bytes`.
    pub fn new(capacity_bytes: u64) -> Lru {
        Lru {
            capacity_bytes,
            slab: Slab::new(),
            list: List::EMPTY,
            counters: HitCounters::default(),
        }
    }

    fn evict_to_fit(&mut self, actions: &mut Vec<Action>) {
        while self.list.bytes > self.capacity_bytes && self.list.tail != NIL {
            self.drop_block(self.list.tail, actions);
        }
    }

    /// Unlinks and frees a listed header, telling the caller to free its buffer.
    fn drop_block(&mut self, id: u32, actions: &mut Vec<Action>) {
        let h = self.slab.get(id);
        actions.push(Action::Evict {
            key: h.key,
            generation: h.generation,
            from: State::Mru,
            to: None,
        });
        self.unlink(id);
        self.slab.free(id);
    }

    fn unlink(&mut self, id: u32) {
        let mut list = self.list;
        self.slab.unlink(&mut list, id);
        self.list = list;
    }

    fn push_head(&mut self, id: u32) {
        let mut list = self.list;
        self.slab.push_head(&mut list, id);
        self.list = list;
    }
}

impl Policy for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }

    fn access(&mut self, access: &Access, actions: &mut Vec<Action>) -> Outcome {
        if let Some(id) = self.slab.lookup(&access.key) {
            if self.slab.get(id).generation == access.generation {
                self.counters.hits += 1;
                self.unlink(id);
                self.push_head(id);
                return Outcome::Hit { state: State::Mru };
            }
            // Overwritten behind the cached copy: drop it and read again.
            self.drop_block(id, actions);
        }
        self.counters.misses += 1;
        let mut header = Header::detached(
            access.key,
            access.generation,
            access.size_bytes,
            BufType::Data,
            0,
            access.now_ms,
        );
        header.state = State::Mru;
        let id = self.slab.alloc(header);
        self.push_head(id);
        self.evict_to_fit(actions);
        Outcome::Miss {
            found: None,
            on_l2: false,
        }
    }

    fn remove(&mut self, key: &BlockKey, actions: &mut Vec<Action>) {
        if let Some(id) = self.slab.lookup(key) {
            self.drop_block(id, actions);
        }
    }

    fn resident_bytes(&self) -> u64 {
        self.list.bytes
    }

    fn target_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn tracked_headers(&self) -> usize {
        self.slab.live()
    }

    fn counters(&self) -> HitCounters {
        self.counters
    }

    fn check_invariants(&self) {
        let ids = self.slab.walk(&self.list);
        assert_eq!(
            ids.len(),
            self.slab.live(),
            "every LRU header is on the list"
        );
        let bytes: u64 = ids
            .iter()
            .map(|&id| u64::from(self.slab.get(id).size_bytes))
            .sum();
        assert_eq!(bytes, self.list.bytes, "LRU list bytes");
        assert!(
            bytes <= self.capacity_bytes,
            "LRU holds {bytes} over its capacity {}",
            self.capacity_bytes
        );
    }
}
