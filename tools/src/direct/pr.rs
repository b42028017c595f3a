//! `lockd direct pr …`: SCSI-3 persistent reservations on a device, by hand: probe (read
//! only), read-keys, read-reservation, register, reserve, release, preempt (confirmed by
//! reading the keys back), clear, and `key` (lvmlockd's key of a host_id and generation).
//!
//! Invariants: the read commands and `probe` send PERSISTENT RESERVE IN only; the device
//! is opened read-only for every command (as sg_persist does); a command that changes registrations names every key it uses
//! (no default keys); a device without PR gets one line saying why, never a panic.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use lockd_scsi_pr::{
    lvm_key, lvm_key_parts, InterfaceChoice, Keys, PrDevice, PrError, PrType, ReservationState,
};
use serde_json::json;

#[derive(Debug, Args)]
pub struct PrArgs {
    /// How commands reach the device: auto (the block PR ioctls when the kernel can read
    /// keys through them, Linux 6.19+; else SG_IO), block-pr or sg-io.
    #[arg(long, global = true, default_value = "auto")]
    pub interface: InterfaceChoice,
    #[command(subcommand)]
    pub command: PrCommand,
}

#[derive(Debug, Subcommand)]
pub enum PrCommand {
    /// Read-only: does DEVICE answer PERSISTENT RESERVE IN? Keys, reservation, types.
    Probe(ReadArgs),
    /// List the registered keys (READ KEYS).
    ReadKeys(ReadArgs),
    /// Show the reservation, if any (READ RESERVATION).
    ReadReservation(ReadArgs),
    /// Register --key (REGISTER; with --old-key, replace it; --key 0 --old-key K
    /// unregisters K; --ignore-existing: REGISTER AND IGNORE EXISTING KEY).
    Register(RegisterArgs),
    /// Take the reservation with a registered --key (RESERVE; default type we-ro).
    Reserve(ReserveArgs),
    /// Give up the reservation held with --key (RELEASE).
    Release(ReserveArgs),
    /// Remove --victim's registration (and reservation) with a registered --key, then
    /// read the keys back: fails unless the victim's key is gone.
    Preempt(PreemptArgs),
    /// Remove every registration and the reservation (CLEAR) with a registered --key.
    Clear(KeyArgs),
    /// Print lvmlockd's key for a host_id and generation: 0x100000YYYYYYXXXX.
    Key(MakeKeyArgs),
}

#[derive(Debug, Args)]
pub struct ReadArgs {
    /// A SCSI disk (/dev/sdX, a device-mapper map over one, or its /dev/sgN).
    pub device: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    pub device: PathBuf,
    /// This host's registered key (hex with 0x, or decimal).
    #[arg(short = 'k', long = "key", value_parser = parse_key)]
    pub key: u64,
}

#[derive(Debug, Args)]
pub struct RegisterArgs {
    pub device: PathBuf,
    /// The key to register (0 with --old-key unregisters).
    #[arg(short = 'k', long = "key", value_parser = parse_key)]
    pub key: u64,
    /// The key this host is registered with now (default 0: not registered).
    #[arg(long = "old-key", value_parser = parse_key, default_value = "0", conflicts_with = "ignore_existing")]
    pub old_key: u64,
    /// REGISTER AND IGNORE EXISTING KEY: replace whatever key this host has.
    #[arg(long = "ignore-existing")]
    pub ignore_existing: bool,
}

#[derive(Debug, Args)]
pub struct ReserveArgs {
    pub device: PathBuf,
    #[arg(short = 'k', long = "key", value_parser = parse_key)]
    pub key: u64,
    /// Reservation type: we, ea, we-ro, ea-ro, we-ar, ea-ar.
    #[arg(short = 't', long = "type", value_parser = parse_type, default_value = "we-ro")]
    pub pr_type: PrType,
}

#[derive(Debug, Args)]
pub struct PreemptArgs {
    pub device: PathBuf,
    /// This host's registered key.
    #[arg(short = 'k', long = "key", value_parser = parse_key)]
    pub key: u64,
    /// The key to remove.
    #[arg(short = 'v', long = "victim", value_parser = parse_key)]
    pub victim: u64,
    /// The reservation type this host takes if the victim holds the reservation.
    #[arg(short = 't', long = "type", value_parser = parse_type, default_value = "we-ro")]
    pub pr_type: PrType,
    /// Try PREEMPT AND ABORT first (also aborts the victim's queued commands); falls back
    /// to PREEMPT, saying so, where the device does not support it.
    #[arg(long)]
    pub abort: bool,
}

