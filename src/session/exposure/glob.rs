//! The operator's globs (`*` any run of characters, `?` any one), compiled once and matched in
//! time linear in the name for a given glob: the name is scanned left to right, each run of
//! literal characters between two stars found at its leftmost place (which is always a right
//! place for it), never backtracking — a client-chosen name with many stars' worth of
//! near-misses costs no more than one pass per run.

use serde::{Deserialize, Deserializer};

/// One glob, as written and compiled.
#[derive(Debug, Clone)]
pub struct Glob {
    text: String,
    /// The runs between stars (a glob with no star has one run, matched whole).
    runs: Vec<Vec<Unit>>,
    starred: bool,
}

/// One position of a run: a character, or `?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Any,
    Char(char),
}

impl Unit {
    fn fits(self, c: char) -> bool {
        match self {
            Unit::Any => true,
            Unit::Char(wanted) => wanted == c,
        }
    }
}

impl Glob {
    pub fn new(text: impl Into<String>) -> Glob {
        let text = text.into();
        let runs: Vec<Vec<Unit>> = text
            .split('*')
            .map(|run| {
                run.chars()
                    .map(|c| if c == '?' { Unit::Any } else { Unit::Char(c) })
                    .collect()
            })
            .collect();
        Glob {
            starred: runs.len() > 1,
            runs,
            text,
        }
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        self.matches_chars(&name)
    }

    /// [`Glob::matches`] on a name already split into characters.
    pub fn matches_chars(&self, name: &[char]) -> bool {
        let (first, rest) = self
            .runs
            .split_first()
            .expect("split gives one run at least");
        if !self.starred {
            return first.len() == name.len() && fits(first, name);
        }
        let (last, middle) = rest.split_last().expect("a starred glob has two runs");
        let Some(end) = name.len().checked_sub(last.len()) else {
            return false;
        };
        if end < first.len() || !fits(first, &name[..first.len()]) || !fits(last, &name[end..]) {
            return false;
        }
        let mut at = first.len();
        for run in middle {
            match leftmost(run, &name[at..end]) {
                Some(found) => at += found + run.len(),
                None => return false,
            }
        }
        true
    }
}

/// Whether `run` fits `name`, which has its length.
fn fits(run: &[Unit], name: &[char]) -> bool {
    run.iter().zip(name).all(|(unit, c)| unit.fits(*c))
}

/// Where `run` first fits in `within`.
fn leftmost(run: &[Unit], within: &[char]) -> Option<usize> {
    if run.is_empty() {
        return Some(0);
    }
    within
        .windows(run.len())
        .position(|window| fits(run, window))
}

impl From<&str> for Glob {
    fn from(text: &str) -> Glob {
        Glob::new(text)
    }
}

impl From<String> for Glob {
    fn from(text: String) -> Glob {
        Glob::new(text)
    }
}

impl PartialEq for Glob {
    fn eq(&self, other: &Glob) -> bool {
        self.text == other.text
    }
}

impl PartialEq<&str> for Glob {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl<'de> Deserialize<'de> for Glob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Glob, D::Error> {
        String::deserialize(deserializer).map(Glob::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(glob: &str, name: &str) -> bool {
        Glob::new(glob).matches(name)
    }

    /// The textbook recursive definition, to hold the compiled matcher to.
    fn oracle(glob: &[char], name: &[char]) -> bool {
        match glob.split_first() {
            None => name.is_empty(),
            Some(('*', rest)) => (0..=name.len()).any(|skip| oracle(rest, &name[skip..])),
            Some((c, rest)) => name
                .split_first()
                .is_some_and(|(n, name)| (*c == '?' || c == n) && oracle(rest, name)),
        }
    }

    #[test]
    fn globs_match_runs_and_single_characters() {
        assert!(matches("*", ""));
        assert!(matches("sleep*", "sleep_long"));
        assert!(matches("debug_?", "debug_x"));
        assert!(!matches("debug_?", "debug_xy"));
        assert!(matches("a*b*c", "a_b_c"));
        assert!(!matches("a*b", "a_c"));
        assert!(matches("*a*a*", "banana"));
        assert!(!matches("ab*ba", "aba"), "the runs may not overlap");
        assert!(matches("é?*", "éèx"));
        assert!(matches("exact", "exact"));
        assert!(!matches("exact", "exactly"));
    }

    #[test]
    fn agrees_with_the_recursive_definition() {
        let alphabet = ['a', 'b', '?', '*'];
        let names = [
            "", "a", "b", "ab", "ba", "aab", "abab", "bbaa", "abba", "aaaa",
        ];
        // Every glob of up to four units over the alphabet.
        let mut globs = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = globs
                .iter()
                .flat_map(|g| alphabet.iter().map(move |c| format!("{g}{c}")))
                .collect();
            globs.extend(longer);
        }
        for glob in &globs {
            let chars: Vec<char> = glob.chars().collect();
            for name in names {
                let name_chars: Vec<char> = name.chars().collect();
                assert_eq!(
                    matches(glob, name),
                    oracle(&chars, &name_chars),
                    "{glob:?} on {name:?}"
                );
            }
        }
    }

    #[test]
    fn many_stars_on_a_long_near_miss_end() {
        // The recursive matcher would take longer than the universe's age on this (the test
        // run's per-test timeout fails it); one pass per run takes milliseconds.
        let glob = Glob::new("*a*a*a*a*a*a*a*a*a*a*b");
        assert!(!glob.matches(&"a".repeat(100_000)));
    }
}
