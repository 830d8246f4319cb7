//! Servers of the test's own: PostgreSQL ([`ThrowawayPostgres`]) and Redis
//! ([`ThrowawayRedis`]). A PostgreSQL server of the test's own, on a free loopback port, that the test
//! may stop and start: the machine's shared server is never touched.
//!
//! The cluster lives in a temporary folder owned by the `postgres` user (the
//! server refuses to run as root); it is stopped by its process id and removed
//! when the value is dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the server may take to start accepting connections.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// How long a throwaway redis-server may take to accept connections.
const REDIS_START_DEADLINE: Duration = Duration::from_secs(20);

/// How long a killed redis-server may take to free its port.
const REDIS_STOP_DEADLINE: Duration = Duration::from_secs(20);

/// Does a loopback port accept connections?
fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))
        .is_ok()
}

/// A throwaway PostgreSQL server.
pub struct ThrowawayPostgres {
    /// The server's binaries (`initdb`, `postgres`).
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// The loopback port it listens on.
    pub port: u16,
}

fn postgres_bin() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop()
}

/// Runs a command as the `postgres` user when this process is root.
fn as_postgres(program: &Path) -> Command {
    let is_root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if is_root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// A TCP port on loopback that nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl ThrowawayPostgres {
    /// Creates and starts a cluster, or says why it cannot (then the caller skips,
    /// or fails under CI, see [`crate::unavailable`]).
    pub fn start() -> Result<Self, String> {
        Self::start_with_auth("trust")
    }

    /// A server whose TCP connections must log in with a password (SCRAM), as
    /// a production server's do; the `postgres` superuser still logs in over the
    /// server's own socket without one (see [`Self::create_role`]).
    pub fn start_with_passwords() -> Result<Self, String> {
        Self::start_with_auth("scram-sha-256")
    }

    /// Creates a login role with this password, allowed to create tables in the
    /// `postgres` database.
    pub fn create_role(&self, name: &str, password: &str) -> Result<(), String> {
        let quoted = password.replace('\'', "''");
        let sql = format!(
            "CREATE ROLE \"{name}\" LOGIN PASSWORD '{quoted}'; GRANT ALL ON SCHEMA public TO \"{name}\";"
        );
        let out = as_postgres(&self.bin.join("psql"))
            .args(["-v", "ON_ERROR_STOP=1", "-X", "-q", "-h"])
            .arg(self.dir.path())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-c",
                &sql,
            ])
            .output()
            .map_err(|e| format!("psql: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "cannot create role {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    fn start_with_auth(host_auth: &str) -> Result<Self, String> {
        let bin =
            postgres_bin().ok_or("no PostgreSQL server binaries under /usr/lib/postgresql")?;
        let dir = tempfile::Builder::new()
            .prefix("overseer-pg-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status()
            .map_err(|e| format!("chown: {e}"))?;
        if !status.success() {
            return Err("cannot hand the cluster folder to the postgres user".into());
        }
        let data = dir.path().join("data");
        let init = as_postgres(&bin.join("initdb"))
            .args(["--auth-local=trust", "--auth-host", host_auth])
            .args(["-U", "postgres", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !init.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&init.stderr)
            ));
        }
        let server = Self {
            bin,
            dir,
            port: free_port(),
        };
        server.resume()?;
        Ok(server)
    }

    /// A URL of the `postgres` database on this server.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts the server (again) on the same port and waits until it answers.
    pub fn resume(&self) -> Result<(), String> {
        let log = self.dir.path().join("server.log");
        let socket_dir = self.dir.path();
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c full_page_writes=off",
            self.port,
            socket_dir.display()
        );
        let started = as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(["-o", &options, "-l"])
            .arg(&log)
            .args(["-w", "-t", "60", "start"])
            .output()
            .map_err(|e| format!("pg_ctl start: {e}"))?;
        if !started.status.success() {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!("the throwaway server did not start: {log}"));
        }
        let deadline = Instant::now() + START_DEADLINE;
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if Instant::now() > deadline {
                return Err("the throwaway server does not accept connections".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The postmaster's process id, from its pid file.
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.data().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// Kills the server by its process id (SIGKILL: as abrupt as a crash) and waits
    /// until the port is closed.
    pub fn kill(&self) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            // The children notice the postmaster is gone and exit; wait for the port.
            let deadline = Instant::now() + Duration::from_secs(30);
            while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            // Let the children finish, so the next start finds no stale shared memory.
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = std::fs::remove_file(self.data().join("postmaster.pid"));
        }
    }
}

