#!/usr/bin/env bash
# Debian chroots of other suites (trixie, sid, ...) for running their binary packages
# (sanlock, python3-sanlock, lintian, lvm2, ...) on this Debian 12 machine, whose glibc is
# older. A chroot is built once with debootstrap and cached under
# $LOCKD_CHROOT_ROOT/SUITE (default /var/tmp/lockd-chroots/SUITE); later calls reuse it.
#
# Usage (as root):
#   debian-chroot.sh ensure SUITE [PKG...]   create the chroot if it is missing or
#                                            incomplete (debootstrap --variant=minbase),
#                                            then apt-get install any PKG not yet installed
#                                            in it; prints the chroot's path
#   debian-chroot.sh path SUITE              print the chroot's path (no side effects)
#   debian-chroot.sh run SUITE [--bind SRC[:DST]]... [--] CMD [ARG...]
#                                            run CMD inside the chroot, in a private mount
#                                            namespace holding /dev (rbind), a fresh /proc,
#                                            /sys, a tmpfs /run and /dev/shm, and each
#                                            --bind (host SRC at DST, default the same path;
#                                            for loop devices, run dirs, the workspace).
#                                            The mounts live only in that namespace, so they
#                                            are gone when CMD ends, however it ends; the
#                                            mount-point directories this call had to create
#                                            inside the chroot are removed afterwards.
#                                            Exit status is CMD's. PATH is reset to the
#                                            chroot's standard one; other env is kept.
#   debian-chroot.sh run SUITE --overlay [--bind ...] [--] CMD [ARG...]
#                                            the same on a throwaway copy-on-write layer
#                                            over the chroot (an overlayfs whose upper dir
#                                            is deleted afterwards): packages installed or
#                                            removed by CMD leave the cached chroot as it was
#   debian-chroot.sh run SUITE --exec [--bind ...] [--] CMD [ARG...]
#                                            the same, but this script's process becomes
#                                            CMD (exec all the way down), so a caller that
#                                            started it holds CMD's own PID (to signal it,
#                                            wait for it); the mount namespace ends with
#                                            CMD and its children. CMD runs on a
#                                            copy-on-write layer in a tmpfs private to that
#                                            namespace: what it writes outside its binds
#                                            (and the bind targets) is discarded.
#   debian-chroot.sh mount SUITE [--bind SRC[:DST]]...
#                                            the same mounts in the host's namespace, for
#                                            interactive work; undo with `umount`
#   debian-chroot.sh umount SUITE            unmount everything below the chroot (reverse
#                                            order, recursively); safe to repeat
#   debian-chroot.sh remove SUITE            delete the cached chroot (refuses while
#                                            anything is mounted below it)
#
# Examples:
#   scripts/debian-chroot.sh ensure trixie sanlock python3-sanlock
#   scripts/debian-chroot.sh run trixie --bind "$rundir" -- python3 -c 'import sanlock'
#
# Notes:
# * The mirror is the first non-security `URIs:` of /etc/apt/sources.list.d/debian.sources
#   (override: LOCKD_CHROOT_MIRROR). debootstrap is installed with apt-get if missing.
# * Creation and package installation hold a lock (flock on $ROOT/.SUITE.lock), so
#   concurrent callers (CI, other engineers) wait for one another instead of racing.
# * The chroot has /usr/sbin/policy-rc.d exiting 101: no package's maintainer script starts
#   or stops a service (an init script's stop matches processes by name, which would reach
#   the host's daemons). Daemons are started by the tests themselves.
# * A chroot counts as complete once $DIR/.lockd-chroot-complete exists; a directory
#   without it (an interrupted debootstrap) is deleted and rebuilt, never while anything
#   is mounted below it.
set -euo pipefail

ROOT=${LOCKD_CHROOT_ROOT:-/var/tmp/lockd-chroots}
MARK=.lockd-chroot-complete

