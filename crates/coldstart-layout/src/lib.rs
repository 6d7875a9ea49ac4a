//! Laying binaries out so that start-up touches few pages.
//!
//! The paper behind coldstart (Lee et al., 1999) found that start-up uses a quarter to a
//! half of each code page it faults in, and that packing the procedures start-up uses
//! contiguously, in first-touch order, lets demand paging read only those. This crate is
//! that step for today's toolchains:
//!
//! - [`input`]: the per-workload first-touch sequences (read from a `coldstart-profile`).
//! - [`order`]: the ordering algorithms (first-touch, weighted merge, temporal clustering).
//! - [`data`]: hot data objects in the order start-up touched their pages.
//! - [`writers`]: order files for lld, gold, GNU ld 2.43+, ld64 and BOLT, and clear
//!   refusals for linkers that cannot take one (mold, older GNU ld).
//! - [`model`]: the page and read-ahead model used to predict pages and faults.
//! - [`analyze`]: the paper's Tables 2 and 3 for a binary and a start-up, plus the pages
//!   read per section class (code, read-only data, relocations, relocated data).
//! - [`evaluate`]: every algorithm against a held-out start-up, before linking.
//! - [`request`]: one order request (`coldstart order`) with its defaults: which module,
//!   which algorithm after an evaluation, which pages for data.
//! - [`verify`]: the names an order expects (from an order file or a profile) and whether
//!   it took effect in a linked binary.
//! - [`drivers`]: running the user's build with the order injected, and llvm-bolt.
//!
//! ```no_run
//! use coldstart_layout::{input::Workload, order, writers};
//!
//! let workloads = Workload::read_profile("a.profile.json".as_ref())?;
//! let o = order::compute(&workloads, None, order::Algorithm::FirstTouch, Default::default())?;
//! let (text, report) = writers::write(&o, writers::Format::Lld, None);
//! std::fs::write("order.txt", text).unwrap();
//! println!("{} functions", report.written);
//! # Ok::<(), coldstart_layout::LayoutError>(())
//! ```

pub mod analyze;
pub mod binary;
pub mod callgraph;
pub mod data;
pub mod drivers;
mod error;
pub mod evaluate;
pub mod input;
pub mod lld;
pub mod model;
pub mod order;
pub mod request;
pub mod siblings;
pub mod symbols;
pub mod verify;
pub mod writers;

pub use error::LayoutError;

/// Write `bytes` to `path` atomically (a temporary file in the same directory, then
/// rename), so a failure never leaves a half-written file.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<(), LayoutError> {
    coldstart_fs::write_atomic(path, bytes).map_err(|e| LayoutError::io("write", path, e))
}

/// The category of `cause` when it is one of this crate's errors: the binary maps it to an
/// exit code.
pub fn error_category(
    cause: &(dyn std::error::Error + 'static),
) -> Option<coldstart_error::Category> {
    coldstart_error::category_of!(cause; crate::LayoutError)
}
