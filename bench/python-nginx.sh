#!/bin/sh
# A real program from nginx with the defaults: /usr/bin/python3 and Debian's standard library
# (/usr/lib/python3.11) packed without a hot set, the bundle directory served by nginx on the
# loopback (no link), then `run --strategy original` and `run --strategy stream` once each with
# an empty chunk cache. Prints pack's origin line, each run's answer, report figures and time.
#
#   bench/python-nginx.sh [-p PORT] [-o DIR]
set -eu
port=18418; out=""
while getopts p:o: opt; do
    case $opt in
        p) port=$OPTARG ;; o) out=$OPTARG ;;
        *) echo "usage: $0 [-p PORT] [-o DIR]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
mkdir -p "$out"
rm -rf "$out/app" "$out/bundle" "$out/cache-"* "$out/nginx"
mkdir -p "$out/app/lib" "$out/app/bin" "$out/nginx/tmp"
cp -a /usr/lib/python3.11 "$out/app/lib/"
cp "$(readlink -f /usr/bin/python3)" "$out/app/bin/python3"
"$cs" pack "$out/app" -o "$out/bundle" | tail -1
n=$out/nginx
cat > "$n/nginx.conf" <<CONF
daemon off; master_process off; user root; worker_processes 1;
pid $n/nginx.pid; error_log $n/error.log;
events { worker_connections 64; }
http {
    access_log off; client_body_temp_path $n/tmp/body; proxy_temp_path $n/tmp/proxy;
    fastcgi_temp_path $n/tmp/fastcgi; uwsgi_temp_path $n/tmp/uwsgi; scgi_temp_path $n/tmp/scgi;
    server { listen 127.0.0.1:$port; root $out/bundle; location / { } }
}
CONF
nginx -p "$n" -c "$n/nginx.conf" &
ng=$!
trap 'kill $ng 2>/dev/null; wait $ng 2>/dev/null; true' EXIT INT TERM
sleep 0.5
for s in original stream; do
    echo "== $s"
    /usr/bin/time -f "%e s wall" "$cs" run "http://127.0.0.1:$port/" --strategy "$s" \
        --cache-dir "$out/cache-$s" --json -- env PYTHONHOME='{root}' '{root}/bin/python3' \
        -c 'import json, email.parser; print("ok", json.dumps([1]))' 2> "$out/$s.err" || echo "exit $?"
    grep -E '"(bytes_fetched|requests|failed_attempts|misses|errors|manifest_source)"' "$out/$s.err"
    tail -1 "$out/$s.err"
done
