//! The static call graph of a program's own binaries, and where it places the code no
//! profile touched.
//!
//! A profile lists what one workload ran; another workload runs most of that and some code
//! the profile never saw. `--symbol-ordering-file` leaves every unlisted function in input
//! order, among cold code, where each one a start-up needs costs a read of its own. The
//! functions most likely to be needed next are the ones the profiled code can call: the
//! callees of its untaken branches, and theirs. This module finds them by decoding the
//! direct calls and jumps of every function (x86-64, with `iced-x86`): a `call rel32`,
//! a `jmp` or `jcc` to another function's entry (a tail call), and a call or jump through
//! the GOT (a PLT stub or `-fno-plt`), which names a function another module defines.
//!
//! [`neighbours`] then ranks the functions no workload touched by a walk from the touched
//! ones: each function passes its score, split evenly, to its callees (a caller with one
//! callee surely calls it if it runs; a dispatcher with a hundred calls each one rarely),
//! touched functions starting at 1, up to [`MAX_DEPTH`] calls away. The functions reached
//! are placed right after the touched ones, likeliest first; the rest stay in input order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction};
use object::{Object, ObjectSymbol, ObjectSymbolTable, RelocationTarget};

use crate::LayoutError;

/// How many words of a table a reference into data reads at most.
const TABLE_WORDS: u64 = 32;

/// How many calls away from a touched function the walk goes.
pub const MAX_DEPTH: usize = 3;

/// Where a call goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Callee {
    /// A function of the same binary (its index).
    Local(usize),
    /// A function another module defines, by name (a call through the PLT or the GOT).
    Import(String),
}

/// The direct calls of one binary's functions.
#[derive(Debug, Clone, Default)]
pub struct CallGraph {
    /// The binary.
    pub path: PathBuf,
    /// Every function's names (aliases), in address order.
    pub names: Vec<Vec<String>>,
    /// Every function's size in bytes.
    pub sizes: Vec<u64>,
    /// Each function's distinct callees, in the order of their first call.
    pub callees: Vec<Vec<Callee>>,
    by_name: HashMap<String, usize>,
}

impl CallGraph {
    /// Decode every function of the x86-64 ELF file `path`: its direct calls and tail calls,
    /// and with `references` also the functions whose address it takes and the functions in
    /// the tables of pointers it refers to (vtables, handler tables). Other machines give a
    /// graph without edges (nothing is placed by it).
    pub fn read(path: &Path, references: bool) -> Result<CallGraph, LayoutError> {
        let info = coldstart_elf::ElfInfo::open(path, &coldstart_elf::SymbolOptions::default())?;
        let map = coldstart_elf::Mmap::open(path)?;
        let (got, relative) = crate::binary::with_object(path, got_slots)?;
        let mut graph = CallGraph { path: path.to_owned(), ..CallGraph::default() };
        for (i, f) in info.functions.iter().enumerate() {
            for n in &f.names {
                graph.by_name.entry(n.clone()).or_insert(i);
            }
            graph.names.push(f.names.clone());
            graph.sizes.push(f.size);
        }
        let mut code = Code::new(&info, map.bytes(), got, relative);
        let x86_64 = info.machine == coldstart_elf::Machine::X86_64;
        for (i, f) in info.functions.iter().enumerate() {
            let callees = if x86_64 { code.callees(i, f, references) } else { Vec::new() };
            graph.callees.push(callees);
        }
        Ok(graph)
    }

