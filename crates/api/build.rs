//! Records the commit Overseer is built from, for `GET /api/v2/version`'s
//! `git_version`: `OVERSEER_GIT_VERSION` is set to `git rev-parse --short HEAD`
//! when the crate is built from a git checkout with git installed. Anywhere else
//! (a source tarball, no git) it stays unset and `git_version` is `null`; this
//! never fails the build. A packager may set `OVERSEER_GIT_VERSION` itself.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable the crate reads with `option_env!`.
const VARIABLE: &str = "OVERSEER_GIT_VERSION";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={VARIABLE}");
    if std::env::var_os(VARIABLE).is_some() {
        return;
    }
    let Some(commit) = git(&["rev-parse", "--short", "HEAD"]) else {
        return;
    };
    if commit.is_empty() || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return;
    }
    println!("cargo:rustc-env={VARIABLE}={commit}");
    for path in watched() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// What git prints for `args` in this crate's folder, when it succeeds.
fn git(args: &[&str]) -> Option<String> {
    let folder = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git")
        .args(args)
        .current_dir(folder)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The files a new commit or checkout changes: `HEAD`, the folder of the branch
/// it points to (a new commit may write a loose ref there) and `packed-refs`.
/// Only existing paths: cargo reruns a script whose watched path is missing
/// on every build.
fn watched() -> Vec<PathBuf> {
    let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) else {
        return Vec::new();
    };
    let git_dir = PathBuf::from(git_dir);
    let common = git(&["rev-parse", "--git-common-dir"])
        .map(|c| resolve(&git_dir, &c))
        .unwrap_or_else(|| git_dir.clone());
    let mut paths = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(folder) = common.join(branch).parent()
    {
        paths.push(folder.to_path_buf());
    }
    paths.retain(|p| p.exists());
    paths
}

/// `--git-common-dir` may be relative to the crate's folder.
fn resolve(git_dir: &Path, common: &str) -> PathBuf {
    let common = Path::new(common);
    if common.is_absolute() {
        return common.to_path_buf();
    }
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(|folder| Path::new(&folder).join(common))
        .unwrap_or_else(|| git_dir.to_path_buf())
}
