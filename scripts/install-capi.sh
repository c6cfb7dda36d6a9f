#!/usr/bin/env bash
# The C API of LABIOS for C, C++ and Fortran: labios.h, liblabios_c.so and a
# pkg-config file (labios.pc), so that programs build with
#
#   cc app.c $(pkg-config --cflags --libs labios)
#
# Usage:
#   bash scripts/install-capi.sh [--debug] [--libdir DIR] [PREFIX]
#       Builds liblabios_c.so (release; --debug: the debug profile) and
#       installs PREFIX/include/labios.h, PREFIX/lib/liblabios_c.so and
#       PREFIX/lib/pkgconfig/labios.pc. PREFIX defaults to /usr/local when run
#       as root (already on the search paths of pkg-config and of the dynamic
#       loader; ldconfig is run), else to $HOME/.local (no root needed; the
#       script prints the PKG_CONFIG_PATH and rpath/LD_LIBRARY_PATH to use).
#       DESTDIR is honoured for staged installs (packaging). The installed
#       library carries no debug information (about 14 MB instead of 200);
#       it is kept beside it, in PREFIX/lib/.debug/liblabios_c.so.debug,
#       where gdb and perf find it through the library's .gnu_debuglink.
#       With --libdir DIR nothing is built: the liblabios_c.so already built
#       in DIR (e.g. target/release) is installed.
#
#   bash scripts/install-capi.sh --dev OUTDIR [--debug] [--libdir DIR]
#       Installs nothing: writes OUTDIR/labios.pc pointing at the header in
#       the source tree and at the library in the cargo target directory, for
#       tests and for trying the API from a checkout
#       (PKG_CONFIG_PATH=OUTDIR pkg-config --cflags --libs labios).
#       With --libdir DIR nothing is built and DIR must hold liblabios_c.so;
#       otherwise the library is built first.
#
# The build uses CARGO_TARGET_DIR, default /var/tmp/labios-target (as
# scripts/test.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/labios-target}"

# usage [STATUS]: the comment above, on stdout for --help, else on stderr.
usage() {
    local status=${1:-2}
    if [ "$status" = 0 ]; then
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    else
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    fi
    exit "$status"
}

dev=""
profile="release"
libdir_given=""
prefix=""
while [ $# -gt 0 ]; do
    case "$1" in
    --dev)
        dev=${2:?--dev needs an output directory}
        shift 2
        ;;
    --debug)
        profile="debug"
        shift
        ;;
    --libdir)
        libdir_given=${2:?--libdir needs a directory}
        shift 2
        ;;
    -h | --help) usage 0 ;;
    -*)
        echo "install-capi.sh: unknown option $1" >&2
        usage
        ;;
    *)
        [ -z "$prefix" ] || usage
        prefix=$1
        shift
        ;;
    esac
done
if [ -n "$dev" ] && [ -n "$prefix" ]; then
    echo "install-capi.sh: --dev takes no PREFIX" >&2
    exit 2
fi

header="$ROOT/crates/capi/include/labios.h"

# The version of the labios-capi crate: `cargo pkgid` prints
# path+file:///.../crates/capi#labios-capi@0.1.0 (older cargo: ...#0.1.0 or :0.1.0).
version() {
    local id
    id=$(cd "$ROOT" && cargo pkgid -p labios-capi)
    echo "${id##*[#@:]}"
}

# labios.pc for includedir $1 and libdir $2 (the prefix is $3, informative).
write_pc() {
    local includedir=$1 libdir=$2 pc_prefix=$3 ver
    ver=$(version)
    cat <<EOF
prefix=$pc_prefix
includedir=$includedir
libdir=$libdir

Name: labios
Description: LABIOS label-based distributed I/O: the C API (labios.h)
Version: $ver
Cflags: -I\${includedir}
Libs: -L\${libdir} -llabios_c
EOF
}

build() {
    local flag=""
    [ "$profile" = release ] && flag="--release"
    (cd "$ROOT" && cargo build $flag -p labios-capi) >&2
    echo "$CARGO_TARGET_DIR/$profile"
}

if [ -n "$dev" ]; then
    if [ -n "$libdir_given" ]; then
        libdir=$(cd "$libdir_given" && pwd)
    else
        libdir=$(build)
    fi
    if [ ! -f "$libdir/liblabios_c.so" ]; then
        echo "install-capi.sh: no liblabios_c.so in $libdir (cargo build -p labios-capi)" >&2
        exit 1
    fi
    mkdir -p "$dev"
    write_pc "$ROOT/crates/capi/include" "$libdir" "$ROOT" >"$dev/labios.pc"
    echo "wrote $dev/labios.pc (header $header, library $libdir/liblabios_c.so)"
    exit 0
fi

if [ -z "$prefix" ]; then
    if [ "$(id -u)" = 0 ]; then
        prefix=/usr/local
    else
        prefix="$HOME/.local"
    fi
fi
case "$prefix" in
/*) ;;
*) prefix="$(pwd)/$prefix" ;;
esac
destdir="${DESTDIR:-}"

if ! command -v objcopy >/dev/null; then
    echo "install-capi.sh: objcopy (binutils) is needed to keep the debug information apart" >&2
    exit 1
fi
if [ -n "$libdir_given" ]; then
    built=$(cd "$libdir_given" && pwd)
else
    built=$(build)
fi
if [ ! -f "$built/liblabios_c.so" ]; then
    echo "install-capi.sh: no liblabios_c.so in $built" >&2
    exit 1
fi
lib="$destdir$prefix/lib"
install -d "$destdir$prefix/include" "$lib/pkgconfig" "$lib/.debug"
install -m 644 "$header" "$destdir$prefix/include/labios.h"
objcopy --only-keep-debug "$built/liblabios_c.so" "$lib/.debug/liblabios_c.so.debug"
chmod 644 "$lib/.debug/liblabios_c.so.debug"
objcopy --strip-all --add-gnu-debuglink="$lib/.debug/liblabios_c.so.debug" \
    "$built/liblabios_c.so" "$lib/liblabios_c.so"
chmod 755 "$lib/liblabios_c.so"
# shellcheck disable=SC2016 # ${prefix} is for pkg-config, not the shell.
write_pc '${prefix}/include' '${prefix}/lib' "$prefix" >"$destdir$prefix/lib/pkgconfig/labios.pc"
chmod 644 "$destdir$prefix/lib/pkgconfig/labios.pc"

echo "installed into $destdir$prefix:"
echo "  include/labios.h  lib/liblabios_c.so  lib/.debug/liblabios_c.so.debug  lib/pkgconfig/labios.pc (version $(version))"
if [ -z "$destdir" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then
    ldconfig
fi
if [ -z "$destdir" ]; then
    pc_path=$(pkg-config --variable pc_path pkg-config 2>/dev/null || true)
    case ":$pc_path:" in
    *":$prefix/lib/pkgconfig:"*) ;;
    *)
        echo "pkg-config does not search $prefix/lib/pkgconfig; build with"
        echo "  export PKG_CONFIG_PATH=$prefix/lib/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
        ;;
    esac
    case "$prefix" in
    /usr/local | /usr) ;;
    *)
        echo "and let programs find the library at run time, e.g."
        echo "  cc app.c \$(pkg-config --cflags --libs labios) -Wl,-rpath,$prefix/lib"
        echo "  (or export LD_LIBRARY_PATH=$prefix/lib)"
        ;;
    esac
fi
