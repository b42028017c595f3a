//! SCSI status, sense data (SPC-4 §4.5: fixed and descriptor formats) and the SG_IO
//! host/driver status, turned into one verdict per command.
//!
//! Invariants: a command is Ok only with GOOD status (or a CHECK CONDITION whose sense
//! key says the command completed: NO SENSE, RECOVERED ERROR), no transport error, and
//! no driver error; decoding never panics on short or odd sense buffers.

use crate::error::PrError;

/// SCSI status codes (SAM-5), as SG_IO reports them in `status`.
pub const STATUS_GOOD: u8 = 0x00;
pub const STATUS_CHECK_CONDITION: u8 = 0x02;
pub const STATUS_BUSY: u8 = 0x08;
pub const STATUS_RESERVATION_CONFLICT: u8 = 0x18;
pub const STATUS_TASK_SET_FULL: u8 = 0x28;

/// Sense keys (SPC-4 table 51) this crate acts on.
pub const KEY_NO_SENSE: u8 = 0x0;
pub const KEY_RECOVERED_ERROR: u8 = 0x1;
pub const KEY_ILLEGAL_REQUEST: u8 = 0x5;
pub const KEY_UNIT_ATTENTION: u8 = 0x6;

/// The `driver_status` bit saying sense data was written.
const DRIVER_SENSE: u16 = 0x08;

/// Decoded sense data: key, additional sense code and qualifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sense {
    pub key: u8,
    pub asc: u8,
    pub ascq: u8,
}

/// Decodes fixed-format (0x70/0x71) or descriptor-format (0x72/0x73) sense data; None for
/// anything else, or too short to hold a sense key. ASC/ASCQ read as 0 when the fixed
/// format's additional length does not reach them.
pub fn decode(buf: &[u8]) -> Option<Sense> {
    let code = buf.first()? & 0x7f;
    match code {
        0x70 | 0x71 => {
            let key = buf.get(2)? & 0x0f;
            let extra = usize::from(*buf.get(7).unwrap_or(&0));
            let reach = (8 + extra).min(buf.len());
            let at = |i: usize| if i < reach { buf[i] } else { 0 };
            Some(Sense {
                key,
                asc: at(12),
                ascq: at(13),
            })
        }
        0x72 | 0x73 => Some(Sense {
            key: buf.get(1)? & 0x0f,
            asc: *buf.get(2).unwrap_or(&0),
            ascq: *buf.get(3).unwrap_or(&0),
        }),
        _ => None,
    }
}

pub fn key_name(key: u8) -> &'static str {
    match key & 0x0f {
        0x0 => "NO SENSE",
        0x1 => "RECOVERED ERROR",
        0x2 => "NOT READY",
        0x3 => "MEDIUM ERROR",
        0x4 => "HARDWARE ERROR",
        0x5 => "ILLEGAL REQUEST",
        0x6 => "UNIT ATTENTION",
        0x7 => "DATA PROTECT",
        0x8 => "BLANK CHECK",
        0x9 => "VENDOR SPECIFIC",
        0xa => "COPY ABORTED",
        0xb => "ABORTED COMMAND",
        0xd => "VOLUME OVERFLOW",
        0xe => "MISCOMPARE",
        _ => "RESERVED",
    }
}

/// A description of the additional sense codes a PR user meets; the numbers otherwise.
pub fn asc_text(asc: u8, ascq: u8) -> String {
    let known = match (asc, ascq) {
        (0x04, _) => Some("logical unit not ready"),
        (0x1a, 0x00) => Some("parameter list length error"),
        (0x20, 0x00) => Some("invalid command operation code"),
        (0x24, 0x00) => Some("invalid field in CDB"),
        (0x25, 0x00) => Some("logical unit not supported"),
        (0x26, 0x00) => Some("invalid field in parameter list"),
        (0x29, _) => Some("power on, reset, or bus device reset occurred"),
        (0x2a, 0x03) => Some("reservations preempted"),
        (0x2a, 0x04) => Some("reservations released"),
        (0x2a, 0x05) => Some("registrations preempted"),
        (0x3f, 0x0e) => Some("reported LUNs data has changed"),
        (0x55, 0x02) => Some("insufficient reservation resources"),
        (0x55, 0x04) => Some("insufficient registration resources"),
        _ => None,
    };
    match known {
        Some(t) => format!("{t}, asc 0x{asc:02x} ascq 0x{ascq:02x}"),
        None => format!("asc 0x{asc:02x} ascq 0x{ascq:02x}"),
    }
}

