#!/usr/bin/env bash
# External services of the distributed deployment (ARCHITECTURE.md "Deployments" 2):
# NATS JetStream for label queues, Redis for warehouse and inventory.
#
#   bash scripts/services.sh install          install every service binary (and iproute2,
#                                             openssl, the C/C++/Fortran toolchain)
#   bash scripts/services.sh start-nats PORT DIR
#   bash scripts/services.sh stop-nats DIR
#   bash scripts/services.sh start-redis PORT DIR [redis-server args]
#   bash scripts/services.sh stop-redis DIR
#   bash scripts/services.sh start-versitygw PORT DIR KEY SECRET
#   bash scripts/services.sh stop-versitygw DIR
#
# Each service keeps its parts in its own functions (install_X, start_X,
# stop_X) so that they can be maintained separately.
set -euo pipefail

# Runs apt-get update at most once per invocation of this script.
APT_UPDATED=${APT_UPDATED:-0}
apt_install() {
    local sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    if [ "$APT_UPDATED" = 0 ]; then
        $sudo apt-get update
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "$@"
}

# Waits up to 10 s until something listens on 127.0.0.1:PORT.
wait_port() {
    local port=$1 i
    for i in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "nothing answers on 127.0.0.1:$port after 10 s" >&2
    return 1
}

# ---------------------------------------------------------------- NATS ----

# nats-server (Debian 12 ships 2.9, which has JetStream with -js).
install_nats() {
    if command -v nats-server >/dev/null 2>&1; then
        echo "nats-server present: $(nats-server --version)"
        return 0
    fi
    apt_install nats-server
    nats-server --version
}

# start_nats PORT DIR: JetStream server on 127.0.0.1:PORT storing in DIR
# (pid in DIR/nats.pid, log in DIR/nats.log).
start_nats() {
    local port=${1:?usage: start_nats PORT DIR} dir=${2:?usage: start_nats PORT DIR}
    mkdir -p "$dir"
    if [ -f "$dir/nats.pid" ] && kill -0 "$(cat "$dir/nats.pid")" 2>/dev/null; then
        echo "nats-server already running (pid $(cat "$dir/nats.pid"))"
        return 0
    fi
    nohup nats-server -js -a 127.0.0.1 -p "$port" -sd "$dir" \
        >"$dir/nats.log" 2>&1 &
    echo $! >"$dir/nats.pid"
    wait_port "$port"
    echo "nats-server on 127.0.0.1:$port (pid $(cat "$dir/nats.pid"), store $dir)"
}

# stop_nats DIR: stops the server started by start_nats with that DIR.
stop_nats() {
    local dir=${1:?usage: stop_nats DIR} pid i
    [ -f "$dir/nats.pid" ] || return 0
    pid=$(cat "$dir/nats.pid")
    if kill "$pid" 2>/dev/null; then
        for i in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    rm -f "$dir/nats.pid"
}

# --------------------------------------------------------------- Redis ----

# redis-server and redis-cli (Debian 12 ships 7.0).
install_redis() {
    if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
        echo "redis-server present: $(redis-server --version)"
        return 0
    fi
    apt_install redis-server redis-tools
    # The Debian package starts a system instance on 6379; LABIOS runs its
    # own servers (start_redis), so leave that one alone but do not rely on it.
    redis-server --version
}

