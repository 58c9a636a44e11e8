//! Throwaway Postgres and Redis servers for the history store's tests and bench: Debian's
//! `postgresql` and `redis-server` packages, started on 127.0.0.1 on a free port with a
//! fresh data directory, stopped and removed on drop. `tests/run.sh` installs the packages.
//!
//! Included by path (`#[path = "common/stores.rs"]`) by `tests/history_store.rs` and
//! `benches/history.rs`, so it uses only std and rustix.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The password every throwaway server requires: the tests check it never shows in errors.
pub const PASSWORD: &str = "tg-store-pw-7f3a";

/// A running server; stopped (and its directory removed) on drop.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub url: String,
    dir: PathBuf,
    kind: Kind,
    /// Postgres runs as its own user when the tests run as root (it refuses root).
    owner: Option<(u32, u32)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Postgres,
    Redis,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port on 127.0.0.1")
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tollgate-store-{name}-{}-{}",
        std::process::id(),
        free_port()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("cannot create a temp directory");
    dir
}

/// The newest `/usr/lib/postgresql/<version>/bin`.
fn postgres_bin() -> Result<PathBuf, String> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("/usr/lib/postgresql: {e}"))?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("postgres").exists() && bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| "no /usr/lib/postgresql/*/bin/postgres".to_owned())
}

/// The uid and gid of the `postgres` user, from /etc/passwd.
fn postgres_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.first() == Some(&"postgres") && fields.len() > 3 {
            Some((fields[2].parse().ok()?, fields[3].parse().ok()?))
        } else {
            None
        }
    })
}

fn chown_tree(path: &Path, (uid, gid): (u32, u32)) {
    let _ = std::os::unix::fs::chown(path, Some(uid), Some(gid));
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            chown_tree(&entry.path(), (uid, gid));
        }
    }
}

fn as_owner(command: &mut Command, owner: Option<(u32, u32)>) -> &mut Command {
    if let Some((uid, gid)) = owner {
        command.uid(uid).gid(gid);
    }
    command
}

impl Server {
    /// A Postgres server with one user `tollgate` (password [`PASSWORD`], scram) and its
    /// database `tollgate`, or why it cannot start.
    pub fn postgres() -> Result<Server, String> {
        let bin = postgres_bin()
            .map_err(|e| format!("{e}: install Debian's postgresql package (tests/run.sh does)"))?;
        let dir = fresh_dir("pg");
        let owner = if rustix::process::geteuid().is_root() {
            Some(postgres_user().ok_or("running as root and there is no postgres user")?)
        } else {
            None
        };
        let pwfile = dir.join("pw");
        std::fs::write(&pwfile, PASSWORD).map_err(|e| e.to_string())?;
        let data = dir.join("data");
        if let Some(owner) = owner {
            chown_tree(&dir, owner);
        }
        let out = as_owner(&mut Command::new(bin.join("initdb")), owner)
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "tollgate",
                "--auth=scram-sha-256",
                "--no-sync",
                "-E",
                "UTF8",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let port = free_port();
        let mut server = Server {
            child: None,
            port,
            url: format!("postgres://tollgate:{PASSWORD}@127.0.0.1:{port}/postgres"),
            dir,
            kind: Kind::Postgres,
            owner,
        };
        server.start()?;
        Ok(server)
    }

    /// A Redis server requiring [`PASSWORD`], appending every write to its AOF (so a
    /// restart keeps the data), or why it cannot start.
    pub fn redis() -> Result<Server, String> {
        if Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_err()
        {
            return Err(
                "no redis-server: install Debian's redis-server package (tests/run.sh does)".into(),
            );
        }
        let port = free_port();
        let mut server = Server {
            child: None,
            port,
            url: format!("redis://:{PASSWORD}@127.0.0.1:{port}/0"),
            dir: fresh_dir("redis"),
            kind: Kind::Redis,
            owner: None,
        };
        server.start()?;
        Ok(server)
    }

    /// (Re)starts the server on its port and directory, and waits until it answers.
    pub fn start(&mut self) -> Result<(), String> {
        // A file, not a pipe: a pipe nobody drains would block a chatty server.
        let log_path = self.dir.join("server.log");
        let log = std::fs::File::create(&log_path).map_err(|e| format!("server log: {e}"))?;
        let log_err = log.try_clone().map_err(|e| format!("server log: {e}"))?;
        let child = match self.kind {
            Kind::Postgres => {
                let bin = postgres_bin()?;
                as_owner(&mut Command::new(bin.join("postgres")), self.owner)
                    .arg("-D")
                    .arg(self.dir.join("data"))
                    .args(["-p", &self.port.to_string(), "-h", "127.0.0.1", "-k"])
                    .arg(&self.dir)
                    .args(["-c", "fsync=off", "-c", "max_connections=50"])
                    .stdin(Stdio::null())
                    .stdout(log)
                    .stderr(log_err)
                    .spawn()
                    .map_err(|e| format!("postgres: {e}"))?
            }
            Kind::Redis => Command::new("redis-server")
                .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
                .args([
                    "--save",
                    "",
                    "--appendonly",
                    "yes",
                    "--requirepass",
                    PASSWORD,
                ])
                .arg("--dir")
                .arg(&self.dir)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log_err)
                .spawn()
                .map_err(|e| format!("redis-server: {e}"))?,
        };
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self.answers() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    return Err(format!("the server exited ({status}): {log}"));
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "the server did not answer within {START_TIMEOUT:?}"
        ))
    }

    /// Whether the server accepts work: Postgres's pid file says `ready`, Redis answers a
    /// PING (with `NOAUTH` before a password is given, not `LOADING`).
    fn answers(&self) -> bool {
        match self.kind {
            Kind::Postgres => std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
                .map(|pid| pid.lines().any(|line| line.trim() == "ready"))
                .unwrap_or(false),
            Kind::Redis => {
                let Ok(mut con) = TcpStream::connect(("127.0.0.1", self.port)) else {
                    return false;
                };
                let _ = con.set_read_timeout(Some(Duration::from_secs(1)));
                if con.write_all(b"PING\r\n").is_err() {
                    return false;
                }
                let mut line = String::new();
                let _ = BufReader::new(con).read_line(&mut line);
                line.starts_with("+PONG") || line.starts_with("-NOAUTH")
            }
        }
    }

    /// Stops the server (a fast shutdown; the data directory stays for [`Server::start`]).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = rustix::process::Pid::from_child(&child);
            let signal = match self.kind {
                // Postgres: SIGINT is the fast shutdown (sessions aborted).
                Kind::Postgres => rustix::process::Signal::INT,
                Kind::Redis => rustix::process::Signal::TERM,
            };
            let _ = rustix::process::kill_process(pid, signal);
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
