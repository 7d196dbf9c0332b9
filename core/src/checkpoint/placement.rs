//! Who holds which piece: L2 partners and L3 groups, from each rank's
//! node.
//!
//! Both rules start from the *interleaved* order of the ranks: one rank
//! of each node in turn (nodes in order of their first rank), so that
//! neighbours in that order are on different nodes whenever the job spans
//! several.
//!
//! - **L2 partner** (the idea of [`crate::replica::buddy_on`]): the next
//!   rank in the interleaved order, cyclically, on another node than the
//!   rank's; a node's loss then never loses both a state and its copy.
//!   Only when the job has a single node is the partner on the same node.
//! - **L3 groups**: the interleaved order cut into `ceil(n / k)` groups of
//!   balanced sizes (at most `k`), so a group's members are on as many
//!   nodes as possible. The `m` parity pieces of a group are held by ranks
//!   of the *following* groups, preferring nodes that host no member of
//!   the group, then nodes no other holder of its parity is on, then the
//!   ranks holding the fewest parity pieces. A member that dies then costs
//!   its group one shard, never two, so any `m` lost ranks of a group are
//!   rebuilt. A job with a single group keeps its parity inside it.
//!
//! Every rank computes the same placement from the same node table.

/// A node token per rank: `nodes[r]` is rank `r`'s node.
pub type Nodes<'a> = &'a [u64];

/// Why a placement cannot be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlacementError {
    /// A job has at least one rank.
    #[error("no ranks")]
    NoRanks,
    /// `k` or `m` out of range.
    #[error(transparent)]
    Geometry(#[from] super::ErasureError),
}

/// One L3 group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EcGroup {
    /// Its number, `0..groups`.
    pub index: u32,
    /// Its members, in shard order (data shard `i` is `members[i]`'s).
    pub members: Vec<u32>,
    /// `parity[j]` holds parity piece `j` (`m = parity.len()`).
    pub parity: Vec<u32>,
}

/// Where every level's pieces of every rank are held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    nodes: Vec<u64>,
    partners: Vec<Option<u32>>,
    groups: Vec<EcGroup>,
    group_of: Vec<u32>,
    shared: bool,
}

/// The ranks in interleaved order: one rank of each node in turn, nodes
/// in order of their first rank, each node's ranks in increasing order.
pub fn interleaved(nodes: Nodes<'_>) -> Vec<u32> {
    let mut order_of_node: std::collections::HashMap<u64, usize> = Default::default();
    let mut per_node: Vec<Vec<u32>> = Vec::new();
    for (r, &node) in nodes.iter().enumerate() {
        let i = *order_of_node.entry(node).or_insert_with(|| {
            per_node.push(Vec::new());
            per_node.len() - 1
        });
        per_node[i].push(r as u32);
    }
    let deepest = per_node.iter().map(Vec::len).max().unwrap_or(0);
    (0..deepest)
        .flat_map(|d| per_node.iter().filter_map(move |v| v.get(d).copied()))
        .collect()
}

/// Every rank's L2 partner (`None` for a job of one rank): the next rank
/// in interleaved order, cyclically, on another node than its own; the
/// next rank at all when every other rank shares its node.
pub fn partners(nodes: Nodes<'_>) -> Vec<Option<u32>> {
    let order = interleaved(nodes);
    let n = order.len();
    let mut out = vec![None; n];
    if n < 2 {
        return out;
    }
    let node = |p: usize| nodes[order[p % n] as usize];
    // next_other[p]: the first position after p (cyclically, within one
    // lap) whose node is not p's, or p + 1 if there is none. Built
    // backwards over two laps so every lookup is O(1).
    let mut next_other = vec![0usize; 2 * n];
    next_other[2 * n - 1] = 2 * n;
    for p in (0..2 * n - 1).rev() {
        next_other[p] = if node(p + 1) != node(p) {
            p + 1
        } else {
            next_other[p + 1]
        };
    }
    for p in 0..n {
        let q = next_other[p];
        let q = if q < p + n { q } else { p + 1 };
        out[order[p] as usize] = Some(order[q % n]);
    }
    out
}

