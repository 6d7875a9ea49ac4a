# The options of the bench scripts that take only -r RUNS and -o DIR. Set `runs` to its
# default, then source it before lib.sh:
#   runs=20
#   . "$(dirname "$0")/opts.sh"
#   . "$(dirname "$0")/lib.sh"
out=""
while getopts r:o: opt; do
    case $opt in
        r) runs=$OPTARG ;; o) out=$OPTARG ;;
        *) echo "usage: $0 [-r RUNS] [-o DIR]" >&2; exit 2 ;;
    esac
done
