# What the short (scripts/fuzz.sh) and long (bench/fuzz.sh) forms of the fuzz targets share:
# the memory limits of each target and its seeds. Sourced, from fuzz/.
#
# libFuzzer's limits make a crash of what the parsers must never do: grow past -rss_limit_mb,
# or ask for one block of more than -malloc_limit_mb (an allocation sized by a number read from
# the input rather than by the input). The ELF target reads files of a few kilobytes: anything
# near 128 MB is a size taken from the file unchecked.

# limits TARGET: libFuzzer's flags for it.
limits() {
    case $1 in
        elf) echo "-rss_limit_mb=1024 -malloc_limit_mb=128" ;;
        *) echo "-rss_limit_mb=2048 -malloc_limit_mb=512" ;;
    esac
}

# seeds TARGET DIR: copies its seeds (fuzz/seeds/TARGET; for elf, two small ELF files of this
# machine) into DIR, keeping what DIR holds.
seeds() {
    if [ -d "seeds/$1" ]; then cp -n "seeds/$1"/* "$2/"; fi
    if [ "$1" = elf ]; then
        cp -n /usr/bin/true "$2/true"
        cp -n /usr/lib/x86_64-linux-gnu/libdl.so.2 "$2/libdl.so.2" 2>/dev/null || true
    fi
}
