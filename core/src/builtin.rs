//! Built-in reducers: element-wise sum, min, max and product of numeric
//! arrays (`f32`, `f64`, `i32`, `i64`, `u32`, `u64`).
//!
//! Wrap the array in the operation: `Sum(vec![..])`. Integer sums and
//! products wrap on overflow (as MPI's do in practice), so a fold never
//! panics; `Min`/`Max` of floats ignore NaN like [`f32::min`].
//!
//! Cost of one fold: one pass over both arrays (`n` loads, `n` stores); the
//! peer's array is read in place from the receive buffer. All of them fold
//! archives too ([`ReducerBody::FOLDS_ARCHIVES`]), so ranks other than the
//! root never serialise a folded array again.

use crate::error::FoldError;
use crate::reducer::ReducerBody;
use rkyv::munge::munge;
use rkyv::seal::Seal;
use rkyv::vec::ArchivedVec;
use rkyv::{Archive, Deserialize, Serialize};

macro_rules! array_op {
    ($(#[$doc:meta])* $name:ident, $archived:ident, |$a:ident, $b:ident| $int:expr, |$fa:ident, $fb:ident| $float:expr) => {
        $(#[$doc])*
        #[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
        pub struct $name<T>(pub Vec<T>);

        array_op!(@impl $name, $archived, i32, |$a, $b| $int);
        array_op!(@impl $name, $archived, i64, |$a, $b| $int);
        array_op!(@impl $name, $archived, u32, |$a, $b| $int);
        array_op!(@impl $name, $archived, u64, |$a, $b| $int);
        array_op!(@impl $name, $archived, f32, |$fa, $fb| $float);
        array_op!(@impl $name, $archived, f64, |$fa, $fb| $float);
    };
    (@impl $name:ident, $archived:ident, $t:ty, |$a:ident, $b:ident| $e:expr) => {
        impl crate::inplace::sealed::Sealed for $name<$t> {}

        impl crate::inplace::ArrayOp for $name<$t> {
            type Elem = $t;

            fn from_vec(values: Vec<$t>) -> Self {
                $name(values)
            }

            fn into_vec(self) -> Vec<$t> {
                self.0
            }
        }

        impl ReducerBody for $name<$t> {
            fn fold(&mut self, other: &$archived<$t>) -> Result<(), FoldError> {
                let theirs = other.0.as_slice();
                check_len(self.0.len(), theirs.len())?;
                for (m, t) in self.0.iter_mut().zip(theirs) {
                    let $a: $t = *m;
                    let $b: $t = t.to_native();
                    *m = $e;
                }
                Ok(())
            }

            fn shape(&self) -> Option<u64> {
                Some(self.0.len() as u64)
            }

            fn size_hint(&self) -> usize {
                std::mem::size_of_val(self.0.as_slice()) + 64
            }

            const FOLDS_ARCHIVES: bool = true;

            fn piecewise() -> Option<crate::pieces::Piecewise<$archived<$t>>> {
                // Archived numbers are little-endian: combined as native
                // ones only where they are the same.
                cfg!(target_endian = "little").then_some(crate::pieces::Piecewise {
                    elem: std::mem::size_of::<$t>(),
                    elements: |a| {
                        let s = a.0.as_slice();
                        (s.as_ptr() as usize, std::mem::size_of_val(s))
                    },
                    combine: |out, mine, theirs| {
                        crate::pieces::combine::<$t>(out, mine, theirs, |$a, $b| $e)
                    },
                })
            }

            fn fold_archived(
                mine: Seal<'_, $archived<$t>>,
                other: &$archived<$t>,
            ) -> Result<(), FoldError> {
                munge!(let $archived(mine) = mine);
                let mut mine = ArchivedVec::as_slice_seal(mine);
                let theirs = other.0.as_slice();
                check_len(mine.len(), theirs.len())?;
                for (m, t) in mine.iter_mut().zip(theirs) {
                    let $a: $t = m.to_native();
                    let $b: $t = t.to_native();
                    *m = <rkyv::Archived<$t>>::from_native($e);
                }
                Ok(())
            }
        }
    };
}

fn check_len(mine: usize, theirs: usize) -> Result<(), FoldError> {
    if mine == theirs {
        Ok(())
    } else {
        Err(FoldError::Mismatch {
            mine: mine as u64,
            theirs: theirs as u64,
        })
    }
}

array_op!(
    /// Element-wise sum.
    Sum, ArchivedSum, |a, b| a.wrapping_add(b), |a, b| a + b
);
array_op!(
    /// Element-wise product.
    Prod, ArchivedProd, |a, b| a.wrapping_mul(b), |a, b| a * b
);
array_op!(
    /// Element-wise minimum.
    Min, ArchivedMin, |a, b| a.min(b), |a, b| a.min(b)
);
array_op!(
    /// Element-wise maximum.
    Max, ArchivedMax, |a, b| a.max(b), |a, b| a.max(b)
);

#[cfg(test)]
mod tests {
    use crate::reducer::ReduceValue;
    use crate::*;

    fn fold<T: ReduceValue>(mut a: T, b: &T) -> Result<T, FoldError> {
        a.fold_bytes(&b.encode().unwrap())?;
        Ok(a)
    }

    #[test]
    fn every_op_and_type() {
        assert_eq!(
            fold(Sum(vec![1i32, i32::MAX]), &Sum(vec![2, 1])).unwrap().0,
            vec![3, i32::MIN]
        );
        assert_eq!(fold(Prod(vec![3u64]), &Prod(vec![4])).unwrap().0, vec![12]);
        assert_eq!(
            fold(Min(vec![3i64, -1]), &Min(vec![2, 5])).unwrap().0,
            vec![2, -1]
        );
        assert_eq!(
            fold(Max(vec![3u32, 9]), &Max(vec![4, 1])).unwrap().0,
            vec![4, 9]
        );
        assert_eq!(
            fold(Sum(vec![0.5f64]), &Sum(vec![0.25])).unwrap().0,
            vec![0.75]
        );
        assert_eq!(
            fold(Max(vec![f32::NAN, 1.0]), &Max(vec![2.0, f32::NAN]))
                .unwrap()
                .0,
            vec![2.0, 1.0]
        );
    }

    #[test]
    fn mismatched_lengths() {
        let e = fold(Sum(vec![1.0f32; 3]), &Sum(vec![1.0; 4])).unwrap_err();
        assert_eq!(e, FoldError::Mismatch { mine: 3, theirs: 4 });
    }
}
