//! One module per subcommand: its clap `Args`, the conversion to library options, and printing.

pub mod analyze;
pub mod bolt;
pub mod common;
pub mod demo;
pub mod experiment;
pub mod gate;
pub mod key;
pub mod launch;
pub mod link;
pub mod measure;
pub mod mount;
pub mod order;
pub mod pack;
pub mod predict;
pub mod prefetch;
pub mod profile;
pub mod publish;
pub mod report;
pub mod run;
pub mod sample;
pub mod serve;
pub mod timeline;
pub mod verify;
