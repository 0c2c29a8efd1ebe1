//! A process running inside a cluster: stopped (SIGKILL) and reaped on drop,
//! and by the SIGINT/SIGTERM handler, so that none outlives its cluster.

use std::io::{self, BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::cleanup;

/// A child process started with [`Process::spawn`] (usually from
/// [`crate::Host::command`]).
#[derive(Debug)]
pub struct Process {
    child: Child,
    /// Piped stdout, once line reading has started.
    stdout: Option<BufReader<ChildStdout>>,
    /// Set once reaped: nothing to stop any more.
    status: Option<ExitStatus>,
}

impl Process {
    /// Spawns `cmd` and registers the child for cleanup.
    ///
    /// Errors: the spawn error, naming the program.
    pub fn spawn(cmd: &mut Command) -> io::Result<Process> {
        let child = cmd.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot start {:?}: {e}", cmd.get_program()),
            )
        })?;
        cleanup::register_process(child.id(), Signal::SIGKILL);
        tracing::debug!(pid = child.id(), program = ?cmd.get_program(), "process started");
        Ok(Process {
            child,
            stdout: None,
            status: None,
        })
    }

    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The underlying child, e.g. to take its piped stdin or stderr.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Takes the piped stdout (for reading it elsewhere). `None` if not
    /// piped, already taken, or already used by [`Process::read_line_with`].
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// Reads everything left on the piped stderr (empty when not piped).
    pub fn read_stderr(&mut self) -> String {
        use std::io::Read;
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }

    /// Reads piped stdout until a line containing `marker`; returns the rest
    /// of that line after it, trimmed, or `None` when stdout ends first.
    ///
    /// Errors: reading stdout; `InvalidInput` when stdout is not piped.
    pub fn read_line_with(&mut self, marker: &str) -> io::Result<Option<String>> {
        if self.stdout.is_none() {
            let out = self.child.stdout.take().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "stdout is not piped")
            })?;
            self.stdout = Some(BufReader::new(out));
        }
        let out = self.stdout.as_mut().expect("set above");
        let mut line = String::new();
        loop {
            line.clear();
            if out.read_line(&mut line)? == 0 {
                return Ok(None);
            }
            // libtest may print "test name ... " before a child's first line.
            if let Some(at) = line.find(marker) {
                return Ok(Some(line[at + marker.len()..].trim().to_string()));
            }
        }
    }

    /// [`Process::read_line_with`] for tests.
    ///
    /// Panics: when stdout ends (the child exited) before the line.
    pub fn expect_line(&mut self, marker: &str) -> String {
        match self.read_line_with(marker) {
            Ok(Some(rest)) => rest,
            Ok(None) => panic!(
                "process {} exited before printing {marker:?} ({:?})",
                self.id(),
                self.try_wait()
            ),
            Err(e) => panic!("reading stdout of process {}: {e}", self.id()),
        }
    }

    /// Sends `signal` to the process (unless it was reaped already).
    ///
    /// Errors: kill(2) failing (ESRCH cannot happen before reaping).
    pub fn signal(&mut self, signal: Signal) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        kill(Pid::from_raw(self.id() as i32), signal).map_err(io::Error::from)
    }

    /// Kills the process with SIGKILL (a crash: no destructor runs in it)
    /// and reaps it.
    pub fn kill(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.wait();
        }
    }

    /// Waits for the process to exit and returns its status.
    ///
    /// Errors: waitpid(2) failing.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(st) = self.status {
            return Ok(st);
        }
        let st = self.child.wait()?;
        self.reaped(st);
        Ok(st)
    }

    /// The exit status if the process has exited, without waiting.
    ///
    /// Errors: waitpid(2) failing.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(st) = self.status {
            return Ok(Some(st));
        }
        let st = self.child.try_wait()?;
        if let Some(st) = st {
            self.reaped(st);
        }
        Ok(st)
    }

    /// Waits at most `limit` for the process to exit (polling every 5 ms);
    /// `None` if it is still running then.
    ///
    /// Errors: waitpid(2) failing.
    pub fn wait_timeout(&mut self, limit: Duration) -> io::Result<Option<ExitStatus>> {
        let end = Instant::now() + limit;
        loop {
            if let Some(st) = self.try_wait()? {
                return Ok(Some(st));
            }
            if Instant::now() >= end {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for the process to exit, for tests.
    ///
    /// Panics: when waiting fails or the process did not exit with 0.
    pub fn wait_success(&mut self) {
        let st = self
            .wait()
            .unwrap_or_else(|e| panic!("waiting for process {}: {e}", self.id()));
        assert!(st.success(), "process {} failed: {st}", self.id());
    }

    fn reaped(&mut self, st: ExitStatus) {
        self.status = Some(st);
        cleanup::unregister_process(self.child.id());
        tracing::debug!(pid = self.child.id(), status = %st, "process ended");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}
