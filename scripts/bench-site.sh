# Sourced by the storage-bridging benchmarks (bench-s3.sh, bench-bridge.sh):
# one site on loopback, torn down on exit, everything in one directory under
# /var/tmp (the file system of the raw baselines):
#   versitygw (the real S3 server of the tests) on $VPORT, key benchkey,
#   secret benchsecret123, data in $WORK/vgw;
#   `labios serve` with its data in $WORK/labios ($LABIOS_ENDPOINT and
#   $LABIOS_DATA_DIR exported: `labios s3` finds the server's service
#   secret through the data directory), the application's $KEY and $SECRET;
#   `labios s3` at $URL.
#
#   start_site NAME APP   (after BIN is set; WORK is /var/tmp/labios-NAME.*)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

cleanup_site() {
    set +e
    [ -f "$WORK/s3.pid" ] && kill "$(cat "$WORK/s3.pid")" 2>/dev/null
    [ -f "$WORK/serve.pid" ] && kill "$(cat "$WORK/serve.pid")" 2>/dev/null
    bash scripts/services.sh stop-versitygw "$WORK/vgw" >/dev/null 2>&1
    wait 2>/dev/null
    rm -rf "$WORK"
}

start_site() {
    local name=${1:?usage: start_site NAME APP} app=${2:?usage: start_site NAME APP} creds
    WORK="$(mktemp -d -p /var/tmp "labios-$name.XXXXXX")"
    trap cleanup_site EXIT
    trap 'exit 130' INT TERM
    VPORT=$(free_port)
    bash scripts/services.sh start-versitygw "$VPORT" "$WORK/vgw" benchkey benchsecret123 >/dev/null
    export LABIOS_ENDPOINT="$WORK/labios/labios.sock" LABIOS_DATA_DIR="$WORK/labios"
    "$BIN" serve --data-dir "$WORK/labios" >"$WORK/serve.log" 2>&1 &
    echo $! >"$WORK/serve.pid"
    for _ in $(seq 100); do [ -S "$LABIOS_ENDPOINT" ] && break; sleep 0.1; done
    creds=$("$BIN" app create "$app")
    KEY=$(awk '/^key:/ {print $2}' <<<"$creds")
    SECRET=$(awk '/^secret:/ {print $2}' <<<"$creds")
    "$BIN" s3 --listen 127.0.0.1:0 >"$WORK/s3.log" 2>&1 &
    echo $! >"$WORK/s3.pid"
    URL=""
    for _ in $(seq 100); do
        URL=$(grep -o 'http://[0-9.:]*' "$WORK/s3.log" | head -1 || true)
        [ -n "$URL" ] && break
        sleep 0.1
    done
    [ -n "$URL" ] || { cat "$WORK/s3.log" >&2; exit 1; }
}