#[derive(Debug, Args)]
pub struct MakeKeyArgs {
    /// host_id (1..=65535).
    #[arg(short = 'i', long = "host-id")]
    pub host_id: u64,
    /// The host's generation in the lockspace (0..=16777215).
    #[arg(short = 'g', long = "generation")]
    pub generation: u64,
}

fn parse_key(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) if !h.is_empty() && h.len() <= 16 => u64::from_str_radix(h, 16),
        Some(_) => return Err(format!("{s:?} is not a key: 1 to 16 hex digits after 0x")),
        None => t.parse::<u64>(),
    };
    r.map_err(|_| format!("{s:?} is not a key: give 0x and hex digits, or a decimal number"))
}

fn parse_type(s: &str) -> Result<PrType, String> {
    PrType::from_short(s).ok_or_else(|| {
        format!("{s:?} is not a reservation type: we, ea, we-ro, ea-ro, we-ar, ea-ar")
    })
}

/// `0x… (host_id H generation G)` for lvmlockd-format keys, `0x…` otherwise.
fn describe_key(key: u64) -> String {
    match lvm_key_parts(key) {
        Some((h, g)) => format!("0x{key:x} (host_id {h} generation {g})"),
        None => format!("0x{key:x}"),
    }
}

fn keys_json(k: &Keys) -> serde_json::Value {
    json!({
        "generation": k.generation,
        "keys": k.keys.iter().map(|key| {
            let parts = lvm_key_parts(*key);
            json!({
                "key": format!("0x{key:x}"),
                "host_id": parts.map(|p| p.0),
                "host_generation": parts.map(|p| p.1),
            })
        }).collect::<Vec<_>>(),
        "truncated": k.truncated,
    })
}

fn reservation_json(r: &ReservationState) -> serde_json::Value {
    json!({
        "generation": r.generation,
        "reservation": r.reservation.as_ref().map(|res| json!({
            "key": format!("0x{:x}", res.key),
            "type": res.pr_type.map(PrType::short),
            "type_code": res.type_code,
            "scope": res.scope,
        })),
    })
}

fn print_keys(k: &Keys) {
    println!("generation {}", k.generation);
    if k.keys.is_empty() {
        println!("no keys registered");
    }
    for key in &k.keys {
        println!("key {}", describe_key(*key));
    }
    if k.truncated {
        println!(
            "(truncated: the device reported {} bytes of keys)",
            k.reported_len_bytes
        );
    }
}

fn print_reservation(r: &ReservationState) {
    println!("generation {}", r.generation);
    match &r.reservation {
        None => println!("no reservation"),
        Some(res) => println!(
            "reservation {} ({}) by {} scope {}",
            res.pr_type.map_or("unknown", PrType::short),
            res.pr_type.map_or_else(
                || format!("type code {}", res.type_code),
                |t| t.long_name().to_string()
            ),
            describe_key(res.key),
            res.scope
        ),
    }
}

fn open(device: &Path, choice: InterfaceChoice) -> Result<PrDevice> {
    Ok(PrDevice::open_with(device, choice)?)
}

/// The error of a command on `device`, with the device named once.
fn on(device: &Path, e: PrError) -> anyhow::Error {
    let text = e.to_string();
    let name = device.display().to_string();
    if text.contains(&name) {
        anyhow::Error::new(e)
    } else {
        anyhow::Error::new(e).context(name)
    }
}

