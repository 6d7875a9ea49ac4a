//! Page maps: every page of a binary's code (or of a file), coloured by whether start-up
//! touched it. A layout that scatters the hot code over the binary shows as a sprinkle over
//! the whole map; a reordered one as a solid block at the start.
//!
//! Two sources:
//! - a function profile and the binary it names (read with `coldstart-elf`, checked by
//!   build-id): the pages of the executable segments that hold a touched function;
//! - a page profile (`profile --pages`): every page of each file by what happened to it
//!   (faulted, mapped by fault-around, only read into the page cache, untouched).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use coldstart_elf::{ElfInfo, SymbolOptions, PF_X};
use coldstart_profile_format::{Module, Profile};

use crate::bars::{legend, LegendItem};
use crate::input::Inputs;
use crate::svg::{esc, Svg, PAGE_MAPPED, PAGE_READ, PAGE_TOUCHED, PAGE_UNTOUCHED};
use crate::table::Table;
use crate::Section;

/// What happened to a page, least to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PageState {
    /// Not read, mapped or touched.
    Untouched = 0,
    /// Read into the page cache (read-ahead), never mapped by the program.
    Read = 1,
    /// Mapped by fault-around without a fault of its own.
    Mapped = 2,
    /// Touched: a function on it ran, or the program faulted on it.
    Touched = 3,
}

/// One map: a file's pages in file order.
#[derive(Debug, Clone)]
pub struct PageMap {
    /// The file.
    pub path: PathBuf,
    /// `code` (executable segments, from functions) or `file` (every page, from the page trace).
    pub kind: &'static str,
    /// The profile it came from.
    pub source: String,
    /// The workload of that profile.
    pub workload: String,
    /// Each page's state, in file order.
    pub pages: Vec<PageState>,
    /// Functions touched (code maps).
    pub functions: usize,
}

impl PageMap {
    /// The pages in `at_least` or a later state.
    pub fn count(&self, at_least: PageState) -> usize {
        self.pages.iter().filter(|p| **p >= at_least).count()
    }
}

/// System library directories: their modules are shown only when a profile has no other.
fn is_system(path: &Path) -> bool {
    ["/usr/lib", "/lib", "/usr/lib64", "/lib64", "/usr/libexec"].iter().any(|d| path.starts_with(d))
}

/// The modules whose code pages are drawn: those outside the system's directories (the
/// program's own) in the profile's order, or, for a program installed there itself (Debian's
/// clang-19 under /usr/lib/llvm-19, with libLLVM and libclang-cpp), the three whose start-up
/// touched the most functions. At most six.
fn mapped_modules(modules: &[Module]) -> Vec<&Module> {
    let touched: Vec<&Module> = modules.iter().filter(|m| !m.functions.is_empty()).collect();
    let own: Vec<&Module> = touched.iter().copied().filter(|m| !is_system(&m.path)).collect();
    if !own.is_empty() {
        return own.into_iter().take(6).collect();
    }
    let mut busiest = touched;
    busiest.sort_by_key(|m| std::cmp::Reverse(m.functions.len()));
    busiest.into_iter().take(3).collect()
}

/// The code page map of a profiled module, if its binary is still there and the same build.
pub fn code_map(module: &Module, source: &str, workload: &str) -> Result<PageMap, String> {
    let info = ElfInfo::open(
        &module.path,
        &SymbolOptions { debug_roots: Vec::new(), use_debug_files: false },
    )
    .map_err(|e| format!("{}: {e}", module.path.display()))?;
    if let (Some(want), Some(have)) = (&module.build_id, info.build_id_hex()) {
        if *want != have {
            return Err(format!(
                "{} is another build than the one profiled (build-id {have}, profiled {want})",
                module.path.display()
            ));
        }
    }
    // The executable segments' file pages, in file order.
    let mut ranges: Vec<(u64, u64)> = info
        .segments
        .iter()
        .filter(|s| s.flags & PF_X != 0 && s.filesz > 0)
        .map(|s| (s.offset / 4096, (s.offset + s.filesz - 1) / 4096))
        .collect();
    ranges.sort();
    if ranges.is_empty() {
        return Err(format!("{} has no executable segment", module.path.display()));
    }
    let mut index: BTreeMap<u64, usize> = BTreeMap::new();
    for (a, b) in &ranges {
        for p in *a..=*b {
            let n = index.len();
            index.entry(p).or_insert(n);
        }
    }
    let mut pages = vec![PageState::Untouched; index.len()];
    for f in &module.functions {
        let first = info.vaddr_to_page(f.address);
        let last = info.vaddr_to_page(f.address.saturating_add(f.size.max(1) - 1));
        if let (Some(a), Some(b)) = (first, last) {
            for p in a..=b.min(a.saturating_add(index.len() as u64)) {
                if let Some(&i) = index.get(&p) {
                    pages[i] = PageState::Touched;
                }
            }
        }
    }
    Ok(PageMap {
        path: module.path.clone(),
        kind: "code",
        source: source.into(),
        workload: workload.into(),
        pages,
        functions: module.functions.len(),
    })
}

