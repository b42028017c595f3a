//! sanlock's colon-separated argument forms:
//! `LOCKSPACE = name:host_id:path:offset`, `RESOURCE = ls:res:path:offset[:lver|:SH]`,
//! and dump's `path[:offset[:size]]`. A `\:` inside a path is a literal colon.
//! Offsets and sizes are bytes, or a number with a `K`/`M`/`G` suffix (binary units).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use disk_format::Name;

/// A parsed `-s LOCKSPACE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockspaceSpec {
    pub name: Name,
    pub host_id: u64,
    pub path: PathBuf,
    pub offset: u64,
}

/// A parsed `-r RESOURCE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSpec {
    pub lockspace: Name,
    pub name: Name,
    /// The lease's disks, each a path and the area's offset on it: one, or up to 4
    /// (sanlock's num_disks; disk Paxos then needs a majority of them).
    pub disks: Vec<(PathBuf, u64)>,
    pub lver: Option<u64>,
    pub shared: bool,
}

/// A parsed `LOCKSPACE:PATH:OFFSET` (sanlock's RINDEX form; OFFSET takes a suffix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RindexSpec {
    pub lockspace: Name,
    pub path: PathBuf,
    pub offset: u64,
}

/// A parsed `NAME[:OFFSET]` (sanlock's `-e` argument); an empty NAME means none. `-` is
/// a name like any other, as for sanlock (only its output prints `-` for "no name").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RentrySpec {
    pub name: Name,
    pub offset: u64,
}

/// A parsed dump target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AreaSpec {
    pub path: PathBuf,
    pub offset: u64,
    pub size: Option<u64>,
}

/// Splits on colons not preceded by a backslash, removing the escapes.
fn split_fields(text: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&':') => {
                fields.last_mut().expect("fields is never empty").push(':');
                chars.next();
            }
            ':' => fields.push(String::new()),
            _ => fields.last_mut().expect("fields is never empty").push(c),
        }
    }
    fields
}

/// The most disks a resource lease has (sanlock's `SANLK_MAX_DISKS`, lease-core's
/// `disks::MAX_DISKS`; this module is also compiled alone into the spec fuzzer).
pub const MAX_DISKS: usize = 4;

/// The largest byte offset a file or device can have (`off_t` is a signed 64-bit count).
pub const MAX_OFFSET: u64 = i64::MAX as u64;

/// The end of `len` bytes at `offset`: refused, not wrapped, when it overflows or goes
/// past [`MAX_OFFSET`] (every offset/length sum on user values goes through this).
pub fn area_end(offset: u64, len: u64) -> Result<u64> {
    offset
        .checked_add(len)
        .filter(|&end| end <= MAX_OFFSET)
        .with_context(|| {
            format!("offset {offset} + {len} bytes is past the largest file offset ({MAX_OFFSET})")
        })
}

