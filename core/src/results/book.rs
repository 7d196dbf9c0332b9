//! The master's records of where kept results are (see the [module
//! documentation](super)): each result's holder and its further copies,
//! bounded, answering a replacement root's replay.

use super::RESULTS_LIMIT;
use std::collections::{HashMap, VecDeque};

/// A copy a holder drops, as the master's [`Book`] decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drop {
    /// The rank that keeps it.
    pub holder: u32,
    /// Whose result it is.
    pub root: u32,
    /// The reduction.
    pub key: u64,
}

/// One kept result at the master.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    root: u32,
    /// `None` once ambiguous (two unreleased results of one id).
    holder: Option<u32>,
    /// Further copies, made from the holder's (at once, or once the root
    /// died: [`Book::also_kept`]), oldest first: the first takes the
    /// holder's place if that dies.
    spares: Vec<u32>,
    /// Results of this key the root has not released.
    unreleased: u32,
    /// Two unreleased results of one id met: no copy answers any more.
    ambiguous: bool,
    generation: u64,
}

/// How the master answers a replacement root that joins a reduction again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Its result is kept there.
    At(u32),
    /// It was kept and is gone (ambiguous, or its holder died).
    Lost,
    /// Nothing is known of it.
    Unknown,
}

/// Where the master knows results are kept, at most `limit` of them
/// (the oldest dropped beyond).
#[derive(Clone, Debug)]
pub struct Book {
    entries: HashMap<u64, Entry>,
    /// `(key, generation)` in the order they came, for the bound (stale
    /// pairs are skipped).
    order: VecDeque<(u64, u64)>,
    generation: u64,
    limit: usize,
    /// Results dropped for the bound.
    pub evicted: u64,
}

impl Default for Book {
    fn default() -> Self {
        Book::new(RESULTS_LIMIT)
    }
}

impl Book {
    /// An empty book of at most `limit` results.
    pub fn new(limit: usize) -> Self {
        Book {
            entries: HashMap::new(),
            order: VecDeque::new(),
            generation: 0,
            limit: limit.max(1),
            evicted: 0,
        }
    }

    /// `root`'s result of `key` completed, kept at `holder`. Returns the
    /// copies to drop: an unreleased earlier result of the same key (both
    /// copies: a replay could not tell them apart), or the oldest beyond
    /// the bound.
    pub fn kept(&mut self, key: u64, root: u32, holder: u32) -> Vec<Drop> {
        let mut drops = Vec::new();
        if let Some(e) = self.entries.get_mut(&key) {
            if e.root == root {
                let spares = std::mem::take(&mut e.spares);
                for old in e.holder.take().into_iter().chain(spares) {
                    drops.push(Drop {
                        holder: old,
                        root,
                        key,
                    });
                }
                drops.push(Drop { holder, root, key });
                e.unreleased += 1;
                e.ambiguous = true;
                return drops;
            }
            // Another root's result of a reused id: that one is forgotten.
            for &old in e.holder.iter().chain(&e.spares) {
                drops.push(Drop {
                    holder: old,
                    root: e.root,
                    key,
                });
            }
        }
        self.generation += 1;
        let generation = self.generation;
        self.entries.insert(
            key,
            Entry {
                root,
                holder: Some(holder),
                spares: Vec::new(),
                unreleased: 1,
                ambiguous: false,
                generation,
            },
        );
        self.order.push_back((key, generation));
        while self.entries.len() > self.limit {
            let Some((k, g)) = self.order.pop_front() else {
                break;
            };
            if self.entries.get(&k).is_some_and(|e| e.generation == g) {
                let e = self.entries.remove(&k).expect("just seen");
                self.evicted += 1;
                for h in e.holder.into_iter().chain(e.spares) {
                    drops.push(Drop {
                        holder: h,
                        root: e.root,
                        key: k,
                    });
                }
            }
        }
        self.compact();
        drops
    }

    /// `root` released its result of `key` (its application checkpointed
    /// past it). Unknown or another root's: ignored. Returns the further
    /// copies to drop, if any were made (the root drops the copy it
    /// knows).
    pub fn released(&mut self, key: u64, root: u32) -> Vec<Drop> {
        let Some(e) = self.entries.get_mut(&key).filter(|e| e.root == root) else {
            return Vec::new();
        };
        e.unreleased = e.unreleased.saturating_sub(1);
        if e.unreleased > 0 {
            return Vec::new();
        }
        let spares = self.entries.remove(&key).map(|e| e.spares);
        spares
            .unwrap_or_default()
            .into_iter()
            .map(|holder| Drop { holder, root, key })
            .collect()
    }

