//! Readiness signals: when is a program "started"?
//!
//! STATUS: implementation in progress.

/// The signal that ends the start-up of one run.
#[derive(Debug, Clone)]
pub enum Ready {
    /// The process (the root of the tree) exits.
    Exit,
}
