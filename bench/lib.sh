# What the bench scripts share. Source it after reading the options:
#   . "$(dirname "$0")/lib.sh"
# It sets `root` (the repository), `cs` (the release binary, or $COLDSTART; built when missing)
# and `out` (the -o directory, or a new one under /tmp named after the script).
root=$(cd "$(dirname "$0")/.." && pwd)
cs=${COLDSTART:-$root/target/release/coldstart}
[ -x "$cs" ] || cargo build --release -p coldstart --manifest-path "$root/Cargo.toml"
[ -n "${out:-}" ] || out=$(mktemp -d "/tmp/coldstart-bench-$(basename "$0" .sh).XXXXXX")
