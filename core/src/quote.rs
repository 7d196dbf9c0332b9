//! Quoting untrusted text in errors and logs.
//!
//! A string that a peer or a caller supplied (a reduction id, a frame's
//! reason, a path from a file) is quoted through [`quote`]: at most
//! [`QUOTE_MAX`] characters of it, escaped like `{:?}`, then the number of
//! bytes left out. An error message therefore stays short whatever the
//! input's length, and a control character in the input cannot forge a
//! line of the log.

use std::fmt;

/// Most characters of an untrusted string that an error or a log quotes.
pub const QUOTE_MAX: usize = 40;

/// A short, escaped quotation of `s` (see the [module documentation](self)):
/// `"abc"`, or `"abc…" (+N bytes)` when `s` is longer than [`QUOTE_MAX`]
/// characters.
pub fn quote(s: &str) -> Quoted<'_> {
    Quoted(s, QUOTE_MAX)
}

/// Like [`quote`], quoting at most `max` characters: for a sentence that
/// must be read whole when it is what it claims (a listener's refusal
/// before it proved the job key), yet stays bounded and escaped.
pub fn quote_at_most(s: &str, max: usize) -> Quoted<'_> {
    Quoted(s, max)
}

/// A string quoted for an error or a log ([`quote`]); formats on display.
#[derive(Clone, Copy, Debug)]
pub struct Quoted<'a>(&'a str, usize);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = self
            .0
            .char_indices()
            .nth(self.1)
            .map_or(self.0.len(), |(i, _)| i);
        let (head, rest) = self.0.split_at(end);
        if rest.is_empty() {
            write!(f, "{head:?}")
        } else {
            let head = format!("{head:?}");
            let open = head.strip_suffix('"').unwrap_or(&head);
            write!(f, "{open}…\" (+{} bytes)", rest.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_strings_are_quoted_whole() {
        assert_eq!(quote("image-7").to_string(), "\"image-7\"");
        assert_eq!(quote("").to_string(), "\"\"");
        assert_eq!(quote("a\nb").to_string(), "\"a\\nb\"");
    }

    #[test]
    fn long_strings_are_cut_and_counted() {
        let long = "x".repeat(100_000);
        let q = quote(&long).to_string();
        assert!(q.len() < 80, "{q}");
        assert!(
            q.starts_with(&format!("\"{}", "x".repeat(QUOTE_MAX))),
            "{q}"
        );
        assert!(
            q.ends_with(&format!("(+{} bytes)", 100_000 - QUOTE_MAX)),
            "{q}"
        );
        // Cut on a character boundary.
        let wide = "é".repeat(QUOTE_MAX + 3);
        assert!(quote(&wide).to_string().ends_with("(+6 bytes)"));
    }
}
