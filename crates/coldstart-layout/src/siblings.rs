//! Siblings of the touched functions: the other implementations of the trait methods and
//! virtual methods start-up ran, and the other instances of the generic functions it ran.
//!
//! A held-out workload reaches much of the code the profile never saw through dynamic
//! dispatch: a document with a figure calls `<FigureElem as Show>::show` where the profiled
//! one called `<TableElem as Show>::show`; a debugger reading another object format calls
//! another target's `read_symbols` override. No direct call reaches those functions, so the
//! call graph does not place them; what they share with a touched function is a name. A
//! function's family is, for Rust, its demangled path without the hash and, for a method of a
//! trait implementation (`<T as Trait>::method`), `Trait::method` (closures and generic
//! instances share their function's path); for C++, the method's name and parameters without
//! the class (`read_symbols(objfile*)`). The untouched members of a touched function's family
//! are its siblings.
//!
//! A family of many untouched members is a common trait method (`Drop::drop`, `Debug::fmt`,
//! `Clone::clone`): a touched member says little about which others a workload needs, and
//! placing them all would fill the hot region. Families of more than [`MAX_UNTOUCHED`]
//! untouched members are left out; the rest are ranked by the share of the family start-up
//! touched (a family half touched is likelier to need the other half than one touched once
//! in ten), then by the first touch of the family.

use std::collections::{HashMap, HashSet};

use crate::callgraph::CallGraph;

/// Families with more untouched members than this are not placed.
pub const MAX_UNTOUCHED: usize = 24;

/// The family of a raw (mangled) symbol name, or `None` for a name with no family (a plain C
/// function: nothing else implements it).
pub fn family(raw: &str) -> Option<String> {
    let d = coldstart_elf::demangle(raw);
    if d == raw {
        return None;
    }
    // A C++ function's name ends in its parameter list; a Rust path has none.
    if top_level(&d, "(").is_some() {
        cpp_family(&d)
    } else {
        Some(rust_family(&d))
    }
}

/// `<A as B>::m` is `B::m`; any other path is itself.
fn rust_family(path: &str) -> String {
    if let Some(rest) = path.strip_prefix('<') {
        if let Some(close) = matching(rest, '<', '>') {
            let inside = &rest[..close];
            if let Some(at) = top_level(inside, " as ") {
                let tail = rest[close + 1..].trim_start_matches("::");
                return format!("{}::{tail}", &inside[at + 4..]);
            }
        }
    }
    path.to_owned()
}

/// `ns::Class::method(args) const` is `method(args) const`; a free function
/// (`ns::f(args)`) is its own family too, under its unqualified name (overloads in other
/// namespaces are rare; a function named like a method shares its family). `None` when the
/// name has no parameter list (data, or a demangling without one).
fn cpp_family(demangled: &str) -> Option<String> {
    let open = top_level(demangled, "(")?;
    let name = &demangled[..open];
    let method = match last_top_level(name, "::") {
        Some(at) => &name[at + 2..],
        None => name,
    };
    Some(format!("{method}{}", &demangled[open..]))
}

/// The index in `s` of the bracket closing an `open` already consumed, or `None`.
fn matching(s: &str, open: char, close: char) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            if depth == 0 {
                return Some(i);
            }
            depth -= 1;
        }
    }
    None
}

/// Byte offsets in `s` at bracket depth 0 (`<>`, `()`, `[]`).
fn depth_zero(s: &str) -> Vec<bool> {
    let mut depth = 0i32;
    let mut out = Vec::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'<' | b'(' | b'[' => {
                out.push(depth == 0);
                depth += 1;
            }
            b'>' | b')' | b']' => {
                depth -= 1;
                out.push(depth == 0);
            }
            _ => out.push(depth == 0),
        }
    }
    out
}

fn top_level(s: &str, needle: &str) -> Option<usize> {
    let zero = depth_zero(s);
    s.match_indices(needle).map(|(i, _)| i).find(|&i| zero[i])
}

fn last_top_level(s: &str, needle: &str) -> Option<usize> {
    let zero = depth_zero(s);
    s.match_indices(needle).map(|(i, _)| i).filter(|&i| zero[i]).last()
}