fn host_name(host_status: u16) -> &'static str {
    match host_status {
        0x01 => "DID_NO_CONNECT",
        0x02 => "DID_BUS_BUSY",
        0x03 => "DID_TIME_OUT",
        0x04 => "DID_BAD_TARGET",
        0x05 => "DID_ABORT",
        0x06 => "DID_PARITY",
        0x07 => "DID_ERROR",
        0x08 => "DID_RESET",
        0x09 => "DID_BAD_INTR",
        0x0a => "DID_PASSTHROUGH",
        0x0b => "DID_SOFT_ERROR",
        0x0c => "DID_IMM_RETRY",
        0x0d => "DID_REQUEUE",
        0x0e => "DID_TRANSPORT_DISRUPTED",
        0x0f => "DID_TRANSPORT_FAILFAST",
        0x11 => "DID_TRANSPORT_MARGINAL",
        _ => "unknown",
    }
}

/// What SG_IO reported for one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion<'a> {
    pub status: u8,
    pub host_status: u16,
    pub driver_status: u16,
    /// The sense bytes written (`sb_len_wr` of them).
    pub sense: &'a [u8],
}

/// The verdict on one command named `what`.
pub fn verdict(what: &'static str, c: Completion<'_>) -> Result<(), PrError> {
    if c.host_status != 0 {
        return Err(PrError::Transport {
            what,
            host_status: c.host_status,
            host_name: host_name(c.host_status),
            driver_status: c.driver_status,
        });
    }
    let status = c.status & 0xfe;
    let sense = if status == STATUS_CHECK_CONDITION || c.driver_status & DRIVER_SENSE != 0 {
        decode(c.sense)
    } else {
        None
    };
    match status {
        STATUS_GOOD if sense.is_none() => {}
        STATUS_RESERVATION_CONFLICT => return Err(PrError::ReservationConflict { what }),
        STATUS_GOOD | STATUS_CHECK_CONDITION => match sense {
            None => {
                return Err(PrError::Status {
                    what,
                    status,
                    name: "CHECK CONDITION without sense data",
                })
            }
            Some(s) => match s.key {
                KEY_NO_SENSE | KEY_RECOVERED_ERROR => {}
                KEY_ILLEGAL_REQUEST if matches!((s.asc, s.ascq), (0x20, 0x00) | (0x24, 0x00)) => {
                    return Err(PrError::NotSupported {
                        what,
                        reason: format!("ILLEGAL REQUEST: {}", asc_text(s.asc, s.ascq)),
                    })
                }
                KEY_UNIT_ATTENTION => {
                    return Err(PrError::UnitAttention {
                        what,
                        reason: asc_text(s.asc, s.ascq),
                    })
                }
                _ => {
                    return Err(PrError::Check {
                        what,
                        key_name: key_name(s.key),
                        sense_key: s.key,
                        asc: s.asc,
                        ascq: s.ascq,
                        reason: asc_text(s.asc, s.ascq),
                    })
                }
            },
        },
        STATUS_BUSY => {
            return Err(PrError::Status {
                what,
                status,
                name: "BUSY",
            })
        }
        STATUS_TASK_SET_FULL => {
            return Err(PrError::Status {
                what,
                status,
                name: "TASK SET FULL",
            })
        }
        _ => {
            return Err(PrError::Status {
                what,
                status,
                name: "unexpected",
            })
        }
    }
    // The low three bits of driver_status: 0 DRIVER_OK; 1..=7 (busy, soft, media, error,
    // invalid, timeout, hard) mean the command did not complete normally. 0x08 is
    // DRIVER_SENSE, a flag (sense data written), handled above.
    if c.driver_status & 0x07 != 0 {
        return Err(PrError::Transport {
            what,
            host_status: 0,
            host_name: "DID_OK",
            driver_status: c.driver_status,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(key: u8, asc: u8, ascq: u8) -> Vec<u8> {
        let mut b = vec![0u8; 18];
        b[0] = 0x70;
        b[2] = key;
        b[7] = 10;
        b[12] = asc;
        b[13] = ascq;
        b
    }

    fn done(status: u8, sense: &[u8]) -> Completion<'_> {
        Completion {
            status,
            host_status: 0,
            driver_status: if sense.is_empty() { 0 } else { DRIVER_SENSE },
            sense,
        }
    }

    #[test]
    fn decodes_both_formats() {
        assert_eq!(
            decode(&fixed(5, 0x24, 0)),
            Some(Sense {
                key: 5,
                asc: 0x24,
                ascq: 0
            })
        );
        assert_eq!(
            decode(&[0x72, 0x06, 0x2a, 0x03, 0, 0, 0, 0]),
            Some(Sense {
                key: 6,
                asc: 0x2a,
                ascq: 0x03
            })
        );
        // Fixed format whose additional length stops before ASC.
        assert_eq!(
            decode(&[0xf0, 0, 0x05, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0x24, 0]),
            Some(Sense {
                key: 5,
                asc: 0,
                ascq: 0
            })
        );
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[0x70, 0]), None);
        assert_eq!(decode(&[0x72]), None);
        assert_eq!(decode(&[0x00; 18]), None);
    }

    #[test]
    fn verdicts() {
        assert!(verdict("X", done(0, &[])).is_ok());
        assert!(verdict("X", done(0x18, &[]))
            .unwrap_err()
            .is_reservation_conflict());
        let e = verdict("PREEMPT AND ABORT", done(2, &fixed(5, 0x24, 0))).unwrap_err();
        assert!(e.is_not_supported(), "{e}");
        assert!(e.to_string().contains("invalid field in CDB"), "{e}");
        let e = verdict("X", done(2, &fixed(5, 0x20, 0))).unwrap_err();
        assert!(e.is_not_supported());
        let e = verdict("X", done(2, &fixed(5, 0x26, 0))).unwrap_err();
        assert!(matches!(e, PrError::Check { asc: 0x26, .. }), "{e}");
        let e = verdict("X", done(2, &fixed(6, 0x2a, 3))).unwrap_err();
        assert!(matches!(e, PrError::UnitAttention { .. }));
        assert!(e.to_string().contains("reservations preempted"));
        assert!(verdict("X", done(2, &fixed(1, 0, 0))).is_ok());
        assert!(matches!(
            verdict("X", done(2, &[])),
            Err(PrError::Status { .. })
        ));
        assert!(matches!(
            verdict("X", done(8, &[])),
            Err(PrError::Status { status: 8, .. })
        ));
        let t = Completion {
            status: 0,
            host_status: 1,
            driver_status: 0,
            sense: &[],
        };
        assert!(verdict("X", t)
            .unwrap_err()
            .to_string()
            .contains("DID_NO_CONNECT"));
        let d = Completion {
            status: 0,
            host_status: 0,
            driver_status: 6,
            sense: &[],
        };
        assert!(matches!(verdict("X", d), Err(PrError::Transport { .. })));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
                        status: u8, host: u16, driver: u16) {
            let _ = decode(&b);
            let _ = verdict("X", Completion { status, host_status: host, driver_status: driver, sense: &b });
        }
    }
}
