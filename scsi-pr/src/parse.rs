//! Answers of PERSISTENT RESERVE IN (SPC-4 §6.15.2–6.15.4), decoded from the bytes that
//! actually arrived (the allocation length minus the residual count).
//!
//! Invariants: no input panics (every read is bounds-checked); an answer longer than the
//! buffer is reported as truncated with the complete entries that did arrive, never
//! padded; a field that cannot be right (READ KEYS' length not a multiple of 8) is an
//! error.

use crate::cdb::PrType;
use crate::error::PrError;

fn be32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_be_bytes(a))
}

fn short(what: &'static str, need: usize, got: usize) -> PrError {
    PrError::Malformed {
        what,
        detail: format!("{got} bytes, at least {need} needed"),
    }
}

/// READ KEYS: the PR generation and every registered key (one per registered I_T nexus,
/// so a host with two paths appears twice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// PRgeneration: bumped by the device on every successful PR OUT except RESERVE and
    /// RELEASE.
    pub generation: u32,
    pub keys: Vec<u64>,
    /// The device had more keys than the buffer held (ask again with a larger one).
    pub truncated: bool,
    /// ADDITIONAL LENGTH as the device reported it.
    pub reported_len_bytes: u32,
}

pub fn read_keys(buf: &[u8]) -> Result<Keys, PrError> {
    const WHAT: &str = "READ KEYS";
    let (Some(generation), Some(len)) = (be32(buf, 0), be32(buf, 4)) else {
        return Err(short(WHAT, 8, buf.len()));
    };
    if len % 8 != 0 {
        return Err(PrError::Malformed {
            what: WHAT,
            detail: format!("additional length {len} is not a multiple of 8"),
        });
    }
    let body = &buf[8..];
    let present = usize::try_from(len).unwrap_or(usize::MAX).min(body.len());
    let keys = body[..present - present % 8]
        .chunks_exact(8)
        .filter_map(|c| be64(c, 0))
        .collect::<Vec<_>>();
    Ok(Keys {
        generation,
        truncated: (keys.len() as u64) * 8 < u64::from(len),
        keys,
        reported_len_bytes: len,
    })
}

/// The reservation a device holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The key of the holder (for the all-registrants types the device reports 0).
    pub key: u64,
    /// SCOPE (the high nibble of byte 21; 0 = logical unit).
    pub scope: u8,
    /// TYPE as sent (the low nibble of byte 21).
    pub type_code: u8,
    /// TYPE decoded; None for a code SPC-4 does not define.
    pub pr_type: Option<PrType>,
}

/// READ RESERVATION: the PR generation and the reservation, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationState {
    pub generation: u32,
    pub reservation: Option<Reservation>,
}

pub fn read_reservation(buf: &[u8]) -> Result<ReservationState, PrError> {
    const WHAT: &str = "READ RESERVATION";
    let (Some(generation), Some(len)) = (be32(buf, 0), be32(buf, 4)) else {
        return Err(short(WHAT, 8, buf.len()));
    };
    if len == 0 {
        return Ok(ReservationState {
            generation,
            reservation: None,
        });
    }
    if len < 16 {
        return Err(PrError::Malformed {
            what: WHAT,
            detail: format!("additional length {len}, expected 0 or 16"),
        });
    }
    let (Some(key), Some(&scope_type)) = (be64(buf, 8), buf.get(21)) else {
        return Err(short(WHAT, 24, buf.len()));
    };
    let type_code = scope_type & 0x0f;
    Ok(ReservationState {
        generation,
        reservation: Some(Reservation {
            key,
            scope: scope_type >> 4,
            type_code,
            pr_type: PrType::from_code(type_code),
        }),
    })
}

/// REPORT CAPABILITIES (SPC-4 §6.15.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// CRH: RESERVE/RELEASE of SPC-2 are handled by the PR rules.
    pub compatible_reservation_handling: bool,
    /// SIP_C: SPEC_I_PT is supported.
    pub specify_initiator_ports: bool,
    /// ATP_C: ALL_TG_PT is supported.
    pub all_target_ports: bool,
    /// PTPL_C: persist through power loss (APTPL) is supported.
    pub persist_through_power_loss: bool,
    /// PTPL_A: persist through power loss is active now.
    pub persist_through_power_loss_active: bool,
    /// TMV: the type mask below is valid.
    pub type_mask_valid: bool,
    /// ALLOW COMMANDS (3 bits).
    pub allow_commands: u8,
    /// The reservation types the device supports (empty unless `type_mask_valid`).
    pub types: Vec<PrType>,
}

impl Capabilities {
    /// Whether `t` is supported; None when the device gave no valid type mask.
    pub fn supports(&self, t: PrType) -> Option<bool> {
        self.type_mask_valid.then(|| self.types.contains(&t))
    }
}

