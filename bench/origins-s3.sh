#!/usr/bin/env bash
# clang-19 started over the network from an S3-compatible server (moto, every request signed
# with SigV4) against nginx serving the same bundle as static files, both behind the same
# emulated link (`coldstart serve --proxy ORIGIN --link LINK`), alternately, each start with an
# empty chunk cache. Also times `coldstart publish` of the bundle to the bucket, first and
# again (nothing new).
#
#   bench/origins-s3.sh [-l LINK] [-n STARTS] [-o DIR]
#
# The bundle is built as bench/network-clang.sh builds it: clang-19 and its two LLVM
# libraries, the hot set recorded on `clang --version`, `pack` with its defaults. Needs root
# (FUSE), nginx and moto_server (scripts/setup.sh). DIR (default /var/tmp/coldstart-bench-s3)
# keeps the results; the bundle and the app copy are removed at the end (-k keeps them).
set -eu
link=20mbit/40ms; starts=1; out=/var/tmp/coldstart-bench-s3; keep=""
while getopts l:n:o:k opt; do
    case $opt in
        l) link=$OPTARG ;; n) starts=$OPTARG ;; o) out=$OPTARG ;; k) keep=1 ;;
        *) echo "usage: $0 [-l LINK] [-n STARTS] [-o DIR] [-k]" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/lib.sh"
command -v moto_server >/dev/null || { echo "$0: moto_server missing (scripts/setup.sh)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "$0: nginx missing (scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$out"
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    [ -n "$keep" ] || rm -rf "$out/app" "$out/bundle0" "$out/www" "$out/cache" "$out/cache-rec" "$out/moto"
}
trap cleanup EXIT INT TERM
port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { i=0; until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do i=$((i + 1)); [ $i -lt 600 ] || { echo "$0: $2 did not start" >&2; exit 1; }; sleep 0.1; done; }
now() { date +%s.%N; }

rm -rf "$out/app" "$out/bundle0" "$out/www"
mkdir -p "$out/www"
clang_app "$out/app"
"$cs" pack "$out/app" -o "$out/bundle0" >/dev/null
rm -rf "$out/cache-rec"
"$cs" run "$out/bundle0" --cache-dir "$out/cache-rec" --record "$out/hot-version.json" \
    -- '{root}/bin/clang' --version >/dev/null 2>&1
"$cs" pack "$out/app" --hot-list "$out/hot-version.json" -o "$out/www/bundle" > "$out/pack.txt"
echo "program: $(du -sb "$out/app" | cut -f1) bytes; bundle: $(du -sb "$out/www/bundle" | cut -f1) bytes in $(find "$out/www/bundle" -type f | wc -l) objects"

# nginx: the bundle as static files.
nginx_port=$(port)
mkdir -p "$out/nginx/tmp"
cat > "$out/nginx/nginx.conf" <<EOF
daemon off;
master_process off;
user root;
worker_processes 1;
pid $out/nginx/nginx.pid;
error_log $out/nginx/error.log;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $out/nginx/tmp/body;
    proxy_temp_path $out/nginx/tmp/proxy;
    fastcgi_temp_path $out/nginx/tmp/fastcgi;
    uwsgi_temp_path $out/nginx/tmp/uwsgi;
    scgi_temp_path $out/nginx/tmp/scgi;
    keepalive_requests 100000;
    server { listen 127.0.0.1:$nginx_port; root $out/www; location / { } }
}
EOF
nginx -p "$out/nginx" -c "$out/nginx/nginx.conf" 2>/dev/null &
pids="$pids $!"
wait_port "$nginx_port" nginx

# moto: a bucket, the bundle published to it (any key: moto without IAM takes every signature).
moto_port=$(port)
mkdir -p "$out/moto"
(cd "$out/moto" && exec moto_server -H 127.0.0.1 -p "$moto_port") > "$out/moto/moto.log" 2>&1 &
pids="$pids $!"
wait_port "$moto_port" moto
/usr/bin/python3 -c "import urllib.request as u; u.urlopen(u.Request('http://127.0.0.1:$moto_port/bench', method='PUT'))"
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
unset AWS_PROFILE AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_SESSION_TOKEN
for n in 1 2; do
    t0=$(now)
    "$cs" publish "$out/www/bundle" s3://bench/clang --endpoint "http://127.0.0.1:$moto_port" --json > "$out/publish-$n.json"
    t1=$(now)
    printf 'publish %s: %.1f s, ' "$n" "$(echo "$t1 - $t0" | bc)"
    tr -d ' \n' < "$out/publish-$n.json"; echo
done

# The same link in front of each.
"$cs" serve --proxy "127.0.0.1:$nginx_port" --link "$link" > "$out/nginx-url.txt" 2>/dev/null &
pids="$pids $!"
"$cs" serve --proxy "127.0.0.1:$moto_port" --link "$link" > "$out/s3-url.txt" 2>/dev/null &
pids="$pids $!"
while [ ! -s "$out/nginx-url.txt" ] || [ ! -s "$out/s3-url.txt" ]; do sleep 0.05; done
nginx_url="$(cat "$out/nginx-url.txt")bundle/"
s3_endpoint=$(sed 's|/$||' "$out/s3-url.txt")

echo "| origin | start | clang --version (s) | bytes fetched | requests | failed attempts |"
echo "| --- | --- | --- | --- | --- | --- |"
for i in $(seq "$starts"); do
    for origin in nginx s3; do
        rm -rf "$out/cache"
        if [ $origin = nginx ]; then set -- "$nginx_url"; else set -- s3://bench/clang --endpoint "$s3_endpoint"; fi
        t0=$(now)
        "$cs" run "$@" --json --cache-dir "$out/cache" -- '{root}/bin/clang' --version \
            > /dev/null 2> "$out/report-$origin-$i.json"
        t1=$(now)
        field() { grep -o "\"$1\": [0-9]*" "$out/report-$origin-$i.json" | awk '{print $2}'; }
        printf '| %s | %s | %.2f | %s | %s | %s |\n' "$origin" "$i" "$(echo "$t1 - $t0" | bc)" \
            "$(field bytes_fetched)" "$(field requests)" "$(field failed_attempts)"
    done
done