die() { echo "debian-chroot: $*" >&2; exit 1; }
usage() { sed -n '/^# Usage/,/^# Examples/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

check_suite() {
    [[ "${1:-}" =~ ^[a-z][a-z0-9-]*$ ]] || die "bad suite name '${1:-}'"
}

mirror() {
    if [ -n "${LOCKD_CHROOT_MIRROR:-}" ]; then
        echo "$LOCKD_CHROOT_MIRROR"
        return
    fi
    local src=/etc/apt/sources.list.d/debian.sources m
    [ -r "$src" ] || die "$src is missing: set LOCKD_CHROOT_MIRROR"
    m=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' "$src")
    [ -n "$m" ] || die "no non-security URIs: line in $src: set LOCKD_CHROOT_MIRROR"
    echo "$m"
}

# Mount points below DIR, deepest first.
mounts_below() {
    local dir=$1
    awk -v d="$dir" '{ gsub(/\\040/, " ", $5); if ($5 == d || index($5, d "/") == 1) print $5 }' \
        /proc/self/mountinfo | sort -r
}

need_root() { [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mounts)"; }

# Runs apt-get/dpkg inside DIR with /proc and /dev available (private namespace).
chroot_admin() {
    local dir=$1
    shift
    unshare --mount --propagation private bash -euc '
        dir=$1; shift
        mount --rbind /dev "$dir/dev"
        mount -t proc proc "$dir/proc"
        mount -t sysfs sysfs "$dir/sys"
        exec chroot "$dir" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
            DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 HOME=/root "$@"
    ' chroot_admin "$dir" "$@"
}

cmd_ensure() {
    local suite=$1
    shift
    check_suite "$suite"
    need_root
    local dir=$ROOT/$suite
    mkdir -p "$ROOT"
    exec 9>"$ROOT/.$suite.lock"
    flock -w 1800 9 || die "timed out waiting for the lock on $ROOT/.$suite.lock"
    if [ ! -e "$dir/$MARK" ]; then
        if [ -e "$dir" ]; then
            [ -z "$(mounts_below "$dir")" ] ||
                die "$dir is incomplete but has mounts below it; run: $0 umount $suite"
            echo "debian-chroot: removing incomplete $dir" >&2
            rm -rf --one-file-system "$dir"
        fi
        if ! command -v debootstrap >/dev/null; then
            echo "debian-chroot: installing debootstrap" >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2 ||
                { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2; } ||
                die "cannot install debootstrap"
        fi
        local m
        m=$(mirror)
        # The packages asked for are installed below with apt-get, not with debootstrap's
        # --include: debootstrap's own resolver does not follow virtual packages (trixie's
        # lintian needs perl-openssl-abi-3, provided by perl-openssl-defaults), and the
        # bootstrap then fails while configuring them.
        echo "debian-chroot: debootstrap $suite from $m into $dir" >&2
        local t0=$SECONDS
        debootstrap --variant=minbase "$suite" "$dir" "$m" >&2 ||
            die "debootstrap of $suite failed (log: $dir/debootstrap/debootstrap.log)"
        printf '#!/bin/sh\n# lockd test chroot: maintainer scripts start no services.\nexit 101\n' \
            > "$dir/usr/sbin/policy-rc.d"
        chmod 0755 "$dir/usr/sbin/policy-rc.d"
        cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
        echo "debian-chroot: $suite built in $((SECONDS - t0)) s" >&2
        date -u +%FT%TZ > "$dir/$MARK"
    fi
    # Packages asked for that are not installed yet (dpkg status "install ok installed").
    local missing=() p st
    for p in "$@"; do
        st=$(chroot "$dir" dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        [ "$st" = "install ok installed" ] || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "debian-chroot: installing into $suite: ${missing[*]}" >&2
        cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
        # Lists older than a day are refreshed first; a failed install retries after update.
        if [ -z "$(find "$dir/var/lib/apt/lists" -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
            chroot_admin "$dir" apt-get update -q >&2 || die "apt-get update in $suite failed"
        fi
        chroot_admin "$dir" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
            { chroot_admin "$dir" apt-get update -q >&2 &&
                chroot_admin "$dir" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; } ||
            die "apt-get install ${missing[*]} in $suite failed"
    fi
    flock -u 9
    echo "$dir"
}

# Parses [--overlay] [--bind SRC[:DST]]... into OVERLAY and BINDS (pairs "SRC\tDST");
# leaves the rest in REST.
parse_binds() {
    BINDS=()
    REST=()
    OVERLAY=0
    EXEC=0
    while [ $# -gt 0 ]; do
        case $1 in
            --overlay) OVERLAY=1; shift ;;
            --exec) EXEC=1; shift ;;
            --bind)
                [ $# -ge 2 ] || die "--bind needs SRC[:DST]"
                local src=${2%%:*} dst=${2#*:}
                [ "$dst" = "$2" ] && dst=$src
                [ -e "$src" ] || die "bind source $src does not exist"
                [[ "$dst" = /* ]] || die "bind target $dst is not absolute"
                BINDS+=("$(readlink -f "$src")"$'\t'"$dst")
                shift 2
                ;;
            --) shift; REST=("$@"); return ;;
            *) REST=("$@"); return ;;
        esac
    done
}

# Creates bind targets inside DIR; prints the directories/files it had to create.
make_targets() {
    local dir=$1 b src dst p
    shift
    for b in "$@"; do
        src=${b%%$'\t'*}
        dst=${b#*$'\t'}
        # Record the topmost missing component, so it alone is removed afterwards.
        p=$dst
        while [ "$p" != / ] && [ ! -e "$dir$(dirname "$p")" ]; do p=$(dirname "$p"); done
        if [ ! -e "$dir$dst" ]; then
            echo "$p"
            if [ -d "$src" ]; then mkdir -p "$dir$dst"; else mkdir -p "$dir$(dirname "$dst")"; : > "$dir$dst"; fi
        fi
    done
}

# The mounts (inside whatever namespace the caller is in).
do_mounts() {
    local dir=$1 b src dst
    shift
    mount --rbind /dev "$dir/dev"
    mount --make-rslave "$dir/dev"
    mount -t proc proc "$dir/proc"
    mount -t sysfs sysfs "$dir/sys" 2>/dev/null || { mount --rbind /sys "$dir/sys"; mount --make-rslave "$dir/sys"; }
    mount -t tmpfs -o mode=0755 tmpfs "$dir/run"
    mkdir -p "$dir/run/lock"
    for b in "$@"; do
        src=${b%%$'\t'*}
        dst=${b#*$'\t'}
        # A target below the fresh /run (a tmpfs) is made there.
        if [ -d "$src" ]; then mkdir -p "$dir$dst"; elif [ ! -e "$dir$dst" ]; then
            mkdir -p "$dir$(dirname "$dst")"; : > "$dir$dst"; fi
        mount --bind "$src" "$dir$dst"
    done
}

chroot_dir() {
    local dir=$ROOT/$1
    [ -e "$dir/$MARK" ] || die "no complete chroot $dir: run $0 ensure $1 first"
    echo "$dir"
}

cmd_run() {
    local suite=$1
    shift
    check_suite "$suite"
    need_root
    local dir
    dir=$(chroot_dir "$suite")
    parse_binds "$@"
    [ ${#REST[@]} -gt 0 ] || die "run: no command"
    local created rc=0 ov=-
    if [ "$EXEC" = 1 ]; then
        # Nothing runs after the exec to clean up, so CMD runs on a copy-on-write layer
        # held in a tmpfs that only its namespace sees: the bind targets made there, and
        # whatever CMD writes outside its binds, vanish with the namespace.
        [ "$OVERLAY" = 0 ] || die "run: --exec and --overlay do not go together"
        mkdir -p "$ROOT/.exec-scratch"
        LOCKD_CHROOT_INNER=1 exec unshare --mount --propagation private "$0" __inner "$dir" \
            "tmpfs:$ROOT/.exec-scratch" "${#BINDS[@]}" ${BINDS[@]+"${BINDS[@]}"} "${REST[@]}"
    fi
    created=$(make_targets "$dir" ${BINDS[@]+"${BINDS[@]}"})
    if [ "$OVERLAY" = 1 ]; then
        ov=$(mktemp -d "$ROOT/.overlay-$suite.XXXXXX")
    fi
    LOCKD_CHROOT_INNER=1 unshare --mount --propagation private "$0" __inner "$dir" "$ov" \
        "${#BINDS[@]}" ${BINDS[@]+"${BINDS[@]}"} "${REST[@]}" || rc=$?
    # The overlay's mounts lived only in the namespace; its upper dir is plain files now.
    [ "$ov" = - ] || rm -rf --one-file-system "$ov"
    local p
    while IFS= read -r p; do
        [ -n "$p" ] || continue
        # Only what this call created, and only if it is unused (empty / empty file).
        if [ -d "$dir$p" ]; then
            find "$dir$p" -depth -type d -empty -delete 2>/dev/null || true
            find "$dir$p" -depth -type f -empty -delete 2>/dev/null || true
            find "$dir$p" -depth -type d -empty -delete 2>/dev/null || true
        elif [ -f "$dir$p" ] && [ ! -s "$dir$p" ]; then
            rm -f "$dir$p"
        fi
    done <<< "$created"
    return $rc
}

cmd_inner() {
    [ "${LOCKD_CHROOT_INNER:-}" = 1 ] || die "__inner is internal"
    local dir=$1 ov=$2 n=$3
    shift 3
    local binds=("${@:1:$n}")
    if [ "${ov#tmpfs:}" != "$ov" ]; then
        ov=${ov#tmpfs:}
        mount -t tmpfs -o mode=0700 tmpfs "$ov"
    fi
    if [ "$ov" != - ]; then
        mkdir -p "$ov/up" "$ov/wk" "$ov/root"
        mount -t overlay overlay -o "lowerdir=$dir,upperdir=$ov/up,workdir=$ov/wk" "$ov/root"
        dir=$ov/root
    fi
    shift "$n"
    do_mounts "$dir" ${binds[@]+"${binds[@]}"}
    unset LOCKD_CHROOT_INNER
    exec chroot "$dir" env PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

cmd_mount() {
    local suite=$1
    shift
    check_suite "$suite"
    need_root
    local dir
    dir=$(chroot_dir "$suite")
    [ -z "$(mounts_below "$dir")" ] || die "$dir already has mounts; run: $0 umount $suite"
    parse_binds "$@"
    [ ${#REST[@]} -eq 0 ] || die "mount: unexpected arguments: ${REST[*]}"
    [ "$OVERLAY" = 0 ] && [ "$EXEC" = 0 ] || die "mount: --overlay and --exec are for run only"
    make_targets "$dir" ${BINDS[@]+"${BINDS[@]}"} >/dev/null
    do_mounts "$dir" ${BINDS[@]+"${BINDS[@]}"} || { cmd_umount "$suite"; die "mount failed"; }
    echo "$dir"
}

cmd_umount() {
    local suite=$1
    check_suite "$suite"
    need_root
    local dir=$ROOT/$suite m left
    for _ in 1 2 3 4 5; do
        left=$(mounts_below "$dir")
        [ -n "$left" ] || return 0
        while IFS= read -r m; do
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        done <<< "$left"
    done
    left=$(mounts_below "$dir")
    [ -z "$left" ] || die "still mounted below $dir: $left"
}

cmd_remove() {
    local suite=$1
    check_suite "$suite"
    need_root
    local dir=$ROOT/$suite
    [ -z "$(mounts_below "$dir")" ] || die "mounts below $dir; run: $0 umount $suite"
    exec 9>"$ROOT/.$suite.lock"
    flock -w 600 9 || die "timed out waiting for the lock"
    rm -rf --one-file-system "$dir"
}

[ $# -ge 1 ] || usage
sub=$1
shift
case $sub in
    ensure) [ $# -ge 1 ] || usage; cmd_ensure "$@" ;;
    path) [ $# -eq 1 ] || usage; check_suite "$1"; echo "$ROOT/$1" ;;
    run) [ $# -ge 2 ] || usage; cmd_run "$@" ;;
    __inner) cmd_inner "$@" ;;
    mount) [ $# -ge 1 ] || usage; cmd_mount "$@" ;;
    umount) [ $# -eq 1 ] || usage; cmd_umount "$1" ;;
    remove) [ $# -eq 1 ] || usage; cmd_remove "$1" ;;
    -h|--help|help) usage ;;
    *) usage ;;
esac
