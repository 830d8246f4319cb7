//! Things of a test's own on the machine's RabbitMQ (`127.0.0.1:5672`), made and
//! removed with `rabbitmqctl`: a virtual host (Celery's `celeryev` exchange and
//! every queue are per virtual host, so no other test's worker is heard there)
//! and, for tests of credentials, a user of its own.

use std::process::Command;

/// The machine's RabbitMQ, as the tests reach it.
pub const ADDRESS: &str = "127.0.0.1:5672";

/// A virtual host of the test's own, `guest` allowed everything on it; deleted
/// (with everything in it) when dropped.
pub struct VirtualHost {
    /// Its name.
    pub name: String,
}

impl VirtualHost {
    /// Makes one named `{prefix}_...` (unique), or says why it could not.
    pub fn create(prefix: &str) -> Result<Self, String> {
        let host = Self {
            name: crate::unique_name(prefix),
        };
        rabbitmqctl(&["add_vhost", &host.name])?;
        rabbitmqctl(&[
            "set_permissions",
            "-p",
            &host.name,
            "guest",
            ".*",
            ".*",
            ".*",
        ])?;
        Ok(host)
    }

    /// `amqp://guest:guest@127.0.0.1:5672/{name}`.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@{ADDRESS}/{}", self.name)
    }
}

impl Drop for VirtualHost {
    fn drop(&mut self) {
        let _ = rabbitmqctl(&["delete_vhost", &self.name]);
    }
}

/// Runs `rabbitmqctl args...`; its standard error is the error when it fails.
pub fn rabbitmqctl(args: &[&str]) -> Result<(), String> {
    let out = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .map_err(|e| format!("rabbitmqctl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "rabbitmqctl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
