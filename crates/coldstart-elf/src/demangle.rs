//! Demangling for display only: profiles and order files keep the raw (mangled) names,
//! because linkers match on those.

/// A readable form of a symbol name: Rust (legacy and v0) and C++ names are demangled, any
/// other name is returned unchanged.
pub fn demangle(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        // `{:#}` leaves out the hash suffix of legacy Rust symbols.
        return format!("{d:#}");
    }
    if raw.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(raw) {
            if let Ok(s) = sym.demangle() {
                return s;
            }
        }
    }
    raw.to_owned()
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn cpp_names_are_demangled() {
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
    }

    #[test]
    fn rust_names_are_demangled_without_hash() {
        assert_eq!(demangle("_ZN4core3fmt5write17h0123456789abcdefE"), "core::fmt::write");
        assert_eq!(demangle("_RNvCs1234_7mycrate4main"), "mycrate::main");
    }

    #[test]
    fn c_names_are_unchanged() {
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("Py_Initialize"), "Py_Initialize");
    }
}
