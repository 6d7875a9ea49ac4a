# What the bench scripts share. Source it after reading the options:
#   . "$(dirname "$0")/lib.sh"
# It sets `root` (the repository), `cs` (the release binary, or $COLDSTART; built when missing)
# and `out` (the -o directory, or a new one under /tmp named after the script).
root=$(cd "$(dirname "$0")/.." && pwd)
cs=${COLDSTART:-$root/target/release/coldstart}
[ -x "$cs" ] || cargo build --release -p coldstart --manifest-path "$root/Cargo.toml"
[ -n "${out:-}" ] || out=$(mktemp -d "/tmp/coldstart-bench-$(basename "$0" .sh).XXXXXX")

# clang_app DIR: Debian's clang-19 with the two libraries it loads (libclang-cpp, libLLVM:
# about 190 MiB) in DIR/bin and DIR/lib, where its rpath finds them.
clang_app() {
    mkdir -p "$1/bin" "$1/lib"
    cp /usr/lib/llvm-19/bin/clang "$1/bin/"
    for lib in libclang-cpp.so.19.1 libLLVM.so.19.1; do
        path=$(ldd /usr/lib/llvm-19/bin/clang | awk -v l="$lib" '$1 == l { print $3 }')
        [ -f "$path" ] || { echo "$0: clang-19 does not load $lib (apt-get install clang-19)" >&2; exit 1; }
        cp "$path" "$1/lib/"
    done
}

# python_app DIR: Debian's Python standard library (/usr/lib/python3.11, with the `.pyc`
# compiled at install; without its static library and tests; times kept by `cp -a`) in
# DIR/lib, for PYTHONHOME=DIR.
python_app() {
    mkdir -p "$1/lib"
    cp -a /usr/lib/python3.11 "$1/lib/"
    for skip in config-3.11-x86_64-linux-gnu test dist-packages site-packages; do
        rm -rf "$1/lib/python3.11/$skip"
    done
}
