//! Golden CDBs and parameter lists: the bytes `sg_persist -n -vvvv` of sg3-utils 1.46
//! (Debian 12) printed for the same commands (recorded on a loop device, where the ioctl
//! then fails, so nothing was sent). lockd's bytes must equal sg_persist's.

use lockd_scsi_pr::cdb::{in_cdb, out_cdb, out_params, InAction, OutAction, OutParams, PrType};

const WE_RO: Option<PrType> = Some(PrType::WriteExclusiveRegistrantsOnly);
const KEY_A: u64 = 0x1000_0000_0005_0003;
const KEY_B: u64 = 0x1000_0000_0001_0002;
const KEY_C: u64 = 0x1000_0000_0001_0001;

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect()
}

fn check(action: OutAction, t: Option<PrType>, p: OutParams, cdb: &str, params: &str) {
    assert_eq!(
        out_cdb(action, t).to_vec(),
        hex(cdb),
        "{} CDB",
        action.name()
    );
    assert_eq!(
        out_params(p).to_vec(),
        hex(params),
        "{} parameters",
        action.name()
    );
}

fn keys(rk: u64, sark: u64) -> OutParams {
    OutParams {
        reservation_key: rk,
        service_action_key: sark,
    }
}

#[test]
fn register() {
    // sg_persist --out --register --param-sark=0x1000000000050003
    check(
        OutAction::Register,
        None,
        keys(0, KEY_A),
        "5f 00 00 00 00 00 00 00 18 00",
        "00 00 00 00 00 00 00 00 10 00 00 00 00 05 00 03 00 00 00 00 00 00 00 00",
    );
}

#[test]
fn register_ignore() {
    // sg_persist --out --register-ignore --param-sark=0x1000000000050003
    check(
        OutAction::RegisterAndIgnoreExistingKey,
        None,
        keys(0, KEY_A),
        "5f 06 00 00 00 00 00 00 18 00",
        "00 00 00 00 00 00 00 00 10 00 00 00 00 05 00 03 00 00 00 00 00 00 00 00",
    );
}

#[test]
fn reserve_release_clear() {
    // sg_persist --out --reserve|--release --param-rk=0x1000000000050003 --prout-type=5
    let own = "10 00 00 00 00 05 00 03 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";
    check(
        OutAction::Reserve,
        WE_RO,
        keys(KEY_A, 0),
        "5f 01 05 00 00 00 00 00 18 00",
        own,
    );
    check(
        OutAction::Release,
        WE_RO,
        keys(KEY_A, 0),
        "5f 02 05 00 00 00 00 00 18 00",
        own,
    );
    // sg_persist --out --clear --param-rk=0x1000000000050003
    check(
        OutAction::Clear,
        None,
        keys(KEY_A, 0),
        "5f 03 00 00 00 00 00 00 18 00",
        own,
    );
}

#[test]
fn preempt_and_abort() {
    // sg_persist --out --preempt[-abort] --param-rk=0x1000000000010002
    //   --param-sark=0x1000000000010001 --prout-type=5
    let p = "10 00 00 00 00 01 00 02 10 00 00 00 00 01 00 01 00 00 00 00 00 00 00 00";
    check(
        OutAction::Preempt,
        WE_RO,
        keys(KEY_B, KEY_C),
        "5f 04 05 00 00 00 00 00 18 00",
        p,
    );
    check(
        OutAction::PreemptAndAbort,
        WE_RO,
        keys(KEY_B, KEY_C),
        "5f 05 05 00 00 00 00 00 18 00",
        p,
    );
}

#[test]
fn pr_in() {
    // sg_persist --in -k | -r | -c (allocation length 0x2000)
    assert_eq!(
        in_cdb(InAction::ReadKeys, 0x2000).to_vec(),
        hex("5e 00 00 00 00 00 00 20 00 00")
    );
    assert_eq!(
        in_cdb(InAction::ReadReservation, 0x2000).to_vec(),
        hex("5e 01 00 00 00 00 00 20 00 00")
    );
    assert_eq!(
        in_cdb(InAction::ReportCapabilities, 0x2000).to_vec(),
        hex("5e 02 00 00 00 00 00 20 00 00")
    );
}
