//! Starts the Google Pub/Sub emulator on a free loopback port (tests, `--emulator`,
//! `quickstart`, `bench`), fronted by the half-closing proxy of [`super::emulator_proxy`].
//! The emulator runs in its own process group under a watchdog shell that kills the group
//! when the starting process dies, so no emulator outlives its user.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// Where Debian's google-cloud-sdk package installs the emulator.
pub const DEFAULT_EMULATOR: &str =
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator";

/// A running emulator; dropped, it is killed.
pub struct Emulator {
    child: Child,
    port: u16,
    proxy_port: u16,
    _data_dir: tempdir::TempDir,
}

mod tempdir {
    /// A directory removed on drop (the emulator's log lives here).
    pub struct TempDir(pub std::path::PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Emulator {
    /// Starts the emulator (path from `PUBSUB_EMULATOR_BIN`, else [`DEFAULT_EMULATOR`])
    /// and waits up to 60 s until it accepts connections. Errors name the binary and
    /// include the emulator's log tail.
    pub fn start() -> anyhow::Result<Emulator> {
        Self::start_on(0)
    }

    /// Like [`Emulator::start`], with the proxy (the endpoint clients use) on
    /// `127.0.0.1:port`; 0 picks a free port.
    pub fn start_on(proxy_port: u16) -> anyhow::Result<Emulator> {
        if proxy_port != 0 {
            // Fail before starting a JVM if the port is taken.
            TcpListener::bind(("127.0.0.1", proxy_port))
                .with_context(|| format!("cannot listen on 127.0.0.1:{proxy_port}"))?;
        }
        let bin =
            std::env::var("PUBSUB_EMULATOR_BIN").unwrap_or_else(|_| DEFAULT_EMULATOR.to_string());
        anyhow::ensure!(
            std::path::Path::new(&bin).exists(),
            "Pub/Sub emulator not found at {bin} (install google-cloud-cli-pubsub-emulator or set PUBSUB_EMULATOR_BIN)"
        );
        let port = free_port()?;
        let dir =
            std::env::temp_dir().join(format!("pubsub-emulator-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let log = dir.join("emulator.log");
        let script = watchdog_script(
            &format!("--host=127.0.0.1 --port={port}"),
            &shell_quote(&log),
            std::process::id(),
        );
        let child = Command::new("setsid")
            .arg("sh")
            .arg("-c")
            .arg(script)
            .arg(&bin)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start the Pub/Sub emulator {bin}"))?;
        let mut emulator = Emulator {
            child,
            port,
            proxy_port: 0,
            _data_dir: tempdir::TempDir(dir),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let log_text = std::fs::read_to_string(&log).unwrap_or_default();
            if log_text.contains("Server started")
                && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            {
                emulator.proxy_port = crate::emulator_proxy::spawn_on(port, proxy_port)?;
                return Ok(emulator);
            }
            if Instant::now() > deadline {
                let tail: String = log_text
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .join("\n");
                anyhow::bail!("the Pub/Sub emulator did not start within 60 s; log tail:\n{tail}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The emulator's own port (no proxy in between).
    pub fn direct_port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port` of the proxy in front of the emulator, as the `emulator-endpoint`
    /// option takes it. Use this one: through it, stopped or killed clients release their
    /// streaming pulls.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.proxy_port)
    }

    /// The emulator's log file.
    pub fn log_path(&self) -> PathBuf {
        self._data_dir.0.join("emulator.log")
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        // The watchdog shell leads the process group: kill the whole group.
        let _ = Command::new("kill")
            .arg("-9")
            .arg("--")
            .arg(format!("-{}", self.child.id()))
            .status();
        let _ = self.child.wait();
    }
}

/// A currently free TCP port on 127.0.0.1.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The `sh -c` script (run under `setsid`, with the program as `$0`) that starts the
/// program with `args` in the background and kills its whole process group once `parent`
/// or the program is gone. `kill -9 -$$`, not `kill -9 -- -$$`: Debian's `sh` is dash,
/// whose `kill` rejects `--`, which left every emulator running after its user exited.
fn watchdog_script(args: &str, log: &str, parent: u32) -> String {
    format!(
        "\"$0\" {args} >{log} 2>&1 & \
         while kill -0 {parent} 2>/dev/null && kill -0 $! 2>/dev/null; do sleep 1; done; kill -9 -$$"
    )
}

fn shell_quote(p: &std::path::Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watchdog must kill what it started once its parent is gone (under dash, the
    /// shell `setsid sh` runs here); `sleep` stands in for the emulator.
    #[test]
    fn the_watchdog_kills_the_program_when_its_parent_exits() {
        let mut parent = Command::new("sleep").arg("1").spawn().unwrap();
        let marker = format!("{}", 1000 + std::process::id() % 1000);
        let script = watchdog_script(&format!("{marker}.5"), "/dev/null", parent.id());
        let mut watchdog = Command::new("setsid")
            .arg("sh")
            .arg("-c")
            .arg(script)
            .arg("sleep")
            .spawn()
            .unwrap();
        let pattern = format!("sleep {marker}.5");
        let running = || {
            Command::new("pgrep")
                .arg("-f")
                .arg(&pattern)
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(running(), "the program started");
        parent.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = watchdog.wait();
        assert!(!running(), "the program outlived its parent");
    }
}