impl Drop for ThrowawayPostgres {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args(["-QUIT", &pid.to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// A `redis-server` of the test's own, on a free loopback port, that it may kill and restart.
pub struct ThrowawayRedis {
    child: Option<Child>,
    /// The loopback port it listens on.
    pub port: u16,
    args: Vec<String>,
    dir: tempfile::TempDir,
}

impl ThrowawayRedis {
    /// Starts one (with `extra` arguments such as `--requirepass`), or `None` (skipped)
    /// when redis-server is not installed.
    pub fn start(extra: &[&str]) -> Option<Self> {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let port = free_port();
        let mut args: Vec<String> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(["--save", "", "--appendonly", "no"].map(String::from));
        args.extend(["--dir".into(), dir.path().display().to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = Self {
            child: None,
            port,
            args,
            dir,
        };
        match server.resume() {
            Ok(()) => Some(server),
            Err(e) => crate::unavailable("redis-server (a throwaway one)", e),
        }
    }

    /// Starts one that speaks only TLS (`--port 0 --tls-port`), with the server
    /// certificate and key `cert` and `key`, trusting `ca` for client certificates,
    /// which it requires when `auth_clients` is `yes` (`--tls-auth-clients`); `extra`
    /// more arguments. `None` (skipped) when redis-server cannot start so.
    pub fn start_tls(
        cert: &Path,
        key: &Path,
        ca: &Path,
        auth_clients: &str,
        extra: &[&str],
    ) -> Option<Self> {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let port = free_port();
        let mut args: Vec<String> = ["--port", "0", "--tls-port", &port.to_string()]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"].map(String::from));
        args.extend(["--tls-auth-clients".into(), auth_clients.to_owned()]);
        args.extend(["--dir".into(), dir.path().display().to_string()]);
        for (flag, path) in [
            ("--tls-cert-file", cert),
            ("--tls-key-file", key),
            ("--tls-ca-cert-file", ca),
        ] {
            args.extend([flag.to_owned(), path.display().to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = Self::prepared(port, args, dir);
        match server.resume() {
            Ok(()) => Some(server),
            Err(e) => crate::unavailable("redis-server with TLS (a throwaway one)", e),
        }
    }

    /// A server on `port` run with exactly `args` (a sentinel, say), in `dir`; not
    /// started yet: [`ThrowawayRedis::resume`] starts it.
    pub fn prepared(port: u16, args: Vec<String>, dir: tempfile::TempDir) -> Self {
        Self {
            child: None,
            port,
            args,
            dir,
        }
    }

    /// Its folder (for a dump file, say).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Starts it again on the same port, and waits until it accepts connections.
    pub fn resume(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server: {e}"))?;
        self.child = Some(child);
        let started = Instant::now();
        while !port_open(self.port) {
            if started.elapsed() > REDIS_START_DEADLINE {
                return Err("the throwaway redis-server does not accept connections".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Kills it by its pid (SIGKILL: as abrupt as a crash) and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let started = Instant::now();
        while port_open(self.port) && started.elapsed() < REDIS_STOP_DEADLINE {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (`STOP` to freeze it, `CONT` to thaw it) to it, while it runs.
    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            crate::procs::signal(pid, signal);
        }
    }

    /// `redis://[:password@]127.0.0.1:{port}/{db}`.
    pub fn url(&self, password: Option<&str>, db: u32) -> String {
        match password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}/{db}", self.port),
            None => format!("redis://127.0.0.1:{}/{db}", self.port),
        }
    }
}

impl Drop for ThrowawayRedis {
    fn drop(&mut self) {
        self.kill();
    }
}
