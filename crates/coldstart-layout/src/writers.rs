//! Order files for each linker, and refusals for the linkers that cannot take one.
//!
//! | format | linker option | one line per function |
//! | --- | --- | --- |
//! | `lld` | `ld.lld --symbol-ordering-file=F` | the raw symbol name |
//! | `gold` | `ld.gold --section-ordering-file=F` | `.text.NAME` and `.text.*.NAME` (GCC's `.text.startup.`/`.text.hot.` prefixes) |
//! | `gnu-ld` | `ld.bfd --section-ordering-file=F` (binutils 2.43+) | a script fragment: `.text : { *(.text.NAME .text.*.NAME) ... }` |
//! | `ld64` | `ld64 -order_file F` | the Mach-O name: `_` + the C-level name |
//! | `bolt` | `llvm-bolt -reorder-functions=user -function-order=F` | the raw symbol name (BOLT finds `static` ones as `NAME/N`) |
//!
//! Raw (mangled) names are written because linkers match on those: C++ `_Z...`, Rust
//! legacy `_ZN...17h<hash>E` and v0 `_R...` names all go through unchanged. Local (static)
//! names are matched by lld, gold, GNU ld and BOLT like global ones, in every object file
//! that defines them; a name defined more than once is reported as ambiguous.
//! Only lld and GNU ld files carry a comment header: gold and BOLT take every line as a
//! name.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::order::Order;
use crate::symbols::Bindings;
use crate::LayoutError;

/// An order-file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// lld's `--symbol-ordering-file`: one name a line.
    Lld,
    /// gold's `--section-ordering-file`: the functions' section names.
    Gold,
    /// GNU ld's (binutils 2.43+) `--section-ordering-file`: a script fragment.
    GnuLd,
    /// ld64's `-order_file`: Mach-O names.
    Ld64,
    /// `llvm-bolt -function-order`: raw symbol names.
    Bolt,
}

impl Format {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Lld => "lld",
            Format::Gold => "gold",
            Format::GnuLd => "gnu-ld",
            Format::Ld64 => "ld64",
            Format::Bolt => "bolt",
        }
    }

    /// The linker flag that takes the file.
    pub fn flag(self, path: &str) -> String {
        match self {
            Format::Lld => format!("-Wl,--symbol-ordering-file={path}"),
            Format::Gold => format!("-fuse-ld=gold -Wl,--section-ordering-file={path}"),
            Format::GnuLd => format!("-fuse-ld=bfd -Wl,--section-ordering-file={path}"),
            Format::Ld64 => format!("-Wl,-order_file,{path}"),
            Format::Bolt => format!("llvm-bolt -reorder-functions=user -function-order={path}"),
        }
    }
}

/// Parse a `--format` value. Linkers that cannot take a function order are refused with
/// the reason and what to do instead.
pub fn parse_format(s: &str) -> Result<Format, LayoutError> {
    match s {
        "lld" | "ld.lld" => Ok(Format::Lld),
        "gold" | "ld.gold" => Ok(Format::Gold),
        "gnu-ld" | "bfd" | "ld.bfd" | "gnu-ld-2.43" => Ok(Format::GnuLd),
        "ld64" | "apple" => Ok(Format::Ld64),
        "bolt" | "llvm-bolt" => Ok(Format::Bolt),
        "mold" => Err(LayoutError::UnsupportedLinker {
            linker: "mold".into(),
            reason: "mold has no symbol or input-section ordering option (its --section-order orders output sections only)".into(),
            alternative: "link this build with lld (`--format lld`, -fuse-ld=lld), or keep mold, add -Wl,--emit-relocs and rewrite the result with `coldstart bolt` (`--format bolt`)".into(),
        }),
        "gnu-ld-old" | "bfd-old" => Err(gnu_ld_too_old(None)),
        other => Err(LayoutError::Invalid(format!(
            "unknown --format `{other}`: use lld, gold, gnu-ld (binutils 2.43+), ld64 or bolt"
        ))),
    }
}

