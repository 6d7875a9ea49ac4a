//! The strategies: when to fetch what. The engine carries them out, the model predicts them;
//! this module is what both name, and depends on neither. A user asks for one of them or for
//! `auto` ([`StrategyOrAuto`]).

use std::fmt;
use std::str::FromStr;

use coldstart_bundle::{Chunk, Manifest, Sha256Hex};
use serde::{Deserialize, Serialize};

/// When to fetch what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Download the program whole before it starts: each object (the hot part, then each
    /// file's cold object, in manifest order) in one request, one at a time (what
    /// downloading the program does).
    Original,
    /// Fetch each chunk on first use.
    Paged,
    /// Start at once; the hot set streams in one request while the program runs, chunks
    /// outside it are fetched on first use.
    ReorderedPaged,
    /// Fetch the hot set in one request before the program starts, the rest on first use.
    Reordered,
    /// Like `reordered-paged`, then the rest of the bundle in the background; a miss goes
    /// ahead of background work.
    Stream,
}

impl Strategy {
    /// Every strategy, in the paper's order.
    pub const ALL: [Strategy; 5] = [
        Strategy::Original,
        Strategy::Paged,
        Strategy::ReorderedPaged,
        Strategy::Reordered,
        Strategy::Stream,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Original => "original",
            Strategy::Paged => "paged",
            Strategy::ReorderedPaged => "reordered-paged",
            Strategy::Reordered => "reordered",
            Strategy::Stream => "stream",
        }
    }

    /// Whether it fetches the hot set in one request (the start object's): `reordered`,
    /// `reordered-paged` and `stream`.
    pub fn uses_hot_set(self) -> bool {
        matches!(self, Strategy::Reordered | Strategy::ReorderedPaged | Strategy::Stream)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The objects `original` downloads whole before the program starts: the start object's hot
/// part, then each cold object (in manifest order, which is that of the files they belong to),
/// with their pieces by offset; an object whose pieces are all `cached` is left out. Lazily,
/// so that a download in between counts: the engine downloads them, the model counts them.
pub(crate) fn whole_objects<'m>(
    manifest: &'m Manifest,
    cached: impl Fn(&Sha256Hex) -> bool + 'm,
) -> impl Iterator<Item = (Option<usize>, Vec<&'m Chunk>)> + 'm {
    manifest
        .pieces_by_object()
        .into_iter()
        .filter(move |(_, pieces)| !pieces.is_empty() && !pieces.iter().all(|c| cached(&c.sha256)))
}

/// An unknown strategy name.
#[derive(Debug, thiserror::Error)]
#[error("unknown strategy `{0}`: use original, paged, reordered-paged, reordered or stream")]
pub struct StrategyParseError(String);

impl FromStr for Strategy {
    type Err = StrategyParseError;
    fn from_str(s: &str) -> Result<Strategy, StrategyParseError> {
        Strategy::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| StrategyParseError(s.to_owned()))
    }
}

/// A strategy, or `auto`: predict each on the link and take the fastest
/// ([`crate::model`]). What a user asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyOrAuto {
    /// Pick by the model (`--strategy auto`).
    Auto,
    /// This one.
    Fixed(Strategy),
}

impl FromStr for StrategyOrAuto {
    type Err = StrategyParseError;
    fn from_str(s: &str) -> Result<StrategyOrAuto, StrategyParseError> {
        if s == "auto" {
            Ok(StrategyOrAuto::Auto)
        } else {
            s.parse().map(StrategyOrAuto::Fixed)
        }
    }
}

impl fmt::Display for StrategyOrAuto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StrategyOrAuto::Auto => f.write_str("auto"),
            StrategyOrAuto::Fixed(s) => s.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategies_parse_by_name() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>().unwrap(), s);
        }
        assert!("fast".parse::<Strategy>().unwrap_err().to_string().contains("reordered-paged"));
        assert_eq!("auto".parse::<StrategyOrAuto>().unwrap(), StrategyOrAuto::Auto);
        assert_eq!("stream".parse::<StrategyOrAuto>().unwrap().to_string(), "stream");
        assert!("fast".parse::<StrategyOrAuto>().is_err());
    }
}
