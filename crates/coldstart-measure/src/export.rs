//! Exporters: every format renders the same [`MeasureReport`](crate::result::MeasureReport).
//!
//! STATUS: interface fixed by the workspace skeleton; implementation in progress.