/// Splits `order` into `ceil(n / k)` consecutive groups whose sizes differ
/// by at most one.
fn cut(order: &[u32], k: usize) -> Vec<Vec<u32>> {
    let n = order.len();
    let count = n.div_ceil(k);
    let (base, extra) = (n / count, n % count);
    let mut rest = order;
    (0..count)
        .map(|g| {
            let (head, tail) = rest.split_at(base + usize::from(g < extra));
            rest = tail;
            head.to_vec()
        })
        .collect()
}

/// Bound on the candidates considered for one group's parity (the members
/// of the following groups, in order): keeps placement linear in `n`.
fn window(k: usize, m: usize) -> usize {
    (4 * (k + m)).max(64)
}

/// The L3 groups of a job of `nodes.len()` ranks: at most `k` members
/// each, `m` parity holders each.
pub fn groups(nodes: Nodes<'_>, k: usize, m: usize) -> Result<Vec<EcGroup>, PlacementError> {
    if nodes.is_empty() {
        return Err(PlacementError::NoRanks);
    }
    if k == 0 || m == 0 || k + m > super::piece::MAX_SHARDS {
        return Err(super::ErasureError::Geometry { k, m }.into());
    }
    let members = cut(&interleaved(nodes), k);
    let mut load = vec![0u32; nodes.len()];
    let mut out = Vec::with_capacity(members.len());
    for (g, own) in members.iter().enumerate() {
        let others: Vec<u32> = if members.len() == 1 {
            own.clone()
        } else {
            (1..members.len())
                .flat_map(|d| members[(g + d) % members.len()].iter().copied())
                .take(window(k, m))
                .collect()
        };
        let parity = parity_holders(nodes, own, &others, m, &mut load);
        out.push(EcGroup {
            index: g as u32,
            members: own.clone(),
            parity,
        });
    }
    Ok(out)
}

/// Picks `m` holders among `candidates` for the parity of a group of
/// `members` (see the module documentation for the preferences).
fn parity_holders(
    nodes: Nodes<'_>,
    members: &[u32],
    candidates: &[u32],
    m: usize,
    load: &mut [u32],
) -> Vec<u32> {
    let member_nodes: std::collections::HashSet<u64> =
        members.iter().map(|&r| nodes[r as usize]).collect();
    let mut chosen: Vec<u32> = Vec::with_capacity(m);
    for _ in 0..m {
        let score = |&(pos, &c): &(usize, &u32)| {
            let node = nodes[c as usize];
            let times = chosen.iter().filter(|&&h| h == c).count();
            let near = member_nodes.contains(&node);
            let shared = chosen
                .iter()
                .filter(|&&h| nodes[h as usize] == node)
                .count();
            (times, near, shared, load[c as usize], pos)
        };
        let Some(best) = candidates.iter().enumerate().min_by_key(score) else {
            break;
        };
        let c = *best.1;
        load[c as usize] += 1;
        chosen.push(c);
    }
    chosen
}

impl Placement {
    /// The placement of a job whose rank `r` runs on node `nodes[r]`, with
    /// L3 groups of at most `k` ranks and `m` parity pieces, and an L4
    /// shared directory if `shared`.
    pub fn new(nodes: Nodes<'_>, k: usize, m: usize, shared: bool) -> Result<Self, PlacementError> {
        let groups = groups(nodes, k, m)?;
        let mut group_of = vec![0u32; nodes.len()];
        for g in &groups {
            for &r in &g.members {
                group_of[r as usize] = g.index;
            }
        }
        Ok(Placement {
            nodes: nodes.to_vec(),
            partners: partners(nodes),
            groups,
            group_of,
            shared,
        })
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.nodes.len()
    }

    /// Rank `rank`'s node.
    pub fn node(&self, rank: u32) -> Option<u64> {
        self.nodes.get(rank as usize).copied()
    }

    /// Rank `rank`'s L2 partner.
    pub fn partner(&self, rank: u32) -> Option<u32> {
        self.partners.get(rank as usize).copied().flatten()
    }

    /// The L3 group rank `rank` is a member of.
    pub fn group_of(&self, rank: u32) -> Option<&EcGroup> {
        let g = *self.group_of.get(rank as usize)?;
        self.groups.get(g as usize)
    }

    /// Every L3 group.
    pub fn groups(&self) -> &[EcGroup] {
        &self.groups
    }

    /// Whether the job has an L4 shared directory.
    pub fn shared(&self) -> bool {
        self.shared
    }
}

#[cfg(test)]
mod tests;