# start_redis PORT DIR [extra redis-server args...]: a server on
# 127.0.0.1:PORT with its append-only file in DIR (pid in DIR/redis.pid,
# log in DIR/redis.log). Durability: appendonly yes, appendfsync everysec
# (at most about one second of acknowledged writes lost on a power cut).
start_redis() {
    local port=${1:?usage: start_redis PORT DIR [args]} dir=${2:?usage: start_redis PORT DIR [args]} i
    shift 2
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [ -f "$dir/redis.pid" ] && kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null; then
        echo "redis-server already running (pid $(cat "$dir/redis.pid"))"
        return 0
    fi
    nohup redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" \
        --appendonly yes --appendfsync everysec --daemonize no "$@" \
        >"$dir/redis.log" 2>&1 &
    echo $! >"$dir/redis.pid"
    wait_port "$port"
    for i in $(seq 1 100); do
        # A PING answered with NOAUTH also proves the server is up.
        if redis-cli -p "$port" PING 2>&1 | grep -qE "PONG|NOAUTH"; then
            echo "redis-server on 127.0.0.1:$port (pid $(cat "$dir/redis.pid"), dir $dir)"
            return 0
        fi
        sleep 0.1
    done
    echo "redis-server on 127.0.0.1:$port does not answer PING; see $dir/redis.log" >&2
    return 1
}

# stop_redis DIR: stops the server started by start_redis with that DIR
# (SIGTERM: Redis flushes its append-only file before exiting).
stop_redis() {
    local dir=${1:?usage: stop_redis DIR} pid i
    [ -f "$dir/redis.pid" ] || return 0
    pid=$(cat "$dir/redis.pid")
    if kill "$pid" 2>/dev/null; then
        for i in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    rm -f "$dir/redis.pid"
}

# ------------------------------------------------------ network namespaces ----

# `ip` (iproute2) for the multi-host test (crates/labios/tests/multihost.rs),
# which builds network namespaces joined by veth pairs and a bridge.
install_netns_tools() {
    if command -v ip >/dev/null 2>&1; then
        echo "ip present: $(ip -V)"
        return 0
    fi
    apt_install iproute2
    ip -V
}

# The openssl CLI: crates/distributed/tests/tls.rs makes a throwaway CA and
# server certificate with it.
install_openssl() {
    if command -v openssl >/dev/null 2>&1; then
        echo "openssl present: $(openssl version)"
        return 0
    fi
    apt_install openssl
    openssl version
}

