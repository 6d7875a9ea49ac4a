//! STATUS: implementation in progress.
