"""lvmlockd scenarios of the virtual-machine bed (issue 26): Debian 13's lvm2 and lvm2-lockd
2.03.31 with a shared VG (`vgcreate --shared`, lock type sanlock) on the bed's iSCSI LUN.

The guests boot initrd-lvm.gz (build-trixie-lvm.sh): the bed's image plus trixie's lvm,
lvmlockd, lvmlockctl, sanlock 3.9.5 and its wdmd under /trixie, run by trixie's loader on
trixie's libraries (libsanlock_client 3.9.5 is what lvmlockd talks to its lock manager
with). Each guest runs lvmlockd against

* `lvmlockd`: lockd's daemon (`SANLOCK_RUN_DIR=/run/lockd`) with lockd's wdmd, on both;
* `lvmlockd-mixed`: a real sanlock 3.9.5 daemon with its own wdmd on g1, lockd on g2.

What is checked (each step on the timeline with its exit status and output): an LV
activated exclusively (`lvchange -aey`) on one guest cannot be activated on the other,
exclusively or shared, until it is deactivated; then it can; shared activation (`-asy`) works
on both at once and blocks an exclusive one; `lvs` and `lvmlockctl --info` show it. In
`lvmlockd` the guest holding the LV then loses its lockd daemon (SIGKILL): the other guest's
`lvchange -aey` must fail until the holder's watchdog has reset it or its delta lease has
been dead for 8·D + W (judged on the delta lease renewals the host sees in the LUN's
backing file), then succeed. In `lvmlockd-mixed` the exclusions hold both ways; then g1's sanlock
daemon is killed while g1 holds the LV, with the same judgement, and g2 stops the VG's
lockspace at the end. `lvmlockd-sanlock` is the reference: the same steps with
sanlock 3.9.5 on both guests.

This module is handed the vmbed module (`bodies(vm)`) instead of importing it: vmbed.py
runs as __main__, and a second import would make a second set of its classes.
"""

from __future__ import annotations

import threading
import time
from types import ModuleType

SCENARIOS = {
    "lvmlockd": ("iscsi", "lvm2-lockd 2.03.31 (Debian 13), both guests on lockd: shared VG, "
                 "-aey/-asy exclusion, holder's daemon killed"),
    "lvmlockd-mixed": ("iscsi", "lvm2-lockd 2.03.31: sanlock 3.9.5 on g1, lockd on g2: "
                       "-aey/-asy exclusion both ways, g1's sanlock killed"),
    "lvmlockd-sanlock": ("iscsi", "reference for lvmlockd-mixed: lvm2-lockd 2.03.31 with sanlock 3.9.5 "
                         "on both guests, the same steps"),
}

VG = "vgbed"
LV = "lv1"
LVM_LUN_BYTES = 2 << 30  # lvmlockd 2.03.31 makes its lock LV 1 GiB (256 extents of 4 MiB)
PV = "/dev/sda"
LVM = "/trixie/sbin/lvm"
DELTA_MAGIC = (0x12212010).to_bytes(4, "little")


def lvm_conf(host_id: int) -> str:
    """lvm.conf for a busybox guest: no udev (lvm makes its own device nodes), only the
    shared LUN scanned, lvmlockd on, this guest's sanlock host_id."""
    return f"""devices {{
    scan = [ "/dev" ]
    global_filter = [ "a|^{PV}$|", "r|.*|" ]
    filter = [ "a|^{PV}$|", "r|.*|" ]
    obtain_device_list_from_udev = 0
    external_device_info_source = "none"
    use_devicesfile = 0
    multipath_component_detection = 0
    md_component_detection = 0
    fw_raid_component_detection = 0
}}
activation {{
    udev_sync = 0
    udev_rules = 0
    monitoring = 0
}}
global {{
    use_lvmlockd = 1
    event_activation = 0
}}
local {{
    host_id = {host_id}
}}
"""


