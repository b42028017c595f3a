#!/usr/bin/env bash
# Builds the Debian package of lockd with dpkg-deb from a release build and prints the
# .deb path. Contents: lockd (CLI) and lockd-daemon and wdmd in /usr/sbin (stripped), the
# wdmd emulator (a test tool) in /usr/libexec/lockd, systemd units, /etc/lockd/lockd.toml
# (a conffile), maintainer scripts (postinst creates the socket group), changelog,
# copyright, docs, the Grafana dashboard; man pages and shell completions when they have
# been generated into $LOCKD_MAN_DIR / $LOCKD_COMPLETIONS_DIR (see packaging/README.md).
#
# Honours CARGO_TARGET_DIR (the binaries and the .deb go there; default ./target).
# Usage: packaging/build-deb.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
root=$(pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
case "$target_dir" in /*) ;; *) target_dir=$root/$target_dir ;; esac
if [ "${1:-}" != "--no-build" ]; then
    cargo build --release -q -j"${CARGO_BUILD_JOBS:-1}" -p lockd-tools -p lockd-daemon -p wdmd
fi
rel=$target_dir/release
for bin in lockd lockd-daemon wdmd; do
    [ -x "$rel/$bin" ] || { echo "build-deb: $rel/$bin is missing" >&2; exit 1; }
done
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d /var/tmp/lockd-deb.XXXXXX)
trap 'rm -rf "$stage"' EXIT
pkg=$stage/pkg
doc=$pkg/usr/share/doc/lockd

# Binaries, stripped as dh_strip does (no debug symbols, no .comment/.note sections).
strip_install() {
    install -D -m 0755 "$1" "$2"
    strip --remove-section=.comment --remove-section=.note --strip-unneeded "$2"
}
for bin in lockd lockd-daemon wdmd; do
    strip_install "$rel/$bin" "$pkg/usr/sbin/$bin"
done
if [ -x "$rel/wdmd-emulator" ]; then
    strip_install "$rel/wdmd-emulator" "$pkg/usr/libexec/lockd/wdmd-emulator"
fi

install -D -m 0644 packaging/systemd/lockd.service "$pkg/lib/systemd/system/lockd.service"
install -D -m 0644 packaging/systemd/wdmd.service "$pkg/lib/systemd/system/wdmd.service"
install -D -m 0644 packaging/lockd.toml "$pkg/etc/lockd/lockd.toml"
install -D -m 0644 packaging/grafana/lockd-dashboard.json \
    "$pkg/usr/share/lockd/grafana/lockd-dashboard.json"

install -D -m 0644 packaging/debian/copyright "$doc/copyright"
# A native package: changelog.gz, compressed reproducibly.
gzip -9nc packaging/debian/changelog > "$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"
install -D -m 0644 README.md "$doc/README.md"
for d in docs/*.md; do install -D -m 0644 "$d" "$doc/$(basename "$d")"; done

# Man pages and completions, when generated (by `lockd` itself, from its clap definitions).
if [ -n "${LOCKD_MAN_DIR:-}" ] && [ -d "$LOCKD_MAN_DIR" ]; then
    for m in "$LOCKD_MAN_DIR"/*.[1-8]; do
        [ -e "$m" ] || continue
        sec=${m##*.}
        install -d "$pkg/usr/share/man/man$sec"
        gzip -9nc "$m" > "$pkg/usr/share/man/man$sec/$(basename "$m").gz"
        chmod 0644 "$pkg/usr/share/man/man$sec/$(basename "$m").gz"
    done
fi
if [ -n "${LOCKD_COMPLETIONS_DIR:-}" ] && [ -d "$LOCKD_COMPLETIONS_DIR" ]; then
    c=$LOCKD_COMPLETIONS_DIR
    [ -e "$c/lockd.bash" ] && install -D -m 0644 "$c/lockd.bash" "$pkg/usr/share/bash-completion/completions/lockd"
    [ -e "$c/_lockd" ] && install -D -m 0644 "$c/_lockd" "$pkg/usr/share/zsh/vendor-completions/_lockd"
    [ -e "$c/lockd.fish" ] && install -D -m 0644 "$c/lockd.fish" "$pkg/usr/share/fish/vendor_completions.d/lockd.fish"
fi

# Library dependencies of the binaries, as dh_shlibdeps computes them.
mkdir -p "$stage/src/debian"
printf 'Source: lockd\n\nPackage: lockd\nArchitecture: any\n' > "$stage/src/debian/control"
shlibs=$(cd "$stage/src" && dpkg-shlibdeps -O -e"$pkg/usr/sbin/lockd" -e"$pkg/usr/sbin/lockd-daemon" \
    -e"$pkg/usr/sbin/wdmd" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
shlibs=${shlibs:-libc6}

mkdir -p "$pkg/DEBIAN"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$pkg/DEBIAN/"
echo "/etc/lockd/lockd.toml" > "$pkg/DEBIAN/conffiles"
(cd "$pkg" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | sort -z |
    xargs -0 md5sum) > "$pkg/DEBIAN/md5sums"
installed_size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
cat > "$pkg/DEBIAN/control" <<CONTROL
Package: lockd
Version: $version
Architecture: $arch
Maintainer: lockd developers <lockd@example.org>
Installed-Size: $installed_size
Depends: $shlibs, adduser
Suggests: python3-sanlock
Provides: sanlock (= 3.8.5)
Conflicts: sanlock
Replaces: sanlock
Section: admin
Priority: optional
Homepage: https://example.org/lockd
Description: shared-storage lease manager compatible with sanlock
 lockd keeps host leases (delta leases) and resource leases (disk Paxos) on
 shared block devices or NFS files, on-disk and client-protocol compatible with
 sanlock 3.8/3.9, with a watchdog multiplexer (wdmd) that resets hosts whose
 leases expire.
 .
 It replaces the sanlock daemon package; sanlock's client libraries
 (libsanlock1, libsanlock-client1, python3-sanlock) stay installed and talk to
 lockd. Metrics for Prometheus, and "lockd doctor" to check a host's setup,
 are included.
CONTROL
out="$target_dir/lockd_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$out" >/dev/null
echo "$out"
