//! Exporters: every format renders the same [`MeasureReport`](crate::result::MeasureReport).
//!
//! STATUS: interface fixed by the workspace skeleton; implementation in progress.

// ---- TEMPORARY SHIM (removed before merge; the real implementation lives in this file) ----
use crate::result::MeasureReport;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ExportError(String);

pub fn to_json(r: &MeasureReport) -> String {
    serde_json::to_string_pretty(r).unwrap()
}
pub fn from_json(s: &str) -> Result<MeasureReport, ExportError> {
    serde_json::from_str(s).map_err(|e| ExportError(e.to_string()))
}
pub fn to_csv(r: &MeasureReport) -> String {
    format!(
        "label,run,wall_s\n{}",
        r.commands
            .iter()
            .flat_map(|c| c
                .runs
                .iter()
                .map(move |x| format!("{},{},{}\n", c.label, x.index, x.counters.wall_s)))
            .collect::<String>()
    )
}
pub fn to_markdown(r: &MeasureReport) -> String {
    format!(
        "| command | median |\n|---|---|\n{}",
        r.commands
            .iter()
            .map(|c| format!("| {} | {:?} |\n", c.label, c.summaries.first()))
            .collect::<String>()
    )
}
pub fn to_table(r: &MeasureReport) -> String {
    r.commands
        .iter()
        .map(|c| {
            format!(
                "{}: {}\n",
                c.label,
                c.summaries
                    .iter()
                    .map(|(k, s)| format!("{k}={:.6}", s.median))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        })
        .collect()
}
pub fn write_atomic(path: &std::path::Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}