/// The file page maps of a page profile: the files with the most pages touched, at most `n`.
pub fn file_maps(p: &Profile, source: &str, n: usize) -> Vec<PageMap> {
    let Some(pages) = &p.pages else { return Vec::new() };
    let mut maps: Vec<PageMap> = pages
        .files
        .iter()
        .map(|f| PageMap {
            path: f.path.clone(),
            kind: "file",
            source: source.into(),
            workload: p.workload.clone(),
            pages: vec![PageState::Untouched; f.size.div_ceil(4096) as usize],
            functions: 0,
        })
        .collect();
    for a in &pages.accesses {
        let Some(m) = maps.get_mut(a.file) else { continue };
        let state = match a.event.as_str() {
            "fault" => PageState::Touched,
            "map" => PageState::Mapped,
            _ => PageState::Read,
        };
        for p in a.page..a.page.saturating_add(a.count.max(1)).min(m.pages.len() as u64) {
            if let Some(slot) = m.pages.get_mut(p as usize) {
                *slot = (*slot).max(state);
            }
        }
    }
    maps.retain(|m| {
        !m.path.as_os_str().is_empty() && m.path.starts_with("/") && !m.pages.is_empty()
    });
    maps.sort_by_key(|m| std::cmp::Reverse(m.count(PageState::Read)));
    maps.truncate(n);
    maps
}

/// Draw one map: a grid of cells in file order, rows of `cols` cells; when a file has more
/// pages than fit, a cell stands for several pages and shows the most touched of them.
pub fn render(map: &PageMap, width: f64) -> String {
    let n = map.pages.len().max(1);
    let per_cell = n.div_ceil(256 * 48).max(1);
    let cells = n.div_ceil(per_cell);
    let cols = cells.div_ceil(24).clamp(32, 256).min(cells.max(1));
    let cell = (width / cols as f64).min(14.0);
    let rows = cells.div_ceil(cols);
    let mut s = Svg::new(cols as f64 * cell, rows as f64 * cell);
    let gap = if cell >= 5.0 { 1.0 } else { 0.0 };
    for c in 0..cells {
        let chunk = &map.pages[c * per_cell..((c + 1) * per_cell).min(map.pages.len())];
        let state = chunk.iter().copied().max().unwrap_or(PageState::Untouched);
        let colour = match state {
            PageState::Touched => PAGE_TOUCHED,
            PageState::Mapped => PAGE_MAPPED,
            PageState::Read => PAGE_READ,
            PageState::Untouched => PAGE_UNTOUCHED,
        };
        let (x, y) = ((c % cols) as f64 * cell, (c / cols) as f64 * cell);
        let title = if per_cell == 1 {
            String::new()
        } else {
            format!("pages {}-{}", c * per_cell, c * per_cell + chunk.len() - 1)
        };
        s.rect(x, y, cell - gap, cell - gap, colour, &title);
    }
    s.finish(&format!("page map of {}", map.path.display()))
}