pub fn run(args: &PrArgs) -> Result<()> {
    let choice = args.interface;
    match &args.command {
        PrCommand::Probe(a) => probe(a, choice),
        PrCommand::ReadKeys(a) => {
            let k = open(&a.device, choice)?
                .read_keys()
                .map_err(|e| on(&a.device, e))?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&keys_json(&k))?);
            } else {
                print_keys(&k);
            }
            Ok(())
        }
        PrCommand::ReadReservation(a) => {
            let r = open(&a.device, choice)?
                .read_reservation()
                .map_err(|e| on(&a.device, e))?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&reservation_json(&r))?);
            } else {
                print_reservation(&r);
            }
            Ok(())
        }
        PrCommand::Register(a) => {
            if a.key == 0 && (a.old_key == 0 || a.ignore_existing) {
                bail!("--key 0 unregisters: it needs --old-key KEY (the key to remove)");
            }
            let d = open(&a.device, choice)?;
            if a.ignore_existing {
                d.register_ignore_existing(a.key)
            } else {
                d.register(a.old_key, a.key)
            }
            .map_err(|e| on(&a.device, e))?;
            if a.key == 0 {
                println!("unregistered {}", describe_key(a.old_key));
            } else {
                println!("registered {}", describe_key(a.key));
            }
            Ok(())
        }
        PrCommand::Reserve(a) => {
            nonzero(a.key)?;
            open(&a.device, choice)?
                .reserve(a.key, a.pr_type)
                .map_err(|e| on(&a.device, e))?;
            println!("reserved {} by {}", a.pr_type.short(), describe_key(a.key));
            Ok(())
        }
        PrCommand::Release(a) => {
            nonzero(a.key)?;
            open(&a.device, choice)?
                .release(a.key, a.pr_type)
                .map_err(|e| on(&a.device, e))?;
            println!(
                "released {} held by {}",
                a.pr_type.short(),
                describe_key(a.key)
            );
            Ok(())
        }
        PrCommand::Preempt(a) => {
            nonzero(a.key)?;
            if a.victim == 0 {
                bail!("--victim 0 is not a key: name the registered key to remove");
            }
            if a.victim == a.key {
                bail!("--victim is this host's own --key: to drop it, use register --key 0 --old-key KEY");
            }
            let out = open(&a.device, choice)?
                .preempt_confirmed(a.key, a.victim, a.pr_type, a.abort)
                .map_err(|e| on(&a.device, e))?;
            if let Some(why) = &out.abort_refused {
                println!("PREEMPT AND ABORT refused ({why}); used PREEMPT");
            }
            println!(
                "preempted {} with {} ({}); confirmed: READ KEYS at generation {} no longer lists it",
                describe_key(a.victim),
                describe_key(a.key),
                out.action.name(),
                out.keys_after.generation
            );
            Ok(())
        }
        PrCommand::Clear(a) => {
            nonzero(a.key)?;
            open(&a.device, choice)?
                .clear(a.key)
                .map_err(|e| on(&a.device, e))?;
            println!("cleared every registration and the reservation");
            Ok(())
        }
        PrCommand::Key(a) => {
            println!("0x{:x}", lvm_key(a.host_id, a.generation)?);
            Ok(())
        }
    }
}

fn nonzero(key: u64) -> Result<()> {
    if key == 0 {
        bail!("--key 0 is not a registered key: give this host's key");
    }
    Ok(())
}

fn probe(a: &ReadArgs, choice: InterfaceChoice) -> Result<()> {
    let p = PrDevice::probe_with(&a.device, lockd_scsi_pr::device::DEFAULT_TIMEOUT_MS, choice);
    if a.json {
        let err = |e: &PrError| e.to_string();
        let v = json!({
            "device": a.device.display().to_string(),
            "supported": p.supported(),
            "interface": p.interface.map(|i| i.name()),
            "error": p.keys.as_ref().err().map(err),
            "keys": p.keys.as_ref().ok().map(keys_json),
            "reservation": p.reservation.as_ref().and_then(|r| r.as_ref().ok()).map(reservation_json),
            "types": p.capabilities.as_ref().and_then(|c| c.as_ref().ok()).filter(|c| c.type_mask_valid)
                .map(|c| c.types.iter().map(|t| t.short()).collect::<Vec<_>>()),
            "ptpl_capable": p.capabilities.as_ref().and_then(|c| c.as_ref().ok()).map(|c| c.persist_through_power_loss),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else if p.supported() {
        println!("{}: {}", a.device.display(), p.summary());
    }
    match p.keys {
        Ok(_) => Ok(()),
        Err(e) => Err(on(&a.device, e).context("no persistent reservations")),
    }
}
