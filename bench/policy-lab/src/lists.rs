//! The four lists of an object-mode ARC over dense ids: one slab of links indexed by id,
//! so a run over a trace of F distinct blocks allocates 9 bytes per block and no more.

pub const NONE: u8 = 0;
/// Recently used (MRU, the paper's T1).
pub const T1: u8 = 1;
/// Frequently used (MFU, T2).
pub const T2: u8 = 2;
/// Ghost of T1 (B1).
pub const B1: u8 = 3;
/// Ghost of T2 (B2).
pub const B2: u8 = 4;
const NIL: u32 = u32::MAX;

pub struct Lists {
    state: Vec<u8>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: [u32; 5],
    tail: [u32; 5],
    len: [u64; 5],
}

impl Lists {
    /// Lists for ids below `ids`.
    pub fn new(ids: usize) -> Lists {
        Lists {
            state: vec![NONE; ids],
            prev: vec![NIL; ids],
            next: vec![NIL; ids],
            head: [NIL; 5],
            tail: [NIL; 5],
            len: [0; 5],
        }
    }

    pub fn state(&self, x: u32) -> u8 {
        self.state[x as usize]
    }

    pub fn len(&self, list: u8) -> u64 {
        self.len[list as usize]
    }

    /// The least recently inserted end (the cold end) of `list`.
    pub fn coldest(&self, list: u8) -> Option<u32> {
        let t = self.tail[list as usize];
        (t != NIL).then_some(t)
    }

    /// Takes `x` off whatever list holds it.
    pub fn remove(&mut self, x: u32) {
        let list = self.state[x as usize] as usize;
        if list == NONE as usize {
            return;
        }
        let (p, n) = (self.prev[x as usize], self.next[x as usize]);
        if p == NIL {
            self.head[list] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail[list] = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.len[list] -= 1;
        self.state[x as usize] = NONE;
    }

    /// Puts `x` at the hot end of `list` (taking it off any other first).
    pub fn push_hot(&mut self, x: u32, list: u8) {
        self.remove(x);
        let l = list as usize;
        let h = self.head[l];
        self.prev[x as usize] = NIL;
        self.next[x as usize] = h;
        if h == NIL {
            self.tail[l] = x;
        } else {
            self.prev[h as usize] = x;
        }
        self.head[l] = x;
        self.len[l] += 1;
        self.state[x as usize] = list;
    }

    /// Puts `x` at the cold end of `list`: the next block that list gives up.
    pub fn push_cold(&mut self, x: u32, list: u8) {
        self.remove(x);
        let l = list as usize;
        let t = self.tail[l];
        self.next[x as usize] = NIL;
        self.prev[x as usize] = t;
        if t == NIL {
            self.head[l] = x;
        } else {
            self.next[t as usize] = x;
        }
        self.tail[l] = x;
        self.len[l] += 1;
        self.state[x as usize] = list;
    }
}