/// The page maps of every profile given, the maps of one file side by side.
pub fn section(inputs: &Inputs) -> Option<Section> {
    let (maps, notes) = all_maps(inputs);
    if maps.is_empty() {
        if notes.is_empty() {
            return None;
        }
        return Some(Section {
            id: "pages".into(),
            title: "Page maps".into(),
            html: format!(
                "<ul>{}</ul>",
                notes.iter().map(|n| format!("<li>{}</li>", esc(n))).collect::<String>()
            ),
            tables: Vec::new(),
        });
    }
    let mut table = Table::new(
        "pages",
        &[
            "profile",
            "workload",
            "file",
            "kind",
            "pages",
            "touched",
            "mapped_or_more",
            "read_or_more",
            "functions",
        ],
    );
    let mut html = String::from(
        "<p>Every page of each binary's code, in file order, coloured by whether start-up \
         touched it (a function on it ran). A layout that leaves hot code scattered needs a \
         page for every few functions; one ordered by first touch packs them into a block at \
         the start. Maps of one file from several profiles (the default layout and the \
         reordered copy, or two workloads) stand together. From page profiles \
         (<code>profile --pages</code>): every page of the files start-up read most, by what \
         happened to it.</p>",
    );
    html.push_str(&page_legend());
    for (k, group) in by_file(&maps) {
        html.push_str(&format!(
            r#"<h3>{} <small>{}</small></h3><div class="maps">"#,
            esc(&k.1),
            if k.0 { "every page of the file" } else { "code pages" }
        ));
        for m in &group {
            html.push_str(&map_figure(m, if group.len() > 1 { 470.0 } else { 960.0 }));
            table.push(vec![
                m.source.clone(),
                m.workload.clone(),
                m.path.display().to_string(),
                m.kind.into(),
                m.pages.len().to_string(),
                m.count(PageState::Touched).to_string(),
                m.count(PageState::Mapped).to_string(),
                m.count(PageState::Read).to_string(),
                m.functions.to_string(),
            ]);
        }
        html.push_str("</div>");
    }
    if !notes.is_empty() {
        html.push_str(&crate::html::notes(&notes));
    }
    html.push_str(&table.html("The figures", false));
    Some(Section {
        id: "pages".into(),
        title: "Page maps: what start-up touches".into(),
        html,
        tables: vec![table],
    })
}

/// The code page map of every module of every profile that has symbols, and the file page
/// maps of its page profile; with a note for each code map that could not be drawn.
fn all_maps(inputs: &Inputs) -> (Vec<PageMap>, Vec<String>) {
    let mut maps: Vec<PageMap> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for (src, p) in inputs.profiles() {
        let name = src.name();
        for m in mapped_modules(&p.modules) {
            if m.symbols == "none" {
                continue;
            }
            match code_map(m, &name, &p.workload) {
                Ok(map) => maps.push(map),
                Err(e) => notes.push(format!("{name}: no code page map: {e}")),
            }
        }
        maps.extend(file_maps(p, &name, 6));
    }
    (maps, notes)
}

/// The maps grouped by file, code maps first: a group for each (not code, file name), the
/// name and not the path, as a reordered copy lives elsewhere.
fn by_file(maps: &[PageMap]) -> Vec<((bool, String), Vec<&PageMap>)> {
    let key = |m: &PageMap| {
        (
            m.kind != "code",
            m.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
        )
    };
    let mut order: Vec<(bool, String)> = Vec::new();
    for m in maps {
        if !order.contains(&key(m)) {
            order.push(key(m));
        }
    }
    order.sort_by_key(|k| k.0);
    order
        .into_iter()
        .map(|k| {
            let group = maps.iter().filter(|m| key(m) == k).collect();
            (k, group)
        })
        .collect()
}

/// The legend of the page states' colours.
fn page_legend() -> String {
    legend(&[
        LegendItem {
            key: "touched".into(),
            colour: PAGE_TOUCHED.into(),
            label: "touched (ran, or faulted)".into(),
        },
        LegendItem {
            key: "mapped".into(),
            colour: PAGE_MAPPED.into(),
            label: "mapped by fault-around".into(),
        },
        LegendItem {
            key: "read".into(),
            colour: PAGE_READ.into(),
            label: "read ahead, never mapped".into(),
        },
        LegendItem {
            key: "untouched".into(),
            colour: PAGE_UNTOUCHED.into(),
            label: "untouched".into(),
        },
    ])
}

