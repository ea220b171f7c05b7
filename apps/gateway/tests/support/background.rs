//! A Python client script written by a test and run in the background while the test
//! acts on the servers (freezes Iggy, kills a node), its output going to a file the test
//! reads: the script announces a phase with a line, the test waits for that line, then
//! for the script's exit status.

use super::{read_lossy, repo_root, scratch_dir};
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running script; killed, and its directory removed, on drop.
pub struct BackgroundScript {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
}

impl BackgroundScript {
    /// Writes `text` to a file and runs it with the venv's Python (`.clients/venv`),
    /// unbuffered, with `env`.
    pub fn start(what: &str, text: &str, env: &[(&str, String)]) -> BackgroundScript {
        let dir = scratch_dir(what);
        let script = dir.join(format!("{what}.py"));
        File::create(&script)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .unwrap_or_else(|e| panic!("write {}: {e}", script.display()));
        let log = dir.join("client.log");
        let out = File::create(&log).unwrap_or_else(|e| panic!("create the client log: {e}"));
        let err = out
            .try_clone()
            .unwrap_or_else(|e| panic!("clone the client log handle: {e}"));
        let child = Command::new(repo_root().join(".clients/venv/bin/python"))
            .arg(&script)
            .env("PYTHONUNBUFFERED", "1")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", script.display()));
        BackgroundScript { child, dir, log }
    }

    /// Everything the script printed so far.
    pub fn log(&self) -> String {
        read_lossy(&self.log)
    }

    /// Waits until the script printed `line`; panics with its output when it exits
    /// first or `timeout` passes.
    pub fn wait_for_line(&mut self, line: &str, timeout: Duration) {
        self.wait_for_line_or(line, timeout, String::new);
    }

    /// [`BackgroundScript::wait_for_line`], adding `context()` (logs of the servers
    /// behind the script, say) to the panic message.
    pub fn wait_for_line_or(
        &mut self,
        line: &str,
        timeout: Duration,
        context: impl Fn() -> String,
    ) {
        if let Err(why) = self.printed(line, timeout) {
            panic!("{why}\n{}", context());
        }
    }

    /// Waits until the script printed `line`: Err (saying what happened, with the
    /// script's output) when it exits first or `timeout` passes.
    pub fn printed(&mut self, line: &str, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(line) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "the script ended early ({status}):\n{}",
                    self.log()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the script did not print {line:?} within {timeout:?}:\n{}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Waits for the script to exit; kills it and panics with its output when it has
    /// not within `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the script did not finish:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for BackgroundScript {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