    /// The function defining `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The number of functions.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the binary has no functions.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// A graph from explicit functions and calls (tests): `calls[i]` are the callee names
    /// of function `i`; a name no function has is an import.
    pub fn from_calls(path: &Path, functions: &[&str], calls: &[&[&str]]) -> CallGraph {
        let mut g = CallGraph { path: path.to_owned(), ..CallGraph::default() };
        for (i, f) in functions.iter().enumerate() {
            g.by_name.insert((*f).to_owned(), i);
            g.names.push(vec![(*f).to_owned()]);
            g.sizes.push(16);
        }
        for i in 0..functions.len() {
            let list = calls.get(i).copied().unwrap_or(&[]);
            let out = list
                .iter()
                .map(|c| match g.find(c) {
                    Some(j) => Callee::Local(j),
                    None => Callee::Import((*c).to_owned()),
                })
                .collect();
            g.callees.push(out);
        }
        g
    }
}

/// What decoding a binary's functions looks up: its bytes by address, its functions'
/// entries, its GOT slots and relative relocations and its data sections; with the stubs
/// and tables of pointers found so far.
struct Code<'a> {
    info: &'a coldstart_elf::ElfInfo,
    bytes: &'a [u8],
    /// GOT slot -> the name of the symbol the loader writes there.
    got: HashMap<u64, String>,
    /// Slot -> the value of its relative relocation.
    relative: HashMap<u64, u64>,
    /// Function entry address -> the function's index.
    starts: HashMap<u64, usize>,
    /// Data the loader or the file gives a value: sections with file bytes, not code,
    /// sorted.
    data: Vec<(u64, u64)>,
    /// Call target outside every function -> the import its stub jumps to.
    stubs: HashMap<u64, Option<String>>,
    /// Address in data -> the functions of the table there.
    tables: HashMap<u64, Vec<usize>>,
}