    /// `holder` made a further copy of `root`'s result of `key` from
    /// another holder's: true if the record takes it (a single unreleased
    /// result, kept elsewhere or nowhere any more: it becomes the holder
    /// then; a copy the record has already, the holder's own included,
    /// counts once); else the copy serves nobody.
    ///
    /// Why the holder's own counts: after deaths close together a holder
    /// may be sent the same result again (by its live root, or relayed by
    /// another holder) and say so; its copy is the record's, and a caller
    /// that took "false" for a copy serving nobody would drop it.
    pub fn also_kept(&mut self, key: u64, root: u32, holder: u32) -> bool {
        match self.entries.get_mut(&key) {
            Some(e) if e.root == root && !e.ambiguous => {
                match e.holder {
                    None => e.holder = Some(holder),
                    Some(h) if h == holder || e.spares.contains(&holder) => {}
                    Some(_) => e.spares.push(holder),
                }
                true
            }
            _ => false,
        }
    }

    /// `root`, alive, copied its result of `key` again to `holder` after
    /// the holder before died: true if the record takes it (a single
    /// unreleased result whose holder is gone); else the copy serves
    /// nobody.
    pub fn rekept(&mut self, key: u64, root: u32, holder: u32) -> bool {
        match self.entries.get_mut(&key) {
            Some(e) if e.root == root && !e.ambiguous && e.holder.is_none() => {
                e.holder = Some(holder);
                true
            }
            _ => false,
        }
    }

    /// `rank` died: the copies it kept are gone; a further copy takes a
    /// lost one's place, else the replay ends in an error (unless the
    /// live root copies it again). Returns how many have no copy left.
    pub fn holder_died(&mut self, rank: u32) -> usize {
        let mut n = 0;
        for e in self.entries.values_mut() {
            e.spares.retain(|&s| s != rank);
            if e.holder == Some(rank) {
                // The oldest further copy, if one was made, takes its
                // place.
                e.holder = (!e.spares.is_empty()).then(|| e.spares.remove(0));
                n += usize::from(e.holder.is_none());
            }
        }
        n
    }

    /// Whether `rank` keeps a copy of `root`'s result of `key` by the
    /// record (its holder or a further copy).
    pub fn kept_at(&self, key: u64, root: u32, rank: u32) -> bool {
        self.entries
            .get(&key)
            .is_some_and(|e| e.root == root && (e.holder == Some(rank) || e.spares.contains(&rank)))
    }

    /// How a replacement of `root` that joins `key` again is answered.
    pub fn lookup(&self, key: u64, root: u32) -> Lookup {
        match self.entries.get(&key) {
            Some(e) if e.root == root => match (e.holder, e.ambiguous) {
                (Some(h), false) => Lookup::At(h),
                _ => Lookup::Lost,
            },
            _ => Lookup::Unknown,
        }
    }

    /// Forgets everything (a global rollback numbers reductions afresh);
    /// returns the copies to drop.
    pub fn clear(&mut self) -> Vec<Drop> {
        let drops = self
            .entries
            .iter()
            .flat_map(|(&key, e)| {
                e.holder.iter().chain(&e.spares).map(move |&holder| Drop {
                    holder,
                    root: e.root,
                    key,
                })
            })
            .collect();
        self.entries.clear();
        self.order.clear();
        drops
    }

    /// Results known whose copy is gone (a replay of one is an error).
    pub fn without_copy(&self) -> usize {
        self.entries.values().filter(|e| e.holder.is_none()).count()
    }

    /// Results known with a second copy ([`Book::also_kept`]).
    pub fn second_copies(&self) -> usize {
        self.entries
            .values()
            .filter(|e| !e.spares.is_empty())
            .count()
    }

    /// Copies known of results, beyond their first ([`Book::also_kept`]).
    pub fn further_copies(&self) -> usize {
        self.entries.values().map(|e| e.spares.len()).sum()
    }

    /// Results known (kept, or lost and not yet released).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keeps the order queue within a small multiple of the entries:
    /// released entries leave stale pairs behind.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(k, g)| entries.get(k).is_some_and(|e| e.generation == *g));
        }
    }
}
