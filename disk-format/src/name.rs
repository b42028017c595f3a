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
        // Equal fields are the same name; this is every comparison of NUL-padded names,
        // many per renewal (every sector of the area is checked against the lockspace's
        // name), and needs no scan for the NUL.
        self.0 == other.0 || self.as_bytes() == other.as_bytes()
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_text())
    }
}

/// Names come from clients and disks, so their Display form is safe to log: printable
/// characters as they are; `\\`, `\n`, `\r`, `\t` for backslash and those controls; `\xNN` for
/// every other control character and every byte that is not UTF-8. A name cannot forge a
/// log line or hide part of itself. [`Name::to_text`] gives the raw text.
impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.as_bytes().utf8_chunks() {
            for c in chunk.valid().chars() {
                match c {
                    '\\' => f.write_str("\\\\")?,
                    '\n' => f.write_str("\\n")?,
                    '\r' => f.write_str("\\r")?,
                    '\t' => f.write_str("\\t")?,
                    c if c.is_control() => {
                        let mut buf = [0u8; 4];
                        for b in c.encode_utf8(&mut buf).bytes() {
                            write!(f, "\\x{b:02x}")?;
                        }
                    }
                    c => write!(f, "{c}")?,
                }
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Display never lets a control character or a non-UTF-8 byte through raw.
    #[test]
    fn display_escapes_what_is_not_printable() {
        let n = Name::new("ls\nFORGED line").unwrap();
        assert_eq!(n.to_string(), "ls\\nFORGED line");
        assert_eq!(n.to_text(), "ls\nFORGED line");
        let n = Name::new("a\rb\tc\\d\u{1b}[31m\u{7f}\u{85}é").unwrap();
        assert_eq!(n.to_string(), "a\\rb\\tc\\\\d\\x1b[31m\\x7f\\xc2\\x85é");
        let n = Name::from_field(&[b'x', 0xff, 0xc3, b'y', b'\n']);
        assert_eq!(n.to_string(), "x\\xff\\xc3y\\n");
        assert_eq!(
            Name::new("plain-name_1.2").unwrap().to_string(),
            "plain-name_1.2"
        );
        for b in 1..=255u8 {
            let text = Name::from_field(&[b]).to_string();
            assert!(
                text.chars().all(|c| !c.is_control()),
                "byte {b:#x} gives {text:?}"
            );
        }
    }

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