/// The siblings of `touched` (hottest first) among `graph`'s functions, likeliest first:
/// (preferred name, size). Functions in `placed` (touched, or placed already) are left out.
pub fn siblings(
    graph: &CallGraph,
    touched: &[String],
    placed: &HashSet<String>,
) -> Vec<(String, u64)> {
    // Every function's family, and the first touch of each touched family.
    let mut members: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, names) in graph.names.iter().enumerate() {
        if let Some(f) = names.iter().find_map(|n| family(n)) {
            members.entry(f).or_default().push(i);
        }
    }
    let mut first_touch: HashMap<String, usize> = HashMap::new();
    let mut hot: HashMap<String, usize> = HashMap::new();
    for (rank, name) in touched.iter().enumerate() {
        let Some(f) = family(name) else { continue };
        first_touch.entry(f.clone()).or_insert(rank);
        *hot.entry(f).or_default() += 1;
    }
    let mut ranked: Vec<(f64, usize, &Vec<usize>)> = Vec::new();
    for (f, rank) in &first_touch {
        let Some(all) = members.get(f) else { continue };
        let untouched =
            all.iter().filter(|&&i| !graph.names[i].iter().any(|n| placed.contains(n))).count();
        if untouched == 0 || untouched > MAX_UNTOUCHED {
            continue;
        }
        let share = hot[f] as f64 / all.len() as f64;
        ranked.push((share, *rank, all));
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (_, _, all) in ranked {
        for &i in all {
            let names = &graph.names[i];
            if names.iter().any(|n| placed.contains(n)) || !seen.insert(i) {
                continue;
            }
            out.push((names[0].clone(), graph.sizes[i]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A legacy Rust symbol of the path `segments` (`<A as T>` is `_$LT$A$u20$as$u20$T$GT$`).
    fn rust(segments: &[&str], hash: &str) -> String {
        let mut s = String::from("_ZN");
        for seg in segments {
            let seg = seg.replace('<', "_$LT$").replace('>', "$GT$").replace(' ', "$u20$");
            let seg = seg.replace("::", "..");
            s.push_str(&format!("{}{seg}", seg.len()));
        }
        format!("{s}17h{hash}E")
    }

    const H1: &str = "0123456789abcdef";
    const H2: &str = "fedcba9876543210";

    #[test]
    fn a_trait_method_of_any_type_is_one_family() {
        let table = rust(&["<typst::TableElem as typst::Show>", "show"], H1);
        let figure = rust(&["<typst::FigureElem as typst::Show>", "show"], H2);
        assert_eq!(family(&table).as_deref(), Some("typst::Show::show"));
        assert_eq!(family(&table), family(&figure));
        // Two instances of one generic function: the same path, another hash.
        let a = rust(&["core", "ptr", "drop_in_place"], H1);
        let b = rust(&["core", "ptr", "drop_in_place"], H2);
        assert_eq!(family(&a).as_deref(), Some("core::ptr::drop_in_place"));
        assert_eq!(family(&a), family(&b));
        assert_eq!(family("plain_c_function"), None);
    }

    #[test]
    fn a_cpp_override_is_the_method_and_its_parameters_without_the_class() {
        // elf_reader::read_symbols(int) const and coff_reader::read_symbols(int) const
        let elf = "_ZNK10elf_reader12read_symbolsEi";
        let coff = "_ZNK11coff_reader12read_symbolsEi";
        assert_eq!(family(elf).as_deref(), Some("read_symbols(int) const"));
        assert_eq!(family(elf), family(coff));
        assert_ne!(family(elf), family("_ZNK10elf_reader12read_symbolsEl"));
        assert_eq!(
            cpp_family("std::map<int, a::b>::find(a::b const&)").as_deref(),
            Some("find(a::b const&)")
        );
    }

    #[test]
    fn siblings_of_a_mostly_touched_family_come_first_and_large_families_stay_out() {
        let mut names: Vec<String> = vec![
            "<A as T>::f".into(),
            "<B as T>::f".into(),
            "<C as T>::f".into(),
            "<A as U>::g".into(),
            "<B as U>::g".into(),
        ];
        for i in 0..30 {
            names.push(format!("<X{i} as Drop>::drop"));
        }
        let raw: Vec<String> = names
            .iter()
            .map(|n| {
                let (ty, method) = n.rsplit_once("::").unwrap();
                rust(&[ty, method], H1)
            })
            .collect();
        let refs: Vec<&str> = raw.iter().map(String::as_str).collect();
        let calls: Vec<&[&str]> = vec![&[]; refs.len()];
        let graph = CallGraph::from_calls(Path::new("/p/prog"), &refs, &calls);
        // Touched: two of T::f's three, one of U::g's two, one drop of thirty.
        let touched = vec![raw[3].clone(), raw[0].clone(), raw[1].clone(), raw[5].clone()];
        let placed: HashSet<String> = touched.iter().cloned().collect();
        let out: Vec<String> =
            siblings(&graph, &touched, &placed).into_iter().map(|(n, _)| n).collect();
        // T::f is two thirds touched, U::g half: C's f first, then B's g; no drops.
        assert_eq!(out, vec![raw[2].clone(), raw[4].clone()]);
    }
}
