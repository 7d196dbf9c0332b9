//! Options of one reduction.

use taskfold_core::{Group, GroupError};

/// How to run a reduction: root, id, group, durability and completion.
///
/// ```
/// use taskfold::Reduce;
/// let opts = Reduce::root(1).id("image-7");
/// let sub = Reduce::root(0).group([0, 2, 3]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Reduce {
    pub(crate) root: u32,
    pub(crate) id: Option<String>,
    pub(crate) group: Option<Vec<u32>>,
    pub(crate) durability: Option<crate::config::Durability>,
    pub(crate) completion: Option<crate::config::Completion>,
}

impl Reduce {
    /// A reduction whose result goes to `rank` (any member of the group).
    pub fn root(rank: u32) -> Self {
        Reduce {
            root: rank,
            ..Default::default()
        }
    }

    /// Names the reduction. Ids must be unique among the group's live
    /// reductions. Without one, the runtime numbers the group's reductions
    /// in call order (`auto-0`, `auto-1`, …), so every member must then call
    /// `reduce` for that group in the same order, as with MPI. A call
    /// refused at once (its `Err` returned) takes no number.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Restricts the reduction to these ranks (default: every rank).
    pub fn group(mut self, ranks: impl IntoIterator<Item = u32>) -> Self {
        self.group = Some(ranks.into_iter().collect());
        self
    }

    /// Durability of this reduction's replicas (default: the runtime's
    /// [`crate::Config::durability`]).
    pub fn durability(mut self, d: crate::config::Durability) -> Self {
        self.durability = Some(d);
        self
    }

    /// When this member's future completes if it is not the root (default:
    /// the runtime's [`crate::Config::completion`]). With
    /// [`Completion::Contributed`](crate::Completion::Contributed) it
    /// completes once this member's data was folded in, like `MPI_Reduce`
    /// on a rank other than the root; each member chooses for itself.
    ///
    /// ```
    /// use taskfold::{Completion, Reduce};
    /// let opts = Reduce::root(0).completion(Completion::Contributed);
    /// ```
    pub fn completion(mut self, c: crate::config::Completion) -> Self {
        self.completion = Some(c);
        self
    }

    pub(crate) fn resolve_group(&self, size: u32) -> Result<Group, GroupError> {
        match &self.group {
            None => Ok(Group::world(size)),
            Some(g) => Group::new(g.iter().copied(), size),
        }
    }
}
