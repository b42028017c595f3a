//! `lockd metrics`: the daemon's Prometheus text exposition (lockd extension command
//! `LOCKD_CMD_METRICS`), printed as the daemon sends it, for `promtool`, a textfile
//! collector or a quick look.

use anyhow::{Context, Result};
use clap::Args;

use super::ConnArgs;

#[derive(Debug, Args)]
pub struct MetricsArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
}

pub fn run(a: &MetricsArgs) -> Result<()> {
    let run_dir = a.conn.run_dir();
    let text = client_lib::lease::metrics(&run_dir)
        .with_context(|| format!("metrics from the daemon in {}", run_dir.display()))?;
    print!("{text}");
    Ok(())
}
