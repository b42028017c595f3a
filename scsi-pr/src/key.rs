//! lvmlockd's reservation key format, `0x100000YYYYYYXXXX`: the fixed prefix 0x100000 in
//! the top 24 bits, the host's lockspace generation in the next 24 (Y, six hex digits),
//! its host_id in the low 16 (X, four hex digits). Every join has a new generation, so a
//! host that rejoins registers a new key and a late preempt of its old key cannot remove
//! it. lvm2 reads the fields back as `key & 0xFFFF` and `(key & 0xFFFFFF0000) >> 16`.
//!
//! Invariant: a key is made only from values that fit their digits (lvm2 refuses to
//! format others, since the printed key would not be 18 characters); nothing is wrapped.

use thiserror::Error;

/// The top 24 bits of every lvmlockd-format key.
pub const LVM_KEY_PREFIX: u64 = 0x1000_0000_0000_0000;
const PREFIX_MASK: u64 = 0xffff_ff00_0000_0000;
/// The largest generation that fits six hex digits.
pub const MAX_KEY_GENERATION: u64 = 0xff_ffff;
/// The largest host_id that fits four hex digits.
pub const MAX_KEY_HOST_ID: u64 = 0xffff;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    #[error("host_id {0} cannot be in a key: it must be 1..=65535")]
    HostId(u64),
    #[error("generation {0} does not fit the key's six hex digits (at most 16777215)")]
    Generation(u64),
}

/// The key of `host_id` at `generation`, as lvmlockd forms it.
pub fn lvm_key(host_id: u64, generation: u64) -> Result<u64, KeyError> {
    if host_id == 0 || host_id > MAX_KEY_HOST_ID {
        return Err(KeyError::HostId(host_id));
    }
    if generation > MAX_KEY_GENERATION {
        return Err(KeyError::Generation(generation));
    }
    Ok(LVM_KEY_PREFIX | (generation << 16) | host_id)
}

/// (host_id, generation) of a key in lvmlockd's format; None for any other key.
pub fn lvm_key_parts(key: u64) -> Option<(u64, u64)> {
    if key & PREFIX_MASK != LVM_KEY_PREFIX {
        return None;
    }
    let host_id = key & MAX_KEY_HOST_ID;
    if host_id == 0 {
        return None;
    }
    Some((host_id, (key >> 16) & MAX_KEY_GENERATION))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_matches_the_printed_form() {
        // lvm2 prints "0x100000%06x%04x" % (generation, host_id).
        for (host_id, generation) in [(1u64, 1u64), (2, 7), (2000, 0x12_3456), (0xffff, 0xff_ffff)]
        {
            let key = lvm_key(host_id, generation).unwrap();
            assert_eq!(
                format!("0x{key:x}"),
                format!("0x100000{generation:06x}{host_id:04x}")
            );
            assert_eq!(lvm_key_parts(key), Some((host_id, generation)));
            // lvm2's own field extraction.
            assert_eq!(key & 0xFFFF, host_id);
            assert_eq!((key & 0xFF_FFFF_0000) >> 16, generation);
        }
        assert_eq!(lvm_key(3, 5).unwrap(), 0x1000_0000_0005_0003);
        assert_eq!(lvm_key(1, 0).unwrap(), 0x1000_0000_0000_0001);
    }

    #[test]
    fn refuses_what_does_not_fit() {
        assert_eq!(lvm_key(0, 1), Err(KeyError::HostId(0)));
        assert_eq!(lvm_key(65536, 1), Err(KeyError::HostId(65536)));
        assert_eq!(lvm_key(1, 1 << 24), Err(KeyError::Generation(1 << 24)));
        assert_eq!(lvm_key(1, u64::MAX), Err(KeyError::Generation(u64::MAX)));
    }

    #[test]
    fn other_keys_are_not_lvm_keys() {
        assert_eq!(lvm_key_parts(0), None);
        assert_eq!(lvm_key_parts(0x1234_abcd), None);
        assert_eq!(lvm_key_parts(0x2000_0000_0001_0001), None);
        assert_eq!(lvm_key_parts(0x1000_0100_0001_0001), None);
        assert_eq!(lvm_key_parts(0x1000_0000_0001_0000), None);
    }

    proptest::proptest! {
        #[test]
        fn round_trip(host_id in 1u64..=0xffff, generation in 0u64..=0xff_ffff) {
            let key = lvm_key(host_id, generation).unwrap();
            proptest::prop_assert_eq!(lvm_key_parts(key), Some((host_id, generation)));
        }

        #[test]
        fn distinct_generations_give_distinct_keys(h in 1u64..=2000, g in 0u64..0xff_ffff) {
            proptest::prop_assert_ne!(lvm_key(h, g).unwrap(), lvm_key(h, g + 1).unwrap());
        }
    }
}