/// The refusal for GNU ld before 2.43 (no `--section-ordering-file`).
pub fn gnu_ld_too_old(version: Option<&str>) -> LayoutError {
    LayoutError::UnsupportedLinker {
        linker: match version {
            Some(v) => format!("GNU ld {v}"),
            None => "GNU ld before 2.43".into(),
        },
        reason: "--section-ordering-file arrived in binutils 2.43; older ld.bfd can order sections only through a full linker script".into(),
        alternative: "use lld (`--format lld`, -fuse-ld=lld) or gold (`--format gold`, -fuse-ld=gold), or rewrite the linked binary with `coldstart bolt`".into(),
    }
}

/// The version of the system's GNU ld (`ld --version`), if it can be run.
pub fn gnu_ld_version() -> Option<(u32, u32)> {
    let out = std::process::Command::new("ld").arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next()?;
    if !first.contains("GNU ld") {
        return None;
    }
    let v = first.split_whitespace().last()?;
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor =
        parts.next()?.chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok()?;
    Some((major, minor))
}

/// What writing an order found out.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WriteReport {
    /// Functions written.
    pub written: usize,
    /// Local names defined more than once in the binary: the linker moves every copy.
    pub ambiguous: Vec<String>,
    /// Names the binary does not define (renamed, inlined or removed since profiling).
    pub not_in_binary: Vec<String>,
    /// Names the format cannot express (glob characters for gold / GNU ld).
    pub skipped: Vec<String>,
    /// Data objects written.
    pub data_written: usize,
    /// Data objects the format cannot order (BOLT moves code only).
    pub data_not_written: usize,
}

/// The line that separates functions from data in lld and ld64 files (a comment to the
/// linker; `verify` stops reading function names there).
pub const DATA_MARKER: &str = "# data objects";

/// The comment that starts one module's names in an lld file (followed by its path, a space
/// and a parenthesised count): `verify` checks a binary against its module's names only.
pub const MODULE_MARKER: &str = "# module ";

/// Write `order` in `format`. With `bindings` (the binary's symbols), ambiguous local names
/// and names missing from the binary are reported.
pub fn write(order: &Order, format: Format, bindings: Option<&Bindings>) -> (String, WriteReport) {
    let mut report = WriteReport::default();
    let mut out = String::new();
    let mut seen = HashSet::new();
    let header = |out: &mut String, comment: &dyn Fn(&str) -> String| {
        let placed = order.functions.len().saturating_sub(order.touched());
        let callees = if placed > 0 {
            format!(", {placed} of them untouched: callees of the touched ones")
        } else {
            String::new()
        };
        out.push_str(&comment(&format!(
            "coldstart {} order of {} ({} functions, {} bytes{callees})",
            order.algorithm.name(),
            order.module.display(),
            order.functions.len(),
            order.bytes()
        )));
    };
    match format {
        Format::Lld => header(&mut out, &|s| format!("# {s}\n")),
        Format::GnuLd => {
            header(&mut out, &|s| format!("/* {s} */\n"));
            out.push_str(".text : {\n");
        }
        _ => {}
    }
    // Where each module's run starts (lld's file marks them with comments).
    let mut starts: HashMap<usize, &crate::order::ModuleRun> = HashMap::new();
    let mut at = 0;
    for r in &order.runs {
        starts.entry(at).or_insert(r);
        at += r.touched + r.untouched;
    }
    for (i, f) in order.functions.iter().enumerate() {
        if format == Format::Lld {
            if let Some(r) = starts.get(&i) {
                out.push_str(&format!(
                    "{MODULE_MARKER}{} ({} touched, {} untouched)\n",
                    r.path.display(),
                    r.touched,
                    r.untouched
                ));
            }
        }
        let name = f.name();
        if !seen.insert(name.to_owned()) {
            continue;
        }
        if let Some(b) = bindings {
            if !f.names.iter().any(|n| b.defines(n)) {
                report.not_in_binary.push(name.to_owned());
            } else if b.is_ambiguous(name) {
                report.ambiguous.push(name.to_owned());
            }
        }
        let globby = name.contains(['*', '?', '[', ']']) || name.contains(char::is_whitespace);
        match format {
            Format::Lld | Format::Bolt => {
                if name.contains(char::is_whitespace) {
                    report.skipped.push(name.to_owned());
                    continue;
                }
                out.push_str(name);
                out.push('\n');
            }
            Format::Gold => {
                if globby {
                    report.skipped.push(name.to_owned());
                    continue;
                }
                out.push_str(&format!(".text.{name}\n.text.*.{name}\n"));
            }
            Format::GnuLd => {
                if globby || name.contains(['(', ')', '{', '}', '"']) {
                    report.skipped.push(name.to_owned());
                    continue;
                }
                out.push_str(&format!("  *(.text.{name} .text.*.{name})\n"));
            }
            Format::Ld64 => {
                if name.contains(char::is_whitespace) {
                    report.skipped.push(name.to_owned());
                    continue;
                }
                out.push('_');
                out.push_str(name);
                out.push('\n');
            }
        }
        report.written += 1;
    }
    if format == Format::GnuLd {
        out.push_str("}\n");
    }
    write_data(order, format, &mut out, &mut report);
    (out, report)
}