pub fn report_capabilities(buf: &[u8]) -> Result<Capabilities, PrError> {
    const WHAT: &str = "REPORT CAPABILITIES";
    if buf.len() < 6 {
        return Err(short(WHAT, 6, buf.len()));
    }
    let len = u16::from_be_bytes([buf[0], buf[1]]);
    if len < 6 {
        return Err(PrError::Malformed {
            what: WHAT,
            detail: format!("length {len}, expected 8"),
        });
    }
    let (b2, b3, b4, b5) = (buf[2], buf[3], buf[4], buf[5]);
    let type_mask_valid = b3 & 0x80 != 0;
    let mut types = Vec::new();
    if type_mask_valid {
        // Byte 4: WR_EX_AR bit 7, EX_AC_RO bit 6, WR_EX_RO bit 5, EX_AC bit 3, WR_EX bit 1;
        // byte 5: EX_AC_AR bit 0.
        for (bit_set, t) in [
            (b4 & 0x02 != 0, PrType::WriteExclusive),
            (b4 & 0x08 != 0, PrType::ExclusiveAccess),
            (b4 & 0x20 != 0, PrType::WriteExclusiveRegistrantsOnly),
            (b4 & 0x40 != 0, PrType::ExclusiveAccessRegistrantsOnly),
            (b4 & 0x80 != 0, PrType::WriteExclusiveAllRegistrants),
            (b5 & 0x01 != 0, PrType::ExclusiveAccessAllRegistrants),
        ] {
            if bit_set {
                types.push(t);
            }
        }
    }
    Ok(Capabilities {
        compatible_reservation_handling: b2 & 0x10 != 0,
        specify_initiator_ports: b2 & 0x08 != 0,
        all_target_ports: b2 & 0x04 != 0,
        persist_through_power_loss: b2 & 0x01 != 0,
        persist_through_power_loss_active: b3 & 0x01 != 0,
        type_mask_valid,
        allow_commands: (b3 >> 4) & 0x07,
        types,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_two() {
        let mut b = vec![0, 0, 0, 9, 0, 0, 0, 16];
        b.extend_from_slice(&0x1000_0000_0001_0001u64.to_be_bytes());
        b.extend_from_slice(&0x1000_0000_0001_0002u64.to_be_bytes());
        let k = read_keys(&b).unwrap();
        assert_eq!(k.generation, 9);
        assert_eq!(k.keys, vec![0x1000_0000_0001_0001, 0x1000_0000_0001_0002]);
        assert!(!k.truncated);
    }

    #[test]
    fn keys_truncated_and_partial_entry() {
        let mut b = vec![0, 0, 0, 1, 0, 0, 0, 24];
        b.extend_from_slice(&7u64.to_be_bytes());
        b.extend_from_slice(&[1, 2, 3]); // a partial second key
        let k = read_keys(&b).unwrap();
        assert_eq!(k.keys, vec![7]);
        assert!(k.truncated);
        assert_eq!(k.reported_len_bytes, 24);
    }

    #[test]
    fn keys_errors() {
        assert!(read_keys(&[]).is_err());
        assert!(read_keys(&[0; 7]).is_err());
        assert!(read_keys(&[0, 0, 0, 0, 0, 0, 0, 5]).is_err());
        let k = read_keys(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf8]).unwrap();
        assert!(k.keys.is_empty() && k.truncated);
    }

    #[test]
    fn reservation_none_and_some() {
        let r = read_reservation(&[0, 0, 0, 3, 0, 0, 0, 0]).unwrap();
        assert_eq!(r.generation, 3);
        assert_eq!(r.reservation, None);
        let mut b = vec![0, 0, 0, 4, 0, 0, 0, 16];
        b.extend_from_slice(&0xabcdu64.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0x05, 0, 0]);
        let r = read_reservation(&b).unwrap().reservation.unwrap();
        assert_eq!(r.key, 0xabcd);
        assert_eq!(r.pr_type, Some(PrType::WriteExclusiveRegistrantsOnly));
        assert_eq!(r.scope, 0);
        b[21] = 0x1f;
        let r = read_reservation(&b).unwrap().reservation.unwrap();
        assert_eq!((r.scope, r.type_code, r.pr_type), (1, 0xf, None));
    }

    #[test]
    fn reservation_errors() {
        assert!(read_reservation(&[0; 4]).is_err());
        assert!(read_reservation(&[0, 0, 0, 0, 0, 0, 0, 8]).is_err());
        assert!(read_reservation(&[0, 0, 0, 0, 0, 0, 0, 16, 1, 2]).is_err());
    }

    #[test]
    fn capabilities() {
        // tgt-like: PTPL_C, TMV, WR_EX, EX_AC, WR_EX_RO, EX_AC_RO, WR_EX_AR, EX_AC_AR.
        let c = report_capabilities(&[0, 8, 0x01, 0x80, 0xea, 0x01, 0, 0]).unwrap();
        assert!(c.persist_through_power_loss && c.type_mask_valid);
        assert_eq!(c.types.len(), 6);
        assert_eq!(
            c.supports(PrType::WriteExclusiveRegistrantsOnly),
            Some(true)
        );
        let c = report_capabilities(&[0, 8, 0, 0x00, 0xff, 0xff, 0, 0]).unwrap();
        assert!(c.types.is_empty());
        assert_eq!(c.supports(PrType::WriteExclusive), None);
        let c = report_capabilities(&[0, 8, 0x1c, 0xf1, 0x20, 0, 0, 0]).unwrap();
        assert!(
            c.compatible_reservation_handling && c.specify_initiator_ports && c.all_target_ports
        );
        assert!(c.persist_through_power_loss_active);
        assert_eq!(c.allow_commands, 7);
        assert_eq!(c.types, vec![PrType::WriteExclusiveRegistrantsOnly]);
        assert!(report_capabilities(&[0, 8, 0, 0]).is_err());
        assert!(report_capabilities(&[0, 2, 0, 0, 0, 0]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let _ = read_keys(&b);
            let _ = read_reservation(&b);
            let _ = report_capabilities(&b);
        }
    }
}