impl<'a> Code<'a> {
    fn new(
        info: &'a coldstart_elf::ElfInfo,
        bytes: &'a [u8],
        got: HashMap<u64, String>,
        relative: HashMap<u64, u64>,
    ) -> Code<'a> {
        let starts = info.functions.iter().enumerate().map(|(i, f)| (f.address, i)).collect();
        let mut data: Vec<(u64, u64)> = info
            .sections
            .iter()
            .filter(|s| s.address != 0 && s.offset.is_some() && !s.executable && s.size > 0)
            .map(|s| (s.address, s.address + s.size))
            .collect();
        data.sort_unstable();
        Code {
            info,
            bytes,
            got,
            relative,
            starts,
            data,
            stubs: HashMap::new(),
            tables: HashMap::new(),
        }
    }

    /// The `len` bytes the file holds at virtual address `vaddr`.
    fn code_at(&self, vaddr: u64, len: u64) -> Option<&'a [u8]> {
        let bytes: &'a [u8] = self.bytes;
        let off = self.info.vaddr_to_offset(vaddr)? as usize;
        bytes.get(off..off.checked_add(len as usize)?)
    }

    /// The import a call to a stub (the PLT) reaches: the stub's jump through the GOT names
    /// it.
    fn stub(&self, target: u64) -> Option<String> {
        let code = self.code_at(target, 16).or_else(|| self.code_at(target, 8))?;
        let mut d = Decoder::with_ip(64, code, target, DecoderOptions::NONE);
        for _ in 0..3 {
            let ins = d.decode();
            if ins.is_invalid() {
                return None;
            }
            if ins.flow_control() == FlowControl::IndirectBranch && ins.is_ip_rel_memory_operand() {
                return self.got.get(&ins.ip_rel_memory_address()).cloned();
            }
            if ins.flow_control() != FlowControl::Next {
                return None;
            }
        }
        None
    }

    /// Whether `a` is in data the loader or the file gives a value.
    fn is_data(&self, a: u64) -> bool {
        let i = self.data.partition_point(|r| r.1 <= a);
        self.data.get(i).is_some_and(|r| r.0 <= a)
    }

    /// The pointer-sized value at `slot`: what the loader writes (a relative relocation's
    /// addend), else what the file holds (DT_RELR and non-PIE binaries keep it in place).
    fn word_at(&self, slot: u64) -> Option<u64> {
        if let Some(v) = self.relative.get(&slot) {
            return Some(*v);
        }
        if !self.is_data(slot) {
            return None;
        }
        let b = self.code_at(slot, 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// The functions a table at `at` points to (a vtable, a table of callbacks, a static
    /// holding a function pointer), added to `out`: the words from `at` on while they are
    /// function pointers, small numbers (a vtable's size and alignment) or, `depth` levels
    /// deep, pointers to another table.
    fn table(&self, at: u64, depth: usize, out: &mut Vec<usize>) {
        if !at.is_multiple_of(8) {
            return;
        }
        for k in 0..TABLE_WORDS {
            let Some(v) = self.word_at(at + 8 * k) else { return };
            if let Some(&f) = self.starts.get(&v) {
                out.push(f);
            } else if v < 1 << 16 {
                continue;
            } else if depth > 0 && self.is_data(v) {
                self.table(v, depth - 1, out);
            } else {
                return;
            }
        }
    }

    /// The import the stub at `target` jumps to, decoded once.
    fn cached_stub(&mut self, target: u64) -> Option<String> {
        if let Some(s) = self.stubs.get(&target) {
            return s.clone();
        }
        let s = self.stub(target);
        self.stubs.insert(target, s.clone());
        s
    }

    /// The functions of the table at `at`, read once.
    fn cached_table(&mut self, at: u64) -> Vec<usize> {
        if let Some(t) = self.tables.get(&at) {
            return t.clone();
        }
        let mut v = Vec::new();
        self.table(at, 1, &mut v);
        self.tables.insert(at, v.clone());
        v
    }

    /// The distinct callees of function `i` (`f`), in the order of their first call: its
    /// direct calls and tail calls, calls through the GOT, and with `references` the
    /// functions whose address it takes and those of the tables it refers to.
    fn callees(&mut self, i: usize, f: &coldstart_elf::Function, references: bool) -> Vec<Callee> {
        let mut out: Vec<Callee> = Vec::new();
        let Some(code) = self.code_at(f.address, f.size) else { return out };
        let add = |out: &mut Vec<Callee>, c: Callee| {
            if c != Callee::Local(i) && !out.contains(&c) {
                out.push(c);
            }
        };
        let mut d = Decoder::with_ip(64, code, f.address, DecoderOptions::NONE);
        let mut ins = Instruction::default();
        while d.can_decode() {
            d.decode_out(&mut ins);
            match ins.flow_control() {
                FlowControl::Call
                | FlowControl::UnconditionalBranch
                | FlowControl::ConditionalBranch => {
                    let t = ins.near_branch_target();
                    if t >= f.address && t < f.address + f.size.max(1) {
                        continue; // a branch inside the function
                    }
                    let callee = match self.starts.get(&t) {
                        Some(&j) => Some(Callee::Local(j)),
                        None => self.cached_stub(t).map(Callee::Import),
                    };
                    callee.into_iter().for_each(|c| add(&mut out, c));
                }
                FlowControl::IndirectCall | FlowControl::IndirectBranch
                    if ins.is_ip_rel_memory_operand() =>
                {
                    let callee = self.got.get(&ins.ip_rel_memory_address()).cloned();
                    callee.into_iter().for_each(|n| add(&mut out, Callee::Import(n)));
                }
                // A reference: a function's address taken (a callback, a closure), a function
                // pointer loaded from the GOT, or a table of them (a trait object's vtable, a
                // table of handlers).
                FlowControl::Next if references && ins.is_ip_rel_memory_operand() => {
                    let t = ins.ip_rel_memory_address();
                    if let Some(&j) = self.starts.get(&t) {
                        add(&mut out, Callee::Local(j));
                    } else if let Some(name) = self.got.get(&t) {
                        add(&mut out, Callee::Import(name.clone()));
                    } else if self.is_data(t) {
                        for j in self.cached_table(t) {
                            add(&mut out, Callee::Local(j));
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// GOT slot address -> the name of the symbol the loader writes there (`.rela.plt` jump
/// slots and `.rela.dyn` GOT entries); and slot address -> value of every relative
/// relocation (what the loader writes there, less the load bias).
type Slots = (HashMap<u64, String>, HashMap<u64, u64>);

fn got_slots(file: &object::File<'_>) -> Slots {
    let mut out = HashMap::new();
    let mut relative = HashMap::new();
    let (Some(relocs), Some(symbols)) = (file.dynamic_relocations(), file.dynamic_symbol_table())
    else {
        return (out, relative);
    };
    for (address, reloc) in relocs {
        if let object::RelocationFlags::Elf { r_type: object::elf::R_X86_64_RELATIVE } =
            reloc.flags()
        {
            relative.insert(address, reloc.addend() as u64);
            continue;
        }
        let RelocationTarget::Symbol(index) = reloc.target() else { continue };
        let Ok(sym) = symbols.symbol_by_index(index) else { continue };
        if let Ok(name) = sym.name() {
            if !name.is_empty() {
                out.insert(address, name.to_owned());
            }
        }
    }
    (out, relative)
}

/// One program: the call graphs of its own binaries, joined by name.
#[derive(Debug, Clone, Default)]
pub struct Program {
    /// One graph per binary.
    pub graphs: Vec<CallGraph>,
}

impl Program {
    /// The call graphs of `paths` (the executable first: the loader's search order decides
    /// which module defines a name the first). A file that cannot be read is left out and
    /// returned with its error, so the others still count.
    pub fn read(paths: &[PathBuf], references: bool) -> (Program, Vec<(PathBuf, LayoutError)>) {
        let mut program = Program::default();
        let mut failed = Vec::new();
        for p in paths {
            match CallGraph::read(p, references) {
                Ok(g) => program.graphs.push(g),
                Err(e) => failed.push((p.clone(), e)),
            }
        }
        (program, failed)
    }

    /// The module and function defining `name`, by the loader's order.
    fn resolve(&self, name: &str) -> Option<(usize, usize)> {
        self.graphs.iter().enumerate().find_map(|(m, g)| g.find(name).map(|f| (m, f)))
    }

    fn module_of(&self, path: &Path) -> Option<usize> {
        self.graphs
            .iter()
            .position(|g| g.path == path)
            .or_else(|| self.graphs.iter().position(|g| g.path.file_name() == path.file_name()))
    }
}

/// The functions no training workload touched that the touched ones can call, per module
/// (`modules`: the path of each module and its touched names, hottest first), likeliest
/// first. Each list holds the preferred name and size of functions of that module only.
pub fn neighbours(
    program: &Program,
    modules: &[(PathBuf, Vec<String>)],
) -> Vec<Vec<(String, u64)>> {
    type Node = (usize, usize);
    let mut hot: HashMap<Node, ()> = HashMap::new();
    let mut frontier: Vec<(Node, f64)> = Vec::new();
    for (path, names) in modules {
        let Some(m) = program.module_of(path) else { continue };
        for n in names {
            if let Some(f) = program.graphs[m].find(n) {
                if hot.insert((m, f), ()).is_none() {
                    frontier.push(((m, f), 1.0));
                }
            }
        }
    }
    // Score and first discovery of every reached function.
    let mut reached: HashMap<Node, (f64, usize)> = HashMap::new();
    let mut discovery = 0usize;
    for _ in 0..MAX_DEPTH {
        let mut next: Vec<Node> = Vec::new();
        let mut gained: HashMap<Node, f64> = HashMap::new();
        for &((m, f), score) in &frontier {
            let callees: Vec<Node> = program.graphs[m].callees[f]
                .iter()
                .filter_map(|c| match c {
                    Callee::Local(j) => Some((m, *j)),
                    Callee::Import(name) => program.resolve(name),
                })
                .collect();
            if callees.is_empty() {
                continue;
            }
            let share = score / callees.len() as f64;
            for v in callees {
                if hot.contains_key(&v) {
                    continue;
                }
                if !reached.contains_key(&v) && !gained.contains_key(&v) {
                    next.push(v);
                }
                *gained.entry(v).or_default() += share;
            }
        }
        let mut new_frontier = Vec::new();
        for (v, g) in gained {
            let e = reached.entry(v).or_insert_with(|| (0.0, usize::MAX));
            e.0 += g;
        }
        for v in next {
            let e = reached.get_mut(&v).expect("scored above");
            e.1 = discovery;
            discovery += 1;
            new_frontier.push((v, e.0));
        }
        if new_frontier.is_empty() {
            break;
        }
        frontier = new_frontier;
    }
    let mut ranked: Vec<(Node, f64, usize)> =
        reached.into_iter().map(|(v, (s, d))| (v, s, d)).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    let mut out: Vec<Vec<(String, u64)>> = vec![Vec::new(); modules.len()];
    for ((m, f), _, _) in ranked {
        let path = &program.graphs[m].path;
        let Some(slot) = modules.iter().position(|(p, _)| {
            p == path || (p.file_name().is_some() && p.file_name() == path.file_name())
        }) else {
            continue;
        };
        out[slot].push((program.graphs[m].names[f][0].clone(), program.graphs[m].sizes[f]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(graphs: Vec<CallGraph>) -> Program {
        Program { graphs }
    }

    fn names(lists: Vec<Vec<(String, u64)>>) -> Vec<Vec<String>> {
        lists.into_iter().map(|l| l.into_iter().map(|(n, _)| n).collect()).collect()
    }

    #[test]
    fn a_direct_callee_of_a_touched_function_comes_first_then_its_callees() {
        let g = CallGraph::from_calls(
            Path::new("/p/prog"),
            &["main", "run_a", "run_b", "only_b", "deep", "cold"],
            &[&["run_a", "run_b"], &[], &["only_b"], &["deep"], &[], &[]],
        );
        let out = names(neighbours(
            &program(vec![g]),
            &[(PathBuf::from("/p/prog"), vec!["main".into(), "run_a".into()])],
        ));
        assert_eq!(out[0], ["run_b", "only_b", "deep"]);
    }

    #[test]
    fn a_callee_of_a_dispatcher_ranks_below_one_of_a_single_call() {
        // main calls one of many handlers; init always calls setup.
        let mut functions = vec!["main", "init", "setup"];
        let handlers: Vec<String> = (0..10).map(|i| format!("h{i}")).collect();
        functions.extend(handlers.iter().map(String::as_str));
        let refs: Vec<&str> = handlers.iter().map(String::as_str).collect();
        let mut calls: Vec<&[&str]> = vec![&refs, &["setup"]];
        calls.resize(functions.len(), &[]);
        let g = CallGraph::from_calls(Path::new("/p/prog"), &functions, &calls);
        let out = names(neighbours(
            &program(vec![g]),
            &[(PathBuf::from("/p/prog"), vec!["main".into(), "init".into()])],
        ));
        assert_eq!(out[0][0], "setup");
        assert_eq!(out[0].len(), 11);
    }

    #[test]
    fn calls_into_another_module_place_the_callee_in_that_module() {
        let exe = CallGraph::from_calls(
            Path::new("/p/prog"),
            &["main", "feature_b"],
            &[&["feature_b"], &["lib_b"]],
        );
        let lib = CallGraph::from_calls(Path::new("/p/libprog.so"), &["lib_a", "lib_b"], &[]);
        let out = names(neighbours(
            &program(vec![exe, lib]),
            &[
                (PathBuf::from("/p/prog"), vec!["main".into()]),
                (PathBuf::from("/p/libprog.so"), vec!["lib_a".into()]),
            ],
        ));
        assert_eq!(out, [vec!["feature_b".to_owned()], vec!["lib_b".to_owned()]]);
    }
}
