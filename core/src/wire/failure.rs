//! Errors as they travel on the wire.
//!
//! The API's errors ([`ReduceError`], [`FoldError`]) are free to change with
//! the API; what a peer sends is these types, converted at the edges
//! (the master's sends, the router's receipt). A change of the API's errors
//! is then a change of the conversions only, not of the protocol.

use crate::error::{FoldError, ReduceError};
use rkyv::{Archive, Deserialize, Serialize};
use std::time::Duration;

/// Why a fold failed, on the wire ([`FoldError`] in the API).
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum FoldFailure {
    /// The two sides have different shapes.
    Mismatch {
        /// Elements on the folding side.
        mine: u64,
        /// Elements on the fetched side.
        theirs: u64,
    },
    /// The fetched bytes are not a valid archive of the expected type.
    Corrupt(String),
    /// A user reducer refused to fold.
    Custom(String),
}

/// How a reduction or a barrier failed, on the wire ([`ReduceError`] in
/// the API).
#[derive(Clone, Debug, PartialEq, Eq, Archive, Serialize, Deserialize)]
pub enum Failure {
    /// The options are invalid.
    InvalidOptions(String),
    /// A live reduction already has that id.
    DuplicateId(String),
    /// Ranks disagree on the reduction.
    Mismatched {
        /// The reduction's id.
        id: String,
        /// What differs.
        detail: String,
    },
    /// A fold failed.
    Fold {
        /// The reduction's id.
        id: String,
        /// The fold's error.
        error: FoldFailure,
    },
    /// Ranks died and their contributions could not be recovered.
    RanksLost {
        /// The reduction's id.
        id: String,
        /// The ranks whose contributions are lost.
        ranks: Vec<u32>,
    },
    /// The root died.
    RootLost {
        /// The reduction's id.
        id: String,
        /// The dead root.
        root: u32,
    },
    /// A replacement root's result was lost with its dead process.
    ResultLost {
        /// The reduction's id.
        id: String,
        /// The root.
        root: u32,
    },
    /// The master is unreachable or died.
    MasterLost(String),
    /// A deadline passed, after this many milliseconds.
    Timeout {
        /// The deadline.
        millis: u64,
    },
    /// The receiver was declared failed and is fenced.
    Fenced,
    /// A runtime shut down first.
    Shutdown,
    /// A transport failed.
    Transport(String),
    /// A result could not be decoded.
    Decode(String),
    /// The job rolls back to its re-init entry point, epoch `epoch`.
    Reinit {
        /// The new epoch.
        epoch: u32,
    },
    /// Too many reductions would be live at once.
    TooManyReductions {
        /// The limit reached.
        limit: u64,
    },
}

impl From<&FoldError> for FoldFailure {
    fn from(e: &FoldError) -> Self {
        match e {
            FoldError::Mismatch { mine, theirs } => FoldFailure::Mismatch {
                mine: *mine,
                theirs: *theirs,
            },
            FoldError::Corrupt(s) => FoldFailure::Corrupt(s.clone()),
            FoldError::Custom(s) => FoldFailure::Custom(s.clone()),
        }
    }
}

impl From<FoldFailure> for FoldError {
    fn from(e: FoldFailure) -> Self {
        match e {
            FoldFailure::Mismatch { mine, theirs } => FoldError::Mismatch { mine, theirs },
            FoldFailure::Corrupt(s) => FoldError::Corrupt(s),
            FoldFailure::Custom(s) => FoldError::Custom(s),
        }
    }
}