# C, C++ and Fortran compilers and pkg-config: crates/capi/tests/c_example.rs
# builds the C API examples against labios.pc.
install_c_toolchain() {
    local missing=() tool pkg
    for tool in cc:gcc c++:g++ gfortran:gfortran pkg-config:pkg-config; do
        pkg=${tool#*:}
        tool=${tool%%:*}
        command -v "$tool" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if [ ${#missing[@]} = 0 ]; then
        echo "cc, c++, gfortran, pkg-config present"
        return 0
    fi
    apt_install "${missing[@]}"
}

# The unmodified programs tests/programs.rs and tests/fuse_mount.rs run on
# LABIOS (issues 4 and 12): sqlite3, MPI (mpich), git, fio, rsync, a static
# busybox, and fuse3 (fusermount3, so that a user other than root can
# mount and unmount).
install_programs() {
    local missing=() tool pkg
    for tool in sqlite3:sqlite3 mpicc:libmpich-dev mpiexec:mpich tar:tar git:git fio:fio \
        rsync:rsync busybox:busybox-static fusermount3:fuse3; do
        pkg=${tool#*:}
        tool=${tool%%:*}
        command -v "$tool" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if [ ${#missing[@]} = 0 ]; then
        echo "sqlite3, mpicc, mpiexec, tar, git, fio, rsync, busybox, fusermount3 present"
        return 0
    fi
    apt_install "${missing[@]}"
}

# Debian's Chromium and its chromedriver: crates/labios/tests/s3/test_browser.py
# uploads to the S3 gateway from a page of another origin, through the
# browser's own CORS checks (Selenium, from the test virtualenv, drives it).
install_browser() {
    if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
        echo "chromium, chromedriver present: $(chromium --version)"
        return 0
    fi
    apt_install chromium chromium-driver
}

# ------------------------------------------------------------------ S3 ----

# Go programs are built into this directory, outside any clone, and reused.
TOOLS=${LABIOS_TOOLS:-/var/tmp/labios-tools}
VERSITYGW_VERSION=v1.8.0

# versitygw: a real S3 server (an S3 gateway over a local directory), the
# external object store of the storage-bridging tests and benchmarks. It is
# built from the Go module proxy; Debian ships no S3 server.
install_versitygw() {
    if [ -x "$TOOLS/bin/versitygw" ]; then
        echo "versitygw present: $TOOLS/bin/versitygw"
        return 0
    fi
    command -v go >/dev/null 2>&1 || apt_install golang-go
    mkdir -p "$TOOLS"
    GOPATH="$TOOLS/gopath" GOCACHE="$TOOLS/gocache" GOFLAGS=-modcacherw GOBIN="$TOOLS/bin" \
        go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
    echo "versitygw installed: $TOOLS/bin/versitygw"
}

# The unmodified S3 clients the gateway is tested with: rclone and s3cmd
# from Debian (the aws CLI and boto3 come from PyPI into the test virtualenv).
install_s3_clients() {
    local missing=() tool
    for tool in rclone s3cmd; do
        command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
    done
    if [ ${#missing[@]} = 0 ]; then
        echo "rclone, s3cmd present"
        return 0
    fi
    apt_install "${missing[@]}"
}

# start_versitygw PORT DIR KEY SECRET: versitygw on 127.0.0.1:PORT serving
# buckets as folders of DIR/data (pid in DIR/versitygw.pid, log beside it).
start_versitygw() {
    local port=${1:?usage: start_versitygw PORT DIR KEY SECRET} dir=${2:?} key=${3:?} secret=${4:?}
    mkdir -p "$dir/data"
    dir=$(cd "$dir" && pwd)
    if [ -f "$dir/versitygw.pid" ] && kill -0 "$(cat "$dir/versitygw.pid")" 2>/dev/null; then
        echo "versitygw already running (pid $(cat "$dir/versitygw.pid"))"
        return 0
    fi
    nohup "$TOOLS/bin/versitygw" --access "$key" --secret "$secret" --port "127.0.0.1:$port" \
        posix "$dir/data" >"$dir/versitygw.log" 2>&1 &
    echo $! >"$dir/versitygw.pid"
    wait_port "$port"
    echo "versitygw on 127.0.0.1:$port (pid $(cat "$dir/versitygw.pid"), data $dir/data)"
}

# stop_versitygw DIR: stops the server started by start_versitygw with that DIR.
stop_versitygw() {
    local dir=${1:?usage: stop_versitygw DIR}
    [ -f "$dir/versitygw.pid" ] || return 0
    kill "$(cat "$dir/versitygw.pid")" 2>/dev/null || true
    rm -f "$dir/versitygw.pid"
}

# ------------------------------------------------------------ commands ----

case "${1:-}" in
install)
    install_nats
    install_redis
    install_netns_tools
    install_openssl
    install_c_toolchain
    install_programs
    install_versitygw
    install_s3_clients
    install_browser
    ;;
start-versitygw)
    start_versitygw "${2:-7070}" "${3:-/tmp/labios-s3}" "${4:-labiostest}" "${5:-labiostestsecret}"
    ;;
stop-versitygw)
    stop_versitygw "${2:-/tmp/labios-s3}"
    ;;
start-redis)
    shift
    start_redis "${1:-6379}" "${2:-/tmp/labios-redis}" "${@:3}"
    ;;
stop-redis)
    stop_redis "${2:-/tmp/labios-redis}"
    ;;
start-nats)
    start_nats "${2:-4222}" "${3:-/tmp/labios-nats}"
    ;;
stop-nats)
    stop_nats "${2:-/tmp/labios-nats}"
    ;;
*)
    echo "usage: $0 install | start-nats PORT DIR | stop-nats DIR | start-redis PORT DIR [args] | stop-redis DIR | start-versitygw PORT DIR KEY SECRET | stop-versitygw DIR" >&2
    exit 2
    ;;
esac
