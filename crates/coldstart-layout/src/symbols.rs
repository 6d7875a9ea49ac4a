//! Symbol binding, which `coldstart-elf`'s function list does not keep: whether a name is
//! defined by one global symbol or by several local (`static`) ones. Linkers match order
//! entries by name, so a local name defined in several object files is ambiguous: every
//! copy moves together, hot or not.

use std::collections::HashMap;
use std::path::Path;

use object::{Object, ObjectSymbol, SymbolKind};

use crate::LayoutError;

/// How each function name of a binary is defined.
#[derive(Debug, Clone, Default)]
pub struct Bindings {
    locals: HashMap<String, usize>,
    globals: HashMap<String, usize>,
}

impl Bindings {
    /// Read the function symbols of `path` (`.symtab`, else `.dynsym`).
    pub fn read(path: &Path) -> Result<Bindings, LayoutError> {
        crate::binary::with_object(path, |file| {
            let mut b = Bindings::default();
            let mut any = false;
            for sym in file.symbols() {
                any = true;
                b.add(&sym);
            }
            if !any {
                for sym in file.dynamic_symbols() {
                    b.add(&sym);
                }
            }
            b
        })
    }

    fn add<'a>(&mut self, sym: &impl ObjectSymbol<'a>) {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() {
            return;
        }
        let Ok(name) = sym.name() else { return };
        if name.is_empty() {
            return;
        }
        let map = if sym.is_local() { &mut self.locals } else { &mut self.globals };
        *map.entry(name.to_owned()).or_default() += 1;
    }

    /// Number of local definitions of `name`.
    pub fn local_count(&self, name: &str) -> usize {
        self.locals.get(name).copied().unwrap_or(0)
    }

    /// Whether `name` is defined at all.
    pub fn defines(&self, name: &str) -> bool {
        self.locals.contains_key(name) || self.globals.contains_key(name)
    }

    /// Whether `name` is local (static) only.
    pub fn is_local(&self, name: &str) -> bool {
        self.locals.contains_key(name) && !self.globals.contains_key(name)
    }

    /// Whether the name is defined more than once (several statics, or a static and a
    /// global): a linker matching by name moves all of them.
    pub fn is_ambiguous(&self, name: &str) -> bool {
        self.local_count(name) + self.globals.get(name).copied().unwrap_or(0) > 1
    }

    /// Build from explicit lists (tests).
    pub fn from_lists(locals: &[&str], globals: &[&str]) -> Bindings {
        let mut b = Bindings::default();
        for l in locals {
            *b.locals.entry((*l).to_owned()).or_default() += 1;
        }
        for g in globals {
            *b.globals.entry((*g).to_owned()).or_default() += 1;
        }
        b
    }
}
