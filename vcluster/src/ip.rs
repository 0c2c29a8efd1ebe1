//! Running iproute2's `ip`: one command, or a batch of commands inside one
//! namespace (`ip -n NS -batch -`, one process for many steps).

use std::io::Write;
use std::process::{Command, Output, Stdio};

use crate::error::{hint_for, Error, Result, INSTALL_IPROUTE2};

/// Runs `ip args...`; returns its output when it succeeds.
///
/// Errors: [`Error::Spawn`] when `ip` cannot be started, [`Error::Command`]
/// (with its stderr and a hint) when it fails.
pub(crate) fn ip(args: &[&str]) -> Result<Output> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(spawn_error)?;
    check(format!("ip {}", args.join(" ")), out)
}

/// Runs the lines of `batch` with `ip [-n ns] -batch -`, stopping at the
/// first failing line.
///
/// Errors: as [`ip`]; the command named in the error holds the whole batch.
pub(crate) fn ip_batch(ns: Option<&str>, batch: &[String]) -> Result<()> {
    let mut args: Vec<&str> = Vec::new();
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(["-batch", "-"]);
    let mut child = Command::new("ip")
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    let text = batch.join("\n") + "\n";
    if let Some(mut stdin) = child.stdin.take() {
        // A failure here shows up as the command's own error below.
        let _ = stdin.write_all(text.as_bytes());
    }
    let out = child.wait_with_output().map_err(spawn_error)?;
    check(
        format!("ip {} <<< {:?}", args.join(" "), batch.join("; ")),
        out,
    )
    .map(|_| ())
}

fn spawn_error(source: std::io::Error) -> Error {
    Error::Spawn {
        program: "ip".into(),
        source,
        hint: INSTALL_IPROUTE2,
    }
}

fn check(command: String, out: Output) -> Result<Output> {
    if out.status.success() {
        tracing::trace!(%command, "ok");
        return Ok(out);
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(Error::Command {
        hint: hint_for(&stderr),
        command,
        status: out.status.to_string(),
        stderr,
    })
}
