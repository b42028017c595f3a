//! `lockd lvb get|set`: the lease value block of a lease held on this host.
//!
//! As sanlock, SET_LVB and GET_LVB name the lease (LOCKSPACE:NAME; the path and offset
//! are not needed) and act on whichever local process holds it, provided it was acquired
//! with the LVB flag (`lockd acquire --lvb`). The new value reaches the disk when the
//! holder releases the lease (or converts it to shared): an LVB is passed from holder to
//! holder, never written behind the holder's back.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use disk_format::Name;
use serde_json::json;

use super::{check_rv, print_json, wire_resource, ConnArgs};

/// The largest LVB sanlock accepts (its largest sector size).
const MAX_LVB_LEN: usize = 4096;

#[derive(Debug, Subcommand)]
pub enum LvbCommand {
    /// Print the LVB of a held lease.
    Get(GetArgs),
    /// Replace the LVB of a held lease (written to disk at its release).
    Set(SetArgs),
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// LOCKSPACE:NAME[:PATH:OFFSET] of a lease held with --lvb on this host.
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    /// Bytes to read (at most the sector size).
    #[arg(long, default_value_t = 512)]
    pub size: u32,
    /// Print hex instead of text.
    #[arg(long)]
    pub hex: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// LOCKSPACE:NAME[:PATH:OFFSET] of a lease held with --lvb on this host.
    #[arg(short = 'r', long = "resource")]
    pub resource: String,
    /// The new value as text.
    #[arg(long, conflicts_with = "hex", required_unless_present = "hex")]
    pub value: Option<String>,
    /// The new value as hex digits.
    #[arg(long)]
    pub hex: Option<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// A resource head from `LS:NAME` or a full resource spec.
fn head(text: &str) -> Result<client_lib::ResourceHead> {
    if text.matches(':').count() >= 3 {
        let mut r = wire_resource(text)?;
        r.head.num_disks = 0;
        return Ok(r.head);
    }
    let Some((ls, name)) = text.split_once(':') else {
        bail!("resource {text:?} must be LOCKSPACE:NAME[:PATH:OFFSET]");
    };
    Ok(client_lib::ResourceHead::named(
        Name::new(ls).context("invalid lockspace name")?,
        Name::new(name).context("invalid resource name")?,
    ))
}

fn parse_hex(text: &str) -> Result<Vec<u8>> {
    let t = text.trim();
    if !t.len().is_multiple_of(2) {
        bail!("hex value {t:?} has an odd number of digits");
    }
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&t[i..i + 2], 16).with_context(|| format!("{t:?} is not hex")))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn run(cmd: &LvbCommand) -> Result<()> {
    match cmd {
        LvbCommand::Get(a) => {
            let h = head(&a.resource)?;
            let (rv, data) = a.conn.connect()?.get_lvb(&h, a.size)?;
            let op = format!("lvb get {}:{}", h.lockspace_name, h.name);
            if a.conn.json {
                print_json(&json!({
                    "result": rv,
                    "hex": hex(&data),
                    "text": String::from_utf8_lossy(data.split(|b| *b == 0).next().unwrap_or(&[])),
                }));
                return check_rv(&op, rv);
            }
            check_rv(&op, rv)?;
            if a.hex {
                println!("{}", hex(&data));
            } else {
                let text = data.split(|b| *b == 0).next().unwrap_or(&[]);
                println!("{}", String::from_utf8_lossy(text));
            }
            Ok(())
        }
        LvbCommand::Set(a) => {
            let h = head(&a.resource)?;
            let value = match (&a.value, &a.hex) {
                (Some(v), _) => v.as_bytes().to_vec(),
                (None, Some(x)) => parse_hex(x)?,
                (None, None) => bail!("give --value TEXT or --hex HEX"),
            };
            if value.len() > MAX_LVB_LEN {
                bail!(
                    "an LVB holds at most {MAX_LVB_LEN} bytes ({} given)",
                    value.len()
                );
            }
            let rv = a.conn.connect()?.set_lvb(&h, &value)?;
            let op = format!("lvb set {}:{}", h.lockspace_name, h.name);
            if a.conn.json {
                print_json(&json!({ "result": rv, "bytes": value.len() }));
                return check_rv(&op, rv);
            }
            check_rv(&op, rv)?;
            println!("{op}: {} bytes (written at release)", value.len());
            Ok(())
        }
    }
}