def bodies(vm: ModuleType) -> dict:
    """The scenario bodies, closed over the vmbed module `vm`."""
    BedError = vm.BedError

    def start_storage(bed) -> None:
        """An empty 2 GiB LUN (sparse), tgt and one relay per guest; no lockd areas: the
        VG and its lock LV are made by vgcreate in a guest."""
        with open(bed.lun, "wb") as f:
            f.truncate(LVM_LUN_BYTES)
        bed.tgt = vm.Tgt(bed.workdir, bed.lun)
        for i in (1, 2):
            bed.relays[i] = vm.Relay(f"relay{i}", bed.tgt.port, bed.timeline)

    def boot(bed, kinds: dict[int, str]) -> None:
        initrd = vm.IMAGE_DIR / "initrd-lvm.gz"
        if not initrd.exists():
            raise BedError(f"{initrd} missing: scripts/vmbed.sh builds it (tests/vmbed/build-trixie-lvm.sh)")

        def one(i: int) -> None:
            g = vm.Guest(bed, i, kinds[i])
            g.initrd = initrd
            bed.guests[i] = g
            g.start()
            daemons(bed, g)

        vm.in_parallel(one, kinds)

    def daemons(bed, g) -> None:
        """wdmd on the i6300esb, the lock manager (lockd or sanlock 3.9.5), then lvmlockd
        pointed at it, and lvm.conf with this guest's host_id."""
        d, w = bed.io_timeout_s, bed.fire_timeout_s
        if g.kind == "sanlock":
            run_dir = "/run/sanlock"
            g.sh(
                "/trixie/sbin/wdmd -D -w /dev/watchdog0 >/var/tmp/wdmd.log 2>&1 & echo $! >/run/wdmd.pid\n"
                "for i in $(seq 100); do [ -S /run/wdmd/wdmd.sock ] && break; sleep 0.1; done\n"
                f"SANLOCK_RUN_DIR=/run/sanlock /trixie/sbin/sanlock daemon -D -w 1 -U root -G root "
                f"-e {g.name} -o {d} >/var/tmp/daemon.log 2>&1 & echo $! >/run/daemon.pid\n"
                "for i in $(seq 150); do [ -S /run/sanlock/sanlock.sock ] && break; sleep 0.1; done\n"
                "[ -S /run/sanlock/sanlock.sock ] || { cat /var/tmp/daemon.log; exit 1; }"
            )
        else:
            run_dir = "/run/lockd"
            g.sh(
                f"printf 'watchdog_fire_timeout = {w}\\n' >/run/lockd.toml\n"
                f"wdmd -D -w /dev/watchdog0 --fire-timeout {w} >/var/tmp/wdmd.log 2>&1 & echo $! >/run/wdmd.pid\n"
                "for i in $(seq 100); do [ -S /run/wdmd/wdmd.sock ] && break; sleep 0.1; done\n"
                f"lockd-daemon -D -w 1 -e {g.name} -o {d} -g 2 -c /run/lockd.toml "
                ">/var/tmp/daemon.log 2>&1 & echo $! >/run/daemon.pid\n"
                "for i in $(seq 100); do [ -S /run/lockd/sanlock.sock ] && break; sleep 0.1; done\n"
                "[ -S /run/lockd/sanlock.sock ] || { cat /var/tmp/daemon.log; exit 1; }"
            )
        g.sh(
            f"mkdir -p /etc/lvm /run/lvm /run/lock/lvm\ncat >/etc/lvm/lvm.conf <<'EOC'\n{lvm_conf(g.index)}EOC\n"
            f"SANLOCK_RUN_DIR={run_dir} /trixie/sbin/lvmlockd -D -o {d} >/var/tmp/lvmlockd.log 2>&1 &"
            " echo $! >/run/lvmlockd.pid\n"
            "for i in $(seq 150); do [ -S /run/lvm/lvmlockd.socket ] && break; sleep 0.1; done\n"
            "[ -S /run/lvm/lvmlockd.socket ] || { cat /var/tmp/lvmlockd.log; exit 1; }"
        )
        g.run_dir = run_dir
        bed.timeline.mark(g.name, f"{'sanlock 3.9.5' if g.kind == 'sanlock' else 'lockd'}, wdmd and "
                                  f"lvmlockd 2.03.31 up (SANLOCK_RUN_DIR={run_dir})")

    def lvm(bed, g, args: str, timeout: float = 300) -> tuple[int, str]:
        """Runs one lvm command in guest g; marks it on the timeline with its duration,
        exit status and the gist of its output."""
        t0 = bed.clock.now()
        # busybox timeout keeps the guest's agent free for the logs if lvm hangs.
        rc, out = g.sh(f"timeout -s KILL {int(timeout)} {LVM} {args} 2>&1", timeout=timeout + 30, check=False)
        # Drop lvm's notes about the busybox environment (no udev) from the summary.
        lines = [ln.strip() for ln in out.splitlines() if ln.strip() and "udev" not in ln]
        bed.timeline.mark(g.name, f"lvm {args} -> rc {rc} ({bed.clock.now() - t0:.1f} s)"
                                  + (": " + " | ".join(lines)[:300] if lines else ""))
        return rc, out

    def must(bed, g, args: str, timeout: float = 300) -> str:
        rc, out = lvm(bed, g, args, timeout)
        if rc != 0:
            # What device-mapper and lvm show at that moment, for the report.
            _, diag = g.sh(f"dmsetup ls 2>&1; ls -l /dev/mapper 2>&1; {LVM} lvs -a -o lv_name,lv_attr {VG} 2>&1; "
                           "dmesg | tail -n 8", check=False)
            bed.timeline.mark(g.name, "after the failure: " + " | ".join(
                " ".join(x.split()) for x in diag.splitlines() if x.strip() and "udev" not in x)[:800])
            raise BedError(f"{g.name}: lvm {args} failed ({rc}): {out.strip()[-600:]}")
        return out

    def active(g) -> str:
        """'ex', 'sh' or '' as lvm reports the LV's lock on this guest (lvs lv_active_*)."""
        rc, out = g.sh(f"{LVM} lvs --noheadings -o lv_active_exclusively,lv_active_locally "
                       f"{VG}/{LV} 2>/dev/null", check=False)
        words = out.split()
        if "active" in out and "exclusively" in out:
            return "ex"
        if "active" in " ".join(words) and "locally" in out:
            return "sh"
        return ""

    def dm_active(g) -> bool:
        rc, _ = g.sh(f"dmsetup info {VG}-{LV} >/dev/null 2>&1", check=False)
        return rc == 0

    def expect_refused(bed, g, args: str, v: list[str], why: str) -> str:
        rc, out = lvm(bed, g, args)
        bed.lvm_tries = getattr(bed, "lvm_tries", 0) + 1
        bed.lvm_refused = getattr(bed, "lvm_refused", 0) + (rc != 0)
        if rc == 0:
            v.append(f"{g.name}: lvm {args} succeeded although {why}")
        elif "locked by other host" not in out and "held by other host" not in out.lower() \
                and "other host" not in out:
            # lvmlockd's refusal names the other host; any other failure is not the lock's.
            v.append(f"{g.name}: lvm {args} failed, but not for the lock: {out.strip()[-300:]}")
        if dm_active(g):
            v.append(f"{g.name}: {VG}-{LV} is active in device-mapper after a refused activation")
        return out

    def info(bed, g) -> None:
        """lvs and lvmlockctl --info, on the timeline (what an operator would look at)."""
        _, out = g.sh(f"{LVM} lvs -a -o lv_name,lv_attr,lv_size,lv_lock_args {VG} 2>&1 | grep -v udev; "
                      "/trixie/sbin/lvmlockctl --info 2>&1 | head -8",
                      check=False)
        bed.timeline.mark(g.name, "state: " + " | ".join(" ".join(x.split()) for x in out.splitlines() if x.strip())[:600])

    def lockstart(bed, g) -> None:
        """vgchange --lockstart on a host that did not make the VG. lvm activates the lock
        LV and asks lvmlockd to join at once; with no udev in the guest, libdevmapper makes
        /dev/mapper/VG-lvmlock only when the command ends, after lvmlockd has looked for it
        ("prepare_lockspace_san stat error 2", start_vg -212, "invalid parameters for
        sanlock"). A second start, the node now there, joins: that retry (only for that
        error, and only once) is the guest's missing udev, not the lock manager's."""
        rc, out = lvm(bed, g, f"vgchange --lockstart {VG}", timeout=300)
        if rc != 0 and "invalid parameters for sanlock" in out:
            _, logs = g.sh("grep -c 'prepare_lockspace_san stat error 2' /var/tmp/lvmlockd.log; "
                           f"ls /dev/mapper/{VG}-lvmlock", check=False)
            if logs.split()[0] != "0" and f"/dev/mapper/{VG}-lvmlock" in logs:
                bed.timeline.mark(g.name, "lvmlockd looked for the lock LV's node before lvm made it "
                                          "(no udev): lockstart again")
                rc, out = lvm(bed, g, f"vgchange --lockstart {VG}", timeout=300)
        if rc != 0:
            raise BedError(f"{g.name}: vgchange --lockstart {VG} failed ({rc}): {out.strip()[-600:]}")

    def create_vg(bed, a, b) -> None:
        """a makes the shared VG and the LV; both start the VG's lockspace."""
        must(bed, a, f"vgcreate --shared --locktype sanlock {VG} {PV}", timeout=600)
        # vgcreate starts the lockspace on the host that made it; a start is harmless there.
        must(bed, a, f"vgchange --lockstart {VG}", timeout=300)
        must(bed, a, f"lvcreate -an -L 8m -n {LV} {VG}")
        lockstart(bed, b)
        out = must(bed, b, f"vgs -o vg_name,vg_lock_type,vg_lock_args {VG}")
        if "sanlock" not in out:
            raise BedError(f"{VG} is not a sanlock VG: {out}")

    def exclusion(bed, x, y, v: list[str]) -> None:
        """x holds the LV exclusively; y is refused both ways until x lets go; then y
        takes it; both -an at the end."""
        must(bed, x, f"lvchange -aey {VG}/{LV}")
        if not dm_active(x):
            v.append(f"{x.name}: -aey returned 0 but {VG}-{LV} is not in device-mapper")
        info(bed, x)
        expect_refused(bed, y, f"lvchange -aey {VG}/{LV}", v, f"{x.name} holds it exclusively")
        expect_refused(bed, y, f"lvchange -asy {VG}/{LV}", v, f"{x.name} holds it exclusively")
        must(bed, x, f"lvchange -an {VG}/{LV}")
        must(bed, y, f"lvchange -aey {VG}/{LV}")
        if not dm_active(y):
            v.append(f"{y.name}: -aey returned 0 but {VG}-{LV} is not in device-mapper")
        expect_refused(bed, x, f"lvchange -aey {VG}/{LV}", v, f"{y.name} holds it exclusively")
        must(bed, y, f"lvchange -an {VG}/{LV}")

    def shared(bed, x, y, v: list[str]) -> None:
        """-asy on both at once; an exclusive activation is refused meanwhile."""
        must(bed, x, f"lvchange -asy {VG}/{LV}")
        must(bed, y, f"lvchange -asy {VG}/{LV}")
        for g in (x, y):
            if not dm_active(g):
                v.append(f"{g.name}: -asy returned 0 but {VG}-{LV} is not in device-mapper")
        info(bed, x)
        info(bed, y)
        must(bed, y, f"lvchange -an {VG}/{LV}")
        # x holds it shared: y's exclusive activation is refused.
        expect_refused(bed, y, f"lvchange -aey {VG}/{LV}", v, f"{x.name} holds it shared")
        must(bed, x, f"lvchange -an {VG}/{LV}")

    def find_lockspace(bed) -> tuple[int, int] | None:
        """Offset in the LUN's backing file of the VG's lockspace (host 1's delta lease)
        and its sector size (the stride between hosts' delta leases; lvmlockd 2.03.31
        formats with 4096 even on a 512-byte LUN): the first 1 MiB-aligned sector holding
        a delta-lease magic and the VG's lockspace name."""
        want = f"lvm_{VG}".encode()
        with open(bed.lun, "rb") as f:
            for mib in range(0, 2048):
                f.seek(mib << 20)
                rec = f.read(512)
                if rec[:4] == DELTA_MAGIC and rec[56:56 + len(want)] == want:
                    return mib << 20, int.from_bytes(rec[12:16], "little")
        return None

    def versions(bed, g) -> None:
        _, out = g.sh("cat /trixie/versions", check=False)
        bed.timeline.mark(g.name, "trixie packages: " + ", ".join(out.split("\n"))[:300])

    def killed_holder(bed, res, a, b) -> int:
        """a holds the LV exclusively and its lock manager's daemon is SIGKILLed; b's
        `lvchange -aey`, retried every second, must not succeed before a's reset by its
        watchdog or a's host_dead (last renewal + 8·D + W, the renewals read by the bed in
        the LUN's backing file), and must succeed after. Returns b's refusals."""
        v = res.violations
        found = find_lockspace(bed)
        if found is None:
            raise BedError(f"no lockspace lvm_{VG} found in the LUN's first 2 GiB")
        ls_off, sector = found
        bed.timeline.mark("bed", f"lockspace lvm_{VG} at LUN offset {ls_off}, sector size {sector}")
        bed.poller = threading.Thread(target=bed.witness.poll, args=(bed.lun, {1: "g1", 2: "g2"}, ls_off, sector),
                                      daemon=True)
        bed.poller.start()
        must(bed, a, f"lvchange -aey {VG}/{LV}")
        time.sleep(2 * 2 * bed.io_timeout_s + 1)  # renewals seen by the poller
        d, w = bed.io_timeout_s, bed.fire_timeout_s
        res.fault = bed.timeline.mark("bed", f"FAULT {bed.scenario}: SIGKILL g1's {a.kind} daemon (g1 holds the LV -aey)")
        a.sh("kill -KILL $(cat /run/daemon.pid)")
        take = None
        refused = 0
        deadline = time.monotonic() + 8 * d + w + 2 * d + 120
        while time.monotonic() < deadline:
            t0 = bed.clock.now()
            rc, out = b.sh(f"{LVM} lvchange -aey {VG}/{LV} 2>&1", check=False, timeout=120)
            if rc == 0:
                # Stamped at the command's start: the lock may have been granted at any
                # time during it, and never before it was sent.
                take = t0
                bed.timeline.mark("g2", f"lvchange -aey {VG}/{LV} -> rc 0: g2 has the LV "
                                        f"(command sent at {t0:.2f}s) after {refused} refusals")
                break
            refused += 1
            if refused == 1 or refused % 5 == 0:
                gist = " | ".join(ln.strip() for ln in out.splitlines() if "udev" not in ln)[:200]
                bed.timeline.mark("g2", f"lvchange -aey refused ({refused}): {gist}")
            time.sleep(1)
        res.takeover = take
        res.watchdog = a.watchdog_t[0] if a.watchdog_t else None
        res.last_renewal = bed.witness.last_renewal_before(1, res.watchdog or take or bed.clock.now())
        if res.last_renewal is not None:
            res.host_dead = res.last_renewal + 8 * d + w
        else:
            v.append("the bed saw no renewal of g1's delta lease: host_dead cannot be judged")
        if take is None:
            v.append("g2 never got the LV after g1's daemon was killed")
        elif res.host_dead is not None and take + 1.0 < res.host_dead and (
                res.watchdog is None or take + 1.0 < res.watchdog):
            v.append(f"g2 got the LV at {take:.2f}s, before g1's host_dead {res.host_dead:.2f}s "
                     f"and before any reset of g1")
        if res.watchdog is None:
            v.append(f"g1's watchdog never reset it after its {a.kind} daemon was killed")
        if take is not None:
            info(bed, b)
            must(bed, b, f"lvchange -an {VG}/{LV}")
        return refused

    def lvmlockd_both(bed, res) -> None:
        """Both guests on lockd."""
        v = res.violations
        start_storage(bed)
        boot(bed, {1: "lockd", 2: "lockd"})
        a, b = bed.guests[1], bed.guests[2]
        versions(bed, a)
        create_vg(bed, a, b)
        exclusion(bed, a, b, v)
        shared(bed, a, b, v)

        refused = killed_holder(bed, res, a, b)
        print(f"lvm: scenario={bed.scenario} manager_g1=lockd manager_g2=lockd "
              f"refused={getattr(bed, 'lvm_refused', 0)}/{getattr(bed, 'lvm_tries', 0)} "
              f"takeover_refusals={refused} violations={len(v)}", flush=True)

    def lvmlockd_mixed(bed, res, kind2: str = "lockd") -> None:
        """g1: sanlock 3.9.5; g2: lockd (or sanlock 3.9.5 for the reference run). The VG
        is made on the sanlock host."""
        v = res.violations
        facts: dict[str, str] = {}
        # sanlock 3.9.5's watchdog fire timeout is fixed at 60 s; every host of a lockspace
        # must share W, so lockd's is set to it.
        bed.fire_timeout_s = 60
        start_storage(bed)
        boot(bed, {1: "sanlock", 2: kind2})
        a, b = bed.guests[1], bed.guests[2]
        versions(bed, a)
        _, out = a.sh("SANLOCK_RUN_DIR=/run/sanlock /trixie/sbin/sanlock version 2>&1", check=False)
        bed.timeline.mark("g1", f"sanlock daemon: {' '.join(out.split())[:120]}")
        create_vg(bed, a, b)
        bed.timeline.mark("bed", "exclusion: g1 (sanlock) holds first")
        exclusion(bed, a, b, v)
        bed.timeline.mark("bed", f"exclusion: g2 ({kind2}) holds first")
        exclusion(bed, b, a, v)
        shared(bed, a, b, v)
        shared(bed, b, a, v)
        info(bed, a)
        # g2 stops the VG's lockspace; its lock manager then lists no lvm_vgbed. (No
        # vgremove: with lvmlockd 2.03.31 it hangs here on sanlock 3.9.5 as on lockd —
        # lvmlockd's SANLK_REL_RENAME releases of the VG and global locks come on a
        # connection that does not hold them, both daemons answer -1, and lvmlockd then
        # ignores the SIGTERMs of the lockspace removal; docs/integrations.md.)
        facts["refused"] = f"{getattr(bed, 'lvm_refused', 0)}/{getattr(bed, 'lvm_tries', 0)}"
        # The killed holder, across managers: g1's sanlock 3.9.5 daemon dies while g1 holds
        # the LV; g2 may have it only after g1's reset or host_dead (W = 60 here).
        facts["takeover_refusals"] = str(killed_holder(bed, res, a, b))
        for g in (b,):
            must(bed, g, f"vgchange --lockstop {VG}")
            _, out = g.sh(f"SANLOCK_RUN_DIR={g.run_dir} /trixie/sbin/sanlock client gets 2>&1", check=False)
            bed.timeline.mark(g.name, f"after lockstop, {g.kind}: " + " | ".join(out.split("\n"))[:200])
            if f"lvm_{VG}" in out:
                v.append(f"{g.name}: {g.kind} still lists lvm_{VG} after vgchange --lockstop: {out.strip()}")
        facts["lockstop"] = "ok"
        print(f"lvm: scenario={bed.scenario} manager_g1=sanlock-3.9.5 manager_g2={kind2} "
              + " ".join(f"{k}={x}" for k, x in facts.items()) + f" violations={len(v)}", flush=True)

    return {"lvmlockd": lvmlockd_both, "lvmlockd-mixed": lvmlockd_mixed,
            "lvmlockd-sanlock": lambda bed, res: lvmlockd_mixed(bed, res, "sanlock")}
