//! `lockd`: the command-line tool of lockd.
#![deny(unsafe_code)]

mod direct;
mod disk;
mod spec;
mod sys;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// lockd: a shared-storage lease manager compatible with sanlock.
#[derive(Debug, Parser)]
#[command(name = "lockd", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read and write lease areas on storage directly, without a daemon.
    #[command(subcommand)]
    Direct(DirectCommand),
}

#[derive(Debug, Subcommand)]
enum DirectCommand {
    /// Format a lockspace (-s) or a resource lease (-r).
    Init(direct::init::InitArgs),
    /// List every non-empty record in the lease areas of a device or file.
    Dump(direct::dump::DumpArgs),
    /// Print and verify one leader record.
    ReadLeader(direct::read_leader::ReadLeaderArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Direct(DirectCommand::Init(a)) => direct::init::run(a),
        Command::Direct(DirectCommand::Dump(a)) => direct::dump::run(a),
        Command::Direct(DirectCommand::ReadLeader(a)) => direct::read_leader::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the chain of causes joined, as operators read it in logs.
            eprintln!("lockd: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
