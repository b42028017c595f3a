#!/usr/bin/env bash
# Builds a Debian package of lockd (lockd CLI and daemon, wdmd, wdmd-emulator, lockd-ctdb-mutex, systemd
# units, config, docs) with dpkg-deb, from a release build. Prints the .deb path.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release -q -p lockd-tools -p wdmd
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d /var/tmp/lockd-deb.XXXXXX)
trap 'rm -rf "$stage"' EXIT
install -D -m 0755 target/release/lockd "$stage/usr/sbin/lockd"
for bin in wdmd wdmd-emulator lockd-ctdb-mutex lockd-killpath; do
    if [ -x "target/release/$bin" ]; then
        install -D -m 0755 "target/release/$bin" "$stage/usr/sbin/$bin"
    fi
done
install -D -m 0644 packaging/systemd/lockd.service "$stage/lib/systemd/system/lockd.service"
install -D -m 0644 packaging/systemd/wdmd.service "$stage/lib/systemd/system/wdmd.service"
install -D -m 0644 packaging/lockd.toml "$stage/etc/lockd/lockd.toml"
install -D -m 0644 README.md "$stage/usr/share/doc/lockd/README.md"
for d in docs/*.md; do install -D -m 0644 "$d" "$stage/usr/share/doc/lockd/$(basename "$d")"; done
mkdir -p "$stage/DEBIAN"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: lockd
Version: $version
Architecture: $arch
Maintainer: lockd developers <lockd@example.org>
Depends: libc6
Conflicts: sanlock
Section: admin
Priority: optional
Description: shared-storage lease manager compatible with sanlock
 lockd keeps host leases (delta leases) and resource leases (disk Paxos) on shared
 block devices or NFS files, on-disk and client-protocol compatible with sanlock 3.8/3.9,
 with a watchdog multiplexer (wdmd) that resets hosts whose leases expire.
CONTROL
echo "/etc/lockd/lockd.toml" > "$stage/DEBIAN/conffiles"
out="target/lockd_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$stage" "$out" >/dev/null
echo "$out"