fn write_data(order: &Order, format: Format, out: &mut String, report: &mut WriteReport) {
    use crate::data::DataKind;
    if order.data.is_empty() {
        return;
    }
    let plain = |n: &str| !n.contains(char::is_whitespace);
    let safe = |n: &str| plain(n) && !n.contains(['*', '?', '[', ']', '(', ')', '{', '}', '"']);
    match format {
        Format::Bolt => report.data_not_written = order.data.len(),
        Format::Lld | Format::Ld64 => {
            out.push_str(DATA_MARKER);
            out.push('\n');
            for d in order.data.iter().filter(|d| plain(&d.name)) {
                if format == Format::Ld64 {
                    out.push('_');
                }
                out.push_str(&d.name);
                out.push('\n');
                report.data_written += 1;
            }
        }
        Format::Gold => {
            for d in order.data.iter().filter(|d| safe(&d.name)) {
                for prefix in d.kind.section_prefixes() {
                    out.push_str(&format!("{prefix}{}\n", d.name));
                }
                report.data_written += 1;
            }
        }
        Format::GnuLd => {
            for kind in [DataKind::Rodata, DataKind::RelRo, DataKind::Data] {
                let mut block = String::new();
                for d in order.data.iter().filter(|d| d.kind == kind && safe(&d.name)) {
                    let patterns: Vec<String> =
                        kind.section_prefixes().iter().map(|p| format!("{p}{}", d.name)).collect();
                    block.push_str(&format!("  *({})\n", patterns.join(" ")));
                    report.data_written += 1;
                }
                if !block.is_empty() {
                    out.push_str(&format!("{} : {{\n{block}}}\n", kind.output_section()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::{Algorithm, OrderedFunction};

    fn order() -> Order {
        Order {
            module: "/bin/prog".into(),
            algorithm: Algorithm::FirstTouch,
            functions: [
                "main",
                "_ZN3foo3barEv",
                "_ZN4core3fmt5write17h0123456789abcdefE",
                "helper",
            ]
            .iter()
            .map(|n| OrderedFunction { names: vec![(*n).into()], size: 16 })
            .collect(),
            runs: vec![crate::order::ModuleRun {
                path: "/bin/prog".into(),
                touched: 4,
                untouched: 0,
            }],
            unprofiled: crate::order::Unprofiled::Input,
            data: vec![],
        }
    }

    /// The order file of [`order`] in `format`, without a binary.
    fn written(format: Format) -> String {
        write(&order(), format, None).0
    }

    fn with_data() -> Order {
        use crate::data::{DataKind, DataSymbol};
        let mut o = order();
        o.functions.truncate(1);
        o.data = vec![
            DataSymbol { name: "table".into(), kind: DataKind::Rodata, size: 8, offset: 0 },
            DataSymbol { name: "vtable".into(), kind: DataKind::RelRo, size: 8, offset: 8 },
        ];
        o
    }

    #[test]
    fn data_objects_follow_the_functions_in_each_format() {
        let (lld, r) = write(&with_data(), Format::Lld, None);
        assert!(lld.ends_with("main\n# data objects\ntable\nvtable\n"), "{lld}");
        assert_eq!(r.data_written, 2);
        let (gold, _) = write(&with_data(), Format::Gold, None);
        assert!(
            gold.ends_with(".rodata.table\n.data.rel.ro.vtable\n.data.rel.ro.local.vtable\n"),
            "{gold}"
        );
        let (gnu, _) = write(&with_data(), Format::GnuLd, None);
        assert!(
            gnu.ends_with(
                "}\n.rodata : {\n  *(.rodata.table)\n}\n.data.rel.ro : {\n  *(.data.rel.ro.vtable .data.rel.ro.local.vtable)\n}\n"
            ),
            "{gnu}"
        );
        let (bolt, r) = write(&with_data(), Format::Bolt, None);
        assert_eq!(bolt, "main\n");
        assert_eq!(r.data_not_written, 2);
    }

    #[test]
    fn lld_lists_raw_symbol_names_after_a_comment() {
        let (text, r) = write(&order(), Format::Lld, None);
        assert_eq!(
            text,
            "# coldstart first-touch order of /bin/prog (4 functions, 64 bytes)\n\
             # module /bin/prog (4 touched, 0 untouched)\n\
             main\n_ZN3foo3barEv\n_ZN4core3fmt5write17h0123456789abcdefE\nhelper\n"
        );
        assert_eq!(r.written, 4);
    }

    #[test]
    fn lld_marks_each_module_and_verify_reads_a_binarys_own_part() {
        let mut o = order();
        o.runs = vec![
            crate::order::ModuleRun { path: "/bin/prog".into(), touched: 1, untouched: 1 },
            crate::order::ModuleRun {
                path: "/opt/lib dir/libp.so".into(),
                touched: 2,
                untouched: 0,
            },
        ];
        let (text, _) = write(&o, Format::Lld, None);
        assert!(
            text.contains("# module /opt/lib dir/libp.so (2 touched, 0 untouched)\n"),
            "{text}"
        );
        let names = |b: &str| crate::verify::parse_order_file_for(&text, std::path::Path::new(b));
        assert_eq!(names("/build/prog"), ["main", "_ZN3foo3barEv"]);
        assert_eq!(names("libp.so"), ["_ZN4core3fmt5write17h0123456789abcdefE", "helper"]);
        assert!(names("other").is_empty());
    }

    #[test]
    fn gold_lists_function_sections_without_comments() {
        let text = written(Format::Gold);
        assert_eq!(
            text,
            ".text.main\n.text.*.main\n.text._ZN3foo3barEv\n.text.*._ZN3foo3barEv\n\
             .text._ZN4core3fmt5write17h0123456789abcdefE\n.text.*._ZN4core3fmt5write17h0123456789abcdefE\n\
             .text.helper\n.text.*.helper\n"
        );
    }

    #[test]
    fn gnu_ld_writes_a_script_fragment_for_the_text_output_section() {
        let text = written(Format::GnuLd);
        assert_eq!(
            text,
            "/* coldstart first-touch order of /bin/prog (4 functions, 64 bytes) */\n\
             .text : {\n\
             \x20 *(.text.main .text.*.main)\n\
             \x20 *(.text._ZN3foo3barEv .text.*._ZN3foo3barEv)\n\
             \x20 *(.text._ZN4core3fmt5write17h0123456789abcdefE .text.*._ZN4core3fmt5write17h0123456789abcdefE)\n\
             \x20 *(.text.helper .text.*.helper)\n\
             }\n"
        );
    }

    #[test]
    fn ld64_prefixes_the_mach_o_underscore() {
        let text = written(Format::Ld64);
        assert!(text.starts_with("_main\n__ZN3foo3barEv\n"), "{text}");
    }

    #[test]
    fn bolt_has_no_comment_line() {
        let text = written(Format::Bolt);
        assert!(text.starts_with("main\n"), "{text}");
        assert!(!text.contains('#'));
    }

    #[test]
    fn ambiguous_statics_and_missing_names_are_reported() {
        let b = Bindings::from_lists(&["helper", "helper", "_ZN3foo3barEv"], &["main"]);
        let (_, r) = write(&order(), Format::Lld, Some(&b));
        assert_eq!(r.ambiguous, ["helper"]);
        assert_eq!(r.not_in_binary, ["_ZN4core3fmt5write17h0123456789abcdefE"]);
    }

    #[test]
    fn mold_and_old_gnu_ld_are_refused_with_an_alternative() {
        let err = parse_format("mold").unwrap_err().to_string();
        assert!(err.contains("mold") && err.contains("lld"), "{err}");
        let err = gnu_ld_too_old(Some("2.40")).to_string();
        assert!(err.contains("2.43") && err.contains("gold"), "{err}");
    }
}