impl From<&ReduceError> for Failure {
    fn from(e: &ReduceError) -> Self {
        match e.clone() {
            ReduceError::InvalidOptions(s) => Failure::InvalidOptions(s),
            ReduceError::DuplicateId(s) => Failure::DuplicateId(s),
            ReduceError::Mismatched { id, detail } => Failure::Mismatched { id, detail },
            ReduceError::Fold { id, error } => Failure::Fold {
                id,
                error: (&error).into(),
            },
            ReduceError::RanksLost { id, ranks } => Failure::RanksLost { id, ranks },
            ReduceError::RootLost { id, root } => Failure::RootLost { id, root },
            ReduceError::ResultLost { id, root } => Failure::ResultLost { id, root },
            ReduceError::MasterLost(s) => Failure::MasterLost(s),
            ReduceError::Timeout(d) => Failure::Timeout {
                millis: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            },
            ReduceError::Fenced => Failure::Fenced,
            ReduceError::Shutdown => Failure::Shutdown,
            ReduceError::Transport(s) => Failure::Transport(s),
            ReduceError::Decode(s) => Failure::Decode(s),
            ReduceError::TooManyReductions { limit } => Failure::TooManyReductions { limit },
            ReduceError::Reinit { epoch } => Failure::Reinit { epoch },
        }
    }
}

impl From<Failure> for ReduceError {
    fn from(e: Failure) -> Self {
        match e {
            Failure::InvalidOptions(s) => ReduceError::InvalidOptions(s),
            Failure::DuplicateId(s) => ReduceError::DuplicateId(s),
            Failure::Mismatched { id, detail } => ReduceError::Mismatched { id, detail },
            Failure::Fold { id, error } => ReduceError::Fold {
                id,
                error: error.into(),
            },
            Failure::RanksLost { id, ranks } => ReduceError::RanksLost { id, ranks },
            Failure::RootLost { id, root } => ReduceError::RootLost { id, root },
            Failure::ResultLost { id, root } => ReduceError::ResultLost { id, root },
            Failure::MasterLost(s) => ReduceError::MasterLost(s),
            Failure::Timeout { millis } => ReduceError::Timeout(Duration::from_millis(millis)),
            Failure::Fenced => ReduceError::Fenced,
            Failure::Shutdown => ReduceError::Shutdown,
            Failure::Transport(s) => ReduceError::Transport(s),
            Failure::Decode(s) => ReduceError::Decode(s),
            Failure::TooManyReductions { limit } => ReduceError::TooManyReductions { limit },
            Failure::Reinit { epoch } => ReduceError::Reinit { epoch },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_error() -> Vec<ReduceError> {
        let fold = [
            FoldError::Mismatch { mine: 3, theirs: 4 },
            FoldError::Corrupt("bad".into()),
            FoldError::Custom("no".into()),
        ];
        let mut all = vec![
            ReduceError::InvalidOptions("x".into()),
            ReduceError::DuplicateId("d".into()),
            ReduceError::Mismatched {
                id: "m".into(),
                detail: "root".into(),
            },
            ReduceError::RanksLost {
                id: "r".into(),
                ranks: vec![2, 5],
            },
            ReduceError::RootLost {
                id: "r".into(),
                root: 1,
            },
            ReduceError::ResultLost {
                id: "k".into(),
                root: 2,
            },
            ReduceError::MasterLost("gone".into()),
            ReduceError::Timeout(Duration::from_millis(1500)),
            ReduceError::Fenced,
            ReduceError::Shutdown,
            ReduceError::Transport("t".into()),
            ReduceError::Decode("bytes".into()),
            ReduceError::TooManyReductions { limit: 7 },
            ReduceError::Reinit { epoch: 3 },
        ];
        all.extend(fold.into_iter().map(|error| ReduceError::Fold {
            id: "f".into(),
            error,
        }));
        all
    }

    #[test]
    fn every_api_error_survives_the_wire() {
        for e in every_error() {
            let frame = crate::wire::encode(&crate::wire::Msg::Complete {
                key: 1,
                error: Some((&e).into()),
                number: None,
            });
            let crate::wire::Msg::Complete {
                error: Some(back), ..
            } = crate::wire::decode(&frame).unwrap()
            else {
                panic!("expected a completion");
            };
            assert_eq!(ReduceError::from(back), e);
        }
    }
}
