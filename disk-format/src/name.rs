//! Fixed 48-byte name fields (lockspace, resource, host names).
//!
//! On disk a name is NUL-padded but not necessarily NUL-terminated: a 48-byte name fills
//! the field. Comparisons cover all 48 bytes, as sanlock's `strncmp(.., 48)` does for
//! names that contain no embedded NUL. Bytes after the first NUL are kept as read so that
//! records round-trip exactly.

use std::fmt;

use crate::FormatError;

/// Bytes in every on-disk name field (`NAME_ID_SIZE`).
pub const NAME_LEN: usize = 48;

/// A 48-byte on-disk name.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Name(pub [u8; NAME_LEN]);

impl Name {
    /// The empty name (48 NUL bytes).
    pub const EMPTY: Name = Name([0; NAME_LEN]);

    /// A name from text: at most 48 bytes, no NUL, not empty.
    pub fn new(text: &str) -> Result<Name, FormatError> {
        let bytes = text.as_bytes();
        if bytes.is_empty() {
            return Err(FormatError::NameEmpty);
        }
        if bytes.len() > NAME_LEN {
            return Err(FormatError::NameTooLong {
                len: bytes.len(),
                name: text.to_string(),
            });
        }
        if bytes.contains(&0) {
            return Err(FormatError::NameHasNul);
        }
        let mut field = [0u8; NAME_LEN];
        field[..bytes.len()].copy_from_slice(bytes);
        Ok(Name(field))
    }

    /// A name copied from a 48-byte field of a record.
    pub fn from_field(field: &[u8]) -> Name {
        let mut out = [0u8; NAME_LEN];
        let n = field.len().min(NAME_LEN);
        out[..n].copy_from_slice(&field[..n]);
        Name(out)
    }

    /// The bytes up to the first NUL (or all 48).
    pub fn as_bytes(&self) -> &[u8] {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        &self.0[..end]
    }

    /// True when the field starts with NUL.
    pub fn is_empty(&self) -> bool {
        self.0[0] == 0
    }

    /// The name as text, with invalid UTF-8 replaced.
    pub fn to_text(&self) -> String {
        String::from_utf8_lossy(self.as_bytes()).into_owned()
    }

    /// sanlock's comparison: the visible names are equal.
    pub fn same_as(&self, other: &Name) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_text())
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths() {
        assert!(Name::new(&"a".repeat(48)).is_ok());
        assert!(matches!(
            Name::new(&"a".repeat(49)),
            Err(FormatError::NameTooLong { len: 49, .. })
        ));
        assert!(matches!(Name::new(""), Err(FormatError::NameEmpty)));
        assert!(matches!(Name::new("a\0b"), Err(FormatError::NameHasNul)));
        let full = Name::new(&"x".repeat(48)).unwrap();
        assert_eq!(full.as_bytes().len(), 48);
        assert_eq!(Name::new("ls").unwrap().as_bytes(), b"ls");
    }
}