/// One page map drawn `width` wide, with a caption that says what it shows: for code, the
/// pages touched and the functions; for a file, the pages faulted, mapped and read.
fn map_figure(m: &PageMap, width: f64) -> String {
    let touched = m.count(PageState::Touched);
    let total = m.pages.len();
    let what = if m.kind == "code" {
        format!(
            "{touched} of {total} code pages touched ({:.0}%), {} functions",
            pct(touched, total),
            m.functions
        )
    } else {
        format!(
            "{} of {total} pages faulted, {} mapped, {} read ({:.0}% of the file read)",
            touched,
            m.count(PageState::Mapped) - touched,
            m.count(PageState::Read) - m.count(PageState::Mapped),
            pct(m.count(PageState::Read), total)
        )
    };
    format!(
        r#"<figure class="map">{}<figcaption><b>{}</b> (workload {}): {}<br><span class="path">{}</span></figcaption></figure>"#,
        render(m, width),
        esc(&m.source),
        esc(&m.workload),
        esc(&what),
        esc(&m.path.display().to_string())
    )
}

fn pct(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pages: Vec<PageState>) -> PageMap {
        PageMap {
            path: "/x".into(),
            kind: "code",
            source: "p".into(),
            workload: "a".into(),
            pages,
            functions: 0,
        }
    }

    /// A profile of Debian's clang-19: every module under /usr/lib, libc first. Only libc,
    /// the first, was drawn; the busiest (libLLVM, libclang-cpp) are the ones to see.
    #[test]
    fn a_program_installed_under_usr_lib_maps_its_busiest_modules_not_the_first() {
        let module = |path: &str, n: usize| Module {
            path: path.into(),
            build_id: None,
            size: 0,
            mtime: 0,
            load_bias: 0,
            symbols: "symtab".into(),
            functions_total: n,
            functions: (0..n)
                .map(|i| coldstart_profile_format::Touch {
                    address: i as u64,
                    size: 1,
                    names: vec![format!("f{i}")],
                    first_touch_ns: i as u64,
                    pid: 1,
                    tid: 1,
                    ordinal: i as u64,
                    workloads: Vec::new(),
                })
                .collect(),
        };
        let modules = vec![
            module("/usr/lib/x86_64-linux-gnu/libc.so.6", 111),
            module("/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1", 1592),
            module("/usr/lib/x86_64-linux-gnu/libclang-cpp.so.19.1", 953),
            module("/usr/lib/llvm-19/bin/clang", 6),
            module("/usr/lib/x86_64-linux-gnu/libz3.so.4", 0),
        ];
        let names: Vec<String> =
            mapped_modules(&modules).iter().map(|m| m.path.display().to_string()).collect();
        assert_eq!(
            names,
            [
                "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1",
                "/usr/lib/x86_64-linux-gnu/libclang-cpp.so.19.1",
                "/usr/lib/x86_64-linux-gnu/libc.so.6"
            ]
        );
        let mut with_own = modules;
        with_own.push(module("/opt/app/bin/app", 3));
        let names: Vec<String> =
            mapped_modules(&with_own).iter().map(|m| m.path.display().to_string()).collect();
        assert_eq!(names, ["/opt/app/bin/app"], "a program's own modules come first");
    }

    #[test]
    fn one_cell_per_page_in_file_order() {
        let mut pages = vec![PageState::Untouched; 100];
        pages[3] = PageState::Touched;
        let svg = render(&map(pages), 960.0);
        assert_eq!(svg.matches("<rect").count(), 100);
        assert_eq!(svg.matches(PAGE_TOUCHED).count(), 1);
    }

    #[test]
    fn a_large_file_folds_pages_into_cells_that_show_the_most_touched() {
        let mut pages = vec![PageState::Untouched; 40_000];
        pages[39_999] = PageState::Touched;
        let svg = render(&map(pages), 960.0);
        let cells = svg.matches("<rect").count();
        assert!(cells <= 256 * 48, "{cells}");
        assert_eq!(svg.matches(PAGE_TOUCHED).count(), 1, "the last page still shows");
    }
}
