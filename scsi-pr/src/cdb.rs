//! PERSISTENT RESERVE IN (0x5E) and OUT (0x5F) command descriptor blocks and the basic PR
//! OUT parameter list, byte for byte as SPC-4 §6.15 and §6.16 lay them out.
//!
//! Invariants: every CDB is 10 bytes with the control byte 0; the PR OUT parameter list is
//! always the 24-byte basic list with APTPL, ALL_TG_PT and SPEC_I_PT clear (this host's
//! I_T nexus only, nothing persisted through power loss); multi-byte fields are big-endian.

/// PERSISTENT RESERVE IN operation code.
pub const PR_IN_OPCODE: u8 = 0x5e;
/// PERSISTENT RESERVE OUT operation code.
pub const PR_OUT_OPCODE: u8 = 0x5f;
/// Length of both CDBs.
pub const CDB_LEN: usize = 10;
/// Length of the basic PR OUT parameter list (SPEC_I_PT clear).
pub const OUT_PARAMS_LEN: usize = 24;

/// PERSISTENT RESERVE IN service actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InAction {
    ReadKeys,
    ReadReservation,
    ReportCapabilities,
}

impl InAction {
    pub fn code(self) -> u8 {
        match self {
            InAction::ReadKeys => 0x00,
            InAction::ReadReservation => 0x01,
            InAction::ReportCapabilities => 0x02,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            InAction::ReadKeys => "READ KEYS",
            InAction::ReadReservation => "READ RESERVATION",
            InAction::ReportCapabilities => "REPORT CAPABILITIES",
        }
    }
}

/// PERSISTENT RESERVE OUT service actions (REGISTER AND MOVE is not offered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutAction {
    Register,
    Reserve,
    Release,
    Clear,
    Preempt,
    PreemptAndAbort,
    RegisterAndIgnoreExistingKey,
}

impl OutAction {
    pub fn code(self) -> u8 {
        match self {
            OutAction::Register => 0x00,
            OutAction::Reserve => 0x01,
            OutAction::Release => 0x02,
            OutAction::Clear => 0x03,
            OutAction::Preempt => 0x04,
            OutAction::PreemptAndAbort => 0x05,
            OutAction::RegisterAndIgnoreExistingKey => 0x06,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OutAction::Register => "REGISTER",
            OutAction::Reserve => "RESERVE",
            OutAction::Release => "RELEASE",
            OutAction::Clear => "CLEAR",
            OutAction::Preempt => "PREEMPT",
            OutAction::PreemptAndAbort => "PREEMPT AND ABORT",
            OutAction::RegisterAndIgnoreExistingKey => "REGISTER AND IGNORE EXISTING KEY",
        }
    }

    /// Whether the TYPE field of the CDB means anything for this action (SPC-4: RESERVE,
    /// RELEASE, PREEMPT, PREEMPT AND ABORT; ignored by the others, sent as 0).
    pub fn uses_type(self) -> bool {
        matches!(
            self,
            OutAction::Reserve
                | OutAction::Release
                | OutAction::Preempt
                | OutAction::PreemptAndAbort
        )
    }
}

/// Persistent reservation types (SPC-4 table 169).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrType {
    WriteExclusive,
    ExclusiveAccess,
    WriteExclusiveRegistrantsOnly,
    ExclusiveAccessRegistrantsOnly,
    WriteExclusiveAllRegistrants,
    ExclusiveAccessAllRegistrants,
}

impl PrType {
    pub const ALL: [PrType; 6] = [
        PrType::WriteExclusive,
        PrType::ExclusiveAccess,
        PrType::WriteExclusiveRegistrantsOnly,
        PrType::ExclusiveAccessRegistrantsOnly,
        PrType::WriteExclusiveAllRegistrants,
        PrType::ExclusiveAccessAllRegistrants,
    ];

    pub fn code(self) -> u8 {
        match self {
            PrType::WriteExclusive => 1,
            PrType::ExclusiveAccess => 3,
            PrType::WriteExclusiveRegistrantsOnly => 5,
            PrType::ExclusiveAccessRegistrantsOnly => 6,
            PrType::WriteExclusiveAllRegistrants => 7,
            PrType::ExclusiveAccessAllRegistrants => 8,
        }
    }

    pub fn from_code(code: u8) -> Option<PrType> {
        PrType::ALL.into_iter().find(|t| t.code() == code)
    }

    /// The block layer's `enum pr_type` (`linux/pr.h`), which numbers the types 1–6 in
    /// this order, not by their SCSI codes.
    pub fn block_code(self) -> u32 {
        match self {
            PrType::WriteExclusive => 1,
            PrType::ExclusiveAccess => 2,
            PrType::WriteExclusiveRegistrantsOnly => 3,
            PrType::ExclusiveAccessRegistrantsOnly => 4,
            PrType::WriteExclusiveAllRegistrants => 5,
            PrType::ExclusiveAccessAllRegistrants => 6,
        }
    }

    pub fn from_block_code(code: u32) -> Option<PrType> {
        PrType::ALL.into_iter().find(|t| t.block_code() == code)
    }

