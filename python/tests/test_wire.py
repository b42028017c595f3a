"""The Python encodings against the Rust ones: the golden bytes of client-lib's own
tests (ext.rs), spec parsing, and the decoders' refusals (no daemon needed)."""

import dataclasses
import struct

import pytest

import lockd
from lockd import _wire as w


def test_watch_event_golden_bytes_as_client_lib() -> None:
    b = bytearray(144)
    b[0:4] = struct.pack("=I", 2)
    b[8:12] = struct.pack("=I", 1)
    b[12:16] = struct.pack("=i", 4242)
    b[16:18] = b"ls"
    b[64:66] = b"r1"
    b[112:120] = struct.pack("=Q", 7)
    b[120:128] = struct.pack("=q", 1500)
    b[128:136] = struct.pack("=q", -(2**63))
    b[136:144] = struct.pack("=Q", 6000)
    e = w.decode_watch_event(bytes(b))
    assert e == w.WatchEvent(kind="renewal_failing", force_mode=0, leases=1, pid=4242,
                             lockspace="ls", resource="r1", lver=7, kill_in_ms=1500,
                             watchdog_in_ms=None, renewal_age_ms=6000)
    with pytest.raises(w.WireError):
        w.decode_watch_event(bytes(10))
    bad = bytearray(b)
    bad[0:4] = struct.pack("=I", 99)
    with pytest.raises(w.WireError):
        w.decode_watch_event(bytes(bad))
    notice = lockd.lease._loss_of(e, lockd.LeaseSpec.parse("ls:r9:/p:0"))
    assert notice is not None
    assert notice.reason == "renewal_failing" and notice.kill_in == 1.5
    assert notice.watchdog_in is None
    assert lockd.lease._loss_of(e, lockd.LeaseSpec.parse("other:r1:/p:0")) is None


def test_leader_info_layout() -> None:
    b = bytearray(96)
    b[0:8] = struct.pack("=Q", 3)
    b[8:16] = struct.pack("=Q", 2)
    b[16:24] = struct.pack("=Q", 11)
    b[24:28] = struct.pack("=I", 3)
    b[32:37] = b"node3"
    info = w.decode_leader_info(bytes(b))
    assert info == lockd.LeaderInfo(host_id=3, generation=2, token=11, state="live",
                                    shared=False, host_name="node3")
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(info, "token", 12)
    assert dataclasses.asdict(info)["host_name"] == "node3"
    with pytest.raises(w.WireError) as e:
        w.decode_leader_info(bytes(50))
    assert e.value.code == -71 and isinstance(e.value, lockd.LockdError)


def test_request_encodings() -> None:
    h = w.header(w.SM_CMD_ACQUIRE, 8, 128 + 1040 + 56, 1, 0xFFFFFFFF)
    assert h == struct.pack("=8I", 0x04282010, 1, 7, 8, 32 + 1224, 0, 1, 0xFFFFFFFF)
    r = w.resource("ls", "r1", [("/dev/x", 1 << 20)], flags=w.SANLK_RES_SHARED)
    assert len(r) == 128 + 1040
    assert r[:2] == b"ls" and r[48:50] == b"r1" and r[120:128] == struct.pack("=II", 4, 1)
    assert r[128:134] == b"/dev/x" and r[128 + 1024:128 + 1032] == struct.pack("=Q", 1 << 20)
    with pytest.raises(w.WireError):
        w.resource("x" * 49, "r", [])
    with pytest.raises(w.WireError):
        w.decode_header(struct.pack("=8I", 0xDEAD, 1, 0, 0, 32, 0, 0, 0))
    with pytest.raises(w.WireError):
        w.decode_header(struct.pack("=8I", 0x04282010, 1, 0, 0, 2 << 20, 0, 0, 0))


def test_spec_parsing() -> None:
    s = lockd.LeaseSpec.parse("ls:r:/a:b/c:4096")
    assert (s.path, s.offset, s.short()) == ("/a:b/c", 4096, "ls:r")
    assert lockd.LeaseSpec.parse("ls:leader:/dev/loop0:1M").offset == 1 << 20
    for bad in ["", "ls", "ls:r", "ls:r:/p", "ls:r::0", "ls:r:/p:x", ":r:/p:0", "ls::/p:0",
                "ls:r:/p:99999999999999999999G", "l\0s:r:/p:0", "x" * 49 + ":r:/p:0"]:
        with pytest.raises(lockd.BadSpec) as e:
            lockd.LeaseSpec.parse(bad)
        assert e.value.code == -22


def test_spec_on_several_disks() -> None:
    s = lockd.LeaseSpec.parse("ls:r:/a:0:/b:1M:/c:4096")
    assert (s.path, s.offset) == ("/a", 0)
    assert s.more_disks == (("/b", 1 << 20), ("/c", 4096))
    assert str(s) == "ls:r:/a:0:/b:1048576:/c:4096"
    assert lockd.LeaseSpec.parse(str(s)).disks() == s.disks()
    head = w.decode_resource_head(s.resource()[:128])
    assert head.num_disks == 3
    assert lockd.LeaseSpec.parse("ls:r:/a:b/c:4096").more_disks == ()
    for bad in ["ls:r:/a:0:/b:0:/c:0:/d:0:/e:0", "ls:r:/a:0::0"]:
        with pytest.raises(lockd.BadSpec):
            lockd.LeaseSpec.parse(bad)


def test_decoded_replies_are_frozen_dataclasses() -> None:
    h = w.decode_header(w.header(w.SM_CMD_ACQUIRE, 0, 0, (-243) & 0xFFFFFFFF, 5))
    assert (h.cmd, h.result, h.data2, h.payload_len) == (w.SM_CMD_ACQUIRE, -243, 5, 0)
    host = w.decode_host(struct.pack("=QQQII", 2, 1, 99, 10, 3))
    assert host == w.HostInfo(host_id=2, generation=1, timestamp=99, io_timeout=10,
                              state="live")
    head = w.decode_resource_head(w.resource("ls", "r1", [("/d", 4096)], lver=3)[:128])
    assert (head.lockspace, head.name, head.lver, head.num_disks, head.disks) == \
        ("ls", "r1", 3, 1, ())
    for value in (h, host, head):
        assert dataclasses.is_dataclass(value)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, "flags", 1)
    notice = lockd.LossNotice("requested", kill_in=0.0, force_mode=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(notice, "reason", "x")
    assert notice.as_dict() == {"reason": "requested", "kill_in": 0.0, "watchdog_in": None,
                                "force_mode": 1}