/// `text` for an error message: in double quotes, with control characters, `"` and `\`
/// escaped as Rust would (`\n`, `\u{1b}`, …), cut to [`QUOTED_MAX_CHARS`] characters so a
/// long argument does not flood the terminal. Other characters are kept as they are
/// (cheaper than `{:?}`, which looks every character up in Unicode's printable tables).
fn quoted(text: &str) -> String {
    const QUOTED_MAX_CHARS: usize = 80;
    let mut out = String::with_capacity(text.len().min(QUOTED_MAX_CHARS) + 4);
    out.push('"');
    let mut chars = text.chars();
    for c in chars.by_ref().take(QUOTED_MAX_CHARS) {
        if c.is_control() || c == '"' || c == '\\' {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out.push('"');
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// Parses an offset: a byte count (see [`parse_bytes`]) no larger than [`MAX_OFFSET`].
pub fn parse_offset(text: &str) -> Result<u64> {
    let n = parse_bytes(text)?;
    if n > MAX_OFFSET {
        bail!(
            "offset {} is past the largest file offset ({MAX_OFFSET})",
            quoted(text)
        );
    }
    Ok(n)
}

/// Parses a byte count with an optional binary suffix.
pub fn parse_bytes(text: &str) -> Result<u64> {
    let t = text.trim();
    let (digits, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1u64 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1u64 << 30),
        _ => (t, 1),
    };
    let n: u64 = digits
        .parse()
        .with_context(|| format!("{} is not a byte count", quoted(text)))?;
    n.checked_mul(mult)
        .with_context(|| format!("{} is too large", quoted(text)))
}

fn name(text: &str, what: &str) -> Result<Name> {
    Name::new(text).with_context(|| format!("invalid {what} name"))
}

impl LockspaceSpec {
    pub fn parse(text: &str) -> Result<LockspaceSpec> {
        let f = split_fields(text);
        if f.len() != 4 {
            bail!(
                "lockspace {} must be NAME:HOST_ID:PATH:OFFSET",
                quoted(text)
            );
        }
        if f[2].is_empty() {
            bail!("lockspace {} has an empty path", quoted(text));
        }
        Ok(LockspaceSpec {
            name: name(&f[0], "lockspace")?,
            host_id: f[1]
                .parse()
                .with_context(|| format!("host_id {:?} is not a number", f[1]))?,
            path: PathBuf::from(&f[2]),
            offset: parse_offset(&f[3])?,
        })
    }
}

impl ResourceSpec {
    /// `LOCKSPACE:NAME:PATH:OFFSET[:PATH:OFFSET]…[:LVER|:SH]`, with 1 to 4 PATH:OFFSET
    /// pairs (sanlock's form).
    pub fn parse(text: &str) -> Result<ResourceSpec> {
        let f = split_fields(text);
        let form = "LOCKSPACE:NAME:PATH:OFFSET[:PATH:OFFSET]...[:LVER|:SH]";
        if f.len() < 4 {
            bail!("resource {} must be {form}", quoted(text));
        }
        let rest = &f[2..];
        let (pairs, suffix) = if rest.len() % 2 == 1 {
            (&rest[..rest.len() - 1], rest.last().map(String::as_str))
        } else {
            (rest, None)
        };
        if pairs.len() / 2 > MAX_DISKS {
            bail!(
                "resource {} names {} disks; a lease has at most {MAX_DISKS}",
                quoted(text),
                pairs.len() / 2
            );
        }
        let mut disks: Vec<(PathBuf, u64)> = Vec::with_capacity(pairs.len() / 2);
        for pair in pairs.chunks(2) {
            if pair[0].is_empty() {
                bail!("resource {} has an empty path", quoted(text));
            }
            let disk = (PathBuf::from(&pair[0]), parse_offset(&pair[1])?);
            if disks.contains(&disk) {
                bail!(
                    "resource {} names {}:{} twice (it would count twice towards a majority)",
                    quoted(text),
                    disk.0.display(),
                    disk.1
                );
            }
            disks.push(disk);
        }
        let (lver, shared) = match suffix {
            None | Some("") => (None, false),
            Some("SH") => (None, true),
            Some(v) => (
                Some(
                    v.parse()
                        .with_context(|| format!("lver {v:?} is not a number"))?,
                ),
                false,
            ),
        };
        Ok(ResourceSpec {
            lockspace: name(&f[0], "lockspace")?,
            name: name(&f[1], "resource")?,
            disks,
            lver,
            shared,
        })
    }
}

impl RindexSpec {
    pub fn parse(text: &str) -> Result<RindexSpec> {
        let f = split_fields(text);
        if f.len() != 3 || f.iter().any(String::is_empty) {
            bail!("{} must be LOCKSPACE:PATH:OFFSET", quoted(text));
        }
        Ok(RindexSpec {
            lockspace: name(&f[0], "lockspace")?,
            path: PathBuf::from(&f[1]),
            offset: parse_offset(&f[2])?,
        })
    }
}

impl RentrySpec {
    pub fn parse(text: &str) -> Result<RentrySpec> {
        let f = split_fields(text);
        if f.len() > 2 {
            bail!("{} must be NAME[:OFFSET]", quoted(text));
        }
        let name = match f[0].as_str() {
            "" => Name::EMPTY,
            n => name(n, "resource")?,
        };
        let offset = match f.get(1) {
            Some(s) if !s.is_empty() => parse_offset(s)?,
            _ => 0,
        };
        Ok(RentrySpec { name, offset })
    }
}

impl AreaSpec {
    pub fn parse(text: &str) -> Result<AreaSpec> {
        let f = split_fields(text);
        if f.is_empty() || f[0].is_empty() || f.len() > 3 {
            bail!("{} must be PATH[:OFFSET[:SIZE]]", quoted(text));
        }
        let offset = match f.get(1) {
            Some(s) if !s.is_empty() => parse_offset(s)?,
            _ => 0,
        };
        let size = match f.get(2) {
            Some(s) if !s.is_empty() => Some(parse_bytes(s)?),
            _ => None,
        };
        Ok(AreaSpec {
            path: PathBuf::from(&f[0]),
            offset,
            size,
        })
    }
}

#[cfg(test)]
mod rindex_spec_tests {
    use super::*;

    #[test]
    fn rindex_and_rentry_forms() {
        let r = RindexSpec::parse("vg1:/dev/vg1/lvmlock:1M").unwrap();
        assert_eq!(r.lockspace.to_text(), "vg1");
        assert_eq!(r.offset, 1 << 20);
        assert!(RindexSpec::parse("vg1:/dev/x").is_err());
        assert!(RindexSpec::parse(&format!("{}:/d:0", "n".repeat(49))).is_err());
        let e = RentrySpec::parse("lv1:5M").unwrap();
        assert_eq!((e.name.to_text().as_str(), e.offset), ("lv1", 5 << 20));
        assert_eq!(RentrySpec::parse("lv1").unwrap().offset, 0);
        assert!(RentrySpec::parse(":3145728").unwrap().name.is_empty());
        assert_eq!(RentrySpec::parse("-").unwrap().name.to_text(), "-");
        assert!(RentrySpec::parse("a:1:2").is_err());
        assert!(RentrySpec::parse("a:xyz").is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lockspace_forms() {
        let s = LockspaceSpec::parse("ls:2:/dev/x\\:y:1M").unwrap();
        assert_eq!(s.name.to_text(), "ls");
        assert_eq!(s.host_id, 2);
        assert_eq!(s.path, PathBuf::from("/dev/x:y"));
        assert_eq!(s.offset, 1 << 20);
        assert!(LockspaceSpec::parse("ls:0:/x").is_err());
        assert!(LockspaceSpec::parse("ls:a:/x:0").is_err());
        assert!(LockspaceSpec::parse(&format!("{}:0:/x:0", "n".repeat(49))).is_err());
    }

    #[test]
    fn resource_forms() {
        let r = ResourceSpec::parse("ls:res:/f:1048576").unwrap();
        assert_eq!((r.lver, r.shared), (None, false));
        let r = ResourceSpec::parse("ls:res:/f:0:SH").unwrap();
        assert!(r.shared);
        let r = ResourceSpec::parse("ls:res:/f:0:7").unwrap();
        assert_eq!(r.lver, Some(7));
        assert!(ResourceSpec::parse("ls:res:/f:0:x").is_err());
        assert!(ResourceSpec::parse("ls:res::0").is_err());
        assert_eq!(r.disks, vec![(PathBuf::from("/f"), 0)]);
    }

    #[test]
    fn resource_on_several_disks() {
        assert_eq!(MAX_DISKS, lease_core::disks::MAX_DISKS);
        let r = ResourceSpec::parse("ls:res:/a:0:/b:1M:/c:2048").unwrap();
        assert_eq!(
            r.disks,
            vec![
                (PathBuf::from("/a"), 0),
                (PathBuf::from("/b"), 1 << 20),
                (PathBuf::from("/c"), 2048)
            ]
        );
        assert_eq!((r.lver, r.shared), (None, false));
        let r = ResourceSpec::parse("ls:res:/a:0:/b:0:SH").unwrap();
        assert!(r.shared);
        assert_eq!(r.disks.len(), 2);
        let r = ResourceSpec::parse("ls:res:/a:0:/b:0:/c:0:/d:0:9").unwrap();
        assert_eq!((r.disks.len(), r.lver), (4, Some(9)));
        let five = ResourceSpec::parse("ls:res:/a:0:/b:0:/c:0:/d:0:/e:0").unwrap_err();
        assert!(five.to_string().contains("at most 4"), "{five}");
        assert!(
            ResourceSpec::parse("ls:res:/a:0::0").is_err(),
            "empty second path"
        );
        assert!(
            ResourceSpec::parse("ls:res:/a:0:/b:x").is_err(),
            "bad second offset"
        );
    }

    #[test]
    fn area_forms() {
        let a = AreaSpec::parse("/f").unwrap();
        assert_eq!((a.offset, a.size), (0, None));
        let a = AreaSpec::parse("/f:2M:1M").unwrap();
        assert_eq!((a.offset, a.size), (2 << 20, Some(1 << 20)));
        assert!(AreaSpec::parse("").is_err());
        assert!(parse_bytes("12Q").is_err());
        assert!(parse_bytes("99999999999999999999G").is_err());
    }

    #[test]
    fn offsets_past_off_t_refused() {
        assert_eq!(parse_offset("9223372036854775807").unwrap(), MAX_OFFSET);
        let e = parse_offset("18446744073709551104")
            .unwrap_err()
            .to_string();
        assert!(e.contains("largest file offset"), "{e}");
        assert!(parse_offset("8589934592G").is_err());
        assert!(LockspaceSpec::parse("ls:0:/x:18446744073709551104").is_err());
        assert!(ResourceSpec::parse("ls:r:/x:9223372036854775808").is_err());
        assert!(AreaSpec::parse("/x:18446744073709551104").is_err());
        assert!(AreaSpec::parse("/x:0:18446744073709551615").is_ok());
        assert_eq!(area_end(1 << 20, 512).unwrap(), (1 << 20) + 512);
        assert_eq!(area_end(MAX_OFFSET - 512, 512).unwrap(), MAX_OFFSET);
        assert!(area_end(MAX_OFFSET - 511, 512).is_err());
        assert!(area_end(u64::MAX - 511, 1 << 20).is_err());
    }

    #[test]
    fn errors_quote_a_long_argument_cut_short() {
        let long = format!("{}\n", "x".repeat(5000));
        let msg = format!("{:#}", parse_bytes(&long).unwrap_err());
        assert!(
            msg.starts_with(&format!("\"{}\"…", "x".repeat(80))),
            "{msg}"
        );
        assert!(msg.len() < 200, "{msg}");
        let msg = format!("{:#}", LockspaceSpec::parse("a\nb").unwrap_err());
        assert!(msg.contains("\"a\\nb\""), "{msg}");
        assert_eq!(quoted("é\u{1b}\"x\\"), "\"é\\u{1b}\\\"x\\\\\"");
        assert_eq!(quoted(&"y".repeat(80)), format!("\"{}\"", "y".repeat(80)));
    }
}