    /// The short name used on the command line and in output: we, ea, we-ro, ea-ro,
    /// we-ar, ea-ar.
    pub fn short(self) -> &'static str {
        match self {
            PrType::WriteExclusive => "we",
            PrType::ExclusiveAccess => "ea",
            PrType::WriteExclusiveRegistrantsOnly => "we-ro",
            PrType::ExclusiveAccessRegistrantsOnly => "ea-ro",
            PrType::WriteExclusiveAllRegistrants => "we-ar",
            PrType::ExclusiveAccessAllRegistrants => "ea-ar",
        }
    }

    pub fn from_short(s: &str) -> Option<PrType> {
        PrType::ALL
            .into_iter()
            .find(|t| t.short().eq_ignore_ascii_case(s))
    }

    pub fn long_name(self) -> &'static str {
        match self {
            PrType::WriteExclusive => "Write Exclusive",
            PrType::ExclusiveAccess => "Exclusive Access",
            PrType::WriteExclusiveRegistrantsOnly => "Write Exclusive - Registrants Only",
            PrType::ExclusiveAccessRegistrantsOnly => "Exclusive Access - Registrants Only",
            PrType::WriteExclusiveAllRegistrants => "Write Exclusive - All Registrants",
            PrType::ExclusiveAccessAllRegistrants => "Exclusive Access - All Registrants",
        }
    }
}

/// PERSISTENT RESERVE IN CDB asking for at most `alloc_len_bytes` of answer.
pub fn in_cdb(action: InAction, alloc_len_bytes: u16) -> [u8; CDB_LEN] {
    let mut c = [0u8; CDB_LEN];
    c[0] = PR_IN_OPCODE;
    c[1] = action.code() & 0x1f;
    c[7..9].copy_from_slice(&alloc_len_bytes.to_be_bytes());
    c
}

/// PERSISTENT RESERVE OUT CDB: scope LU_SCOPE (0), `pr_type` in the low nibble of byte 2
/// for the actions that use it (0 otherwise), parameter list length 24.
pub fn out_cdb(action: OutAction, pr_type: Option<PrType>) -> [u8; CDB_LEN] {
    let mut c = [0u8; CDB_LEN];
    c[0] = PR_OUT_OPCODE;
    c[1] = action.code() & 0x1f;
    if action.uses_type() {
        c[2] = pr_type.map_or(0, PrType::code) & 0x0f;
    }
    c[5..9].copy_from_slice(&(OUT_PARAMS_LEN as u32).to_be_bytes());
    c
}

/// The two keys of a PR OUT parameter list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutParams {
    /// RESERVATION KEY: the key this I_T nexus is registered with (0 when unregistered,
    /// and ignored by REGISTER AND IGNORE EXISTING KEY).
    pub reservation_key: u64,
    /// SERVICE ACTION RESERVATION KEY: the new key of REGISTER, the victim of PREEMPT.
    pub service_action_key: u64,
}

/// The 24-byte basic PR OUT parameter list: keys at bytes 0..8 and 8..16, byte 20 holds
/// SPEC_I_PT (bit 3), ALL_TG_PT (bit 2) and APTPL (bit 0), all clear.
pub fn out_params(p: OutParams) -> [u8; OUT_PARAMS_LEN] {
    let mut b = [0u8; OUT_PARAMS_LEN];
    b[0..8].copy_from_slice(&p.reservation_key.to_be_bytes());
    b[8..16].copy_from_slice(&p.service_action_key.to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_cdb_layout() {
        assert_eq!(
            in_cdb(InAction::ReadKeys, 0x2008),
            [0x5e, 0x00, 0, 0, 0, 0, 0, 0x20, 0x08, 0]
        );
        assert_eq!(
            in_cdb(InAction::ReadReservation, 24),
            [0x5e, 0x01, 0, 0, 0, 0, 0, 0, 24, 0]
        );
        assert_eq!(
            in_cdb(InAction::ReportCapabilities, 8),
            [0x5e, 0x02, 0, 0, 0, 0, 0, 0, 8, 0]
        );
    }

    #[test]
    fn out_cdb_type_only_where_it_means_something() {
        let t = Some(PrType::WriteExclusiveRegistrantsOnly);
        assert_eq!(
            out_cdb(OutAction::Reserve, t),
            [0x5f, 0x01, 0x05, 0, 0, 0, 0, 0, 24, 0]
        );
        assert_eq!(
            out_cdb(OutAction::Register, t),
            [0x5f, 0x00, 0x00, 0, 0, 0, 0, 0, 24, 0]
        );
        assert_eq!(
            out_cdb(OutAction::Clear, t),
            [0x5f, 0x03, 0x00, 0, 0, 0, 0, 0, 24, 0]
        );
        assert_eq!(
            out_cdb(
                OutAction::PreemptAndAbort,
                Some(PrType::ExclusiveAccessAllRegistrants)
            ),
            [0x5f, 0x05, 0x08, 0, 0, 0, 0, 0, 24, 0]
        );
    }

    #[test]
    fn type_names_round_trip() {
        for t in PrType::ALL {
            assert_eq!(PrType::from_code(t.code()), Some(t));
            assert_eq!(PrType::from_short(t.short()), Some(t));
        }
        assert_eq!(PrType::from_code(0), None);
        assert_eq!(PrType::from_code(2), None);
        assert_eq!(
            PrType::from_short("WE-RO"),
            Some(PrType::WriteExclusiveRegistrantsOnly)
        );
        assert_eq!(PrType::from_short("x"), None);
    }

    #[test]
    fn params_never_set_aptpl() {
        let b = out_params(OutParams {
            reservation_key: u64::MAX,
            service_action_key: u64::MAX,
        });
        assert_eq!(&b[16..], &[0u8; 8]);
    }
}
