//! Records which commit the binary was built from, for `larch --version`:
//! `LARCH_COMMIT_INFO` is `1a2b3c4d5e6f, 2026-11-25` (the commit's date), with `-dirty`
//! after the hash when tracked files differ from it.
//!
//! Git is asked first. Where it cannot answer (no git, no `.git`, a source tarball), the
//! environment variable `LARCH_COMMIT` is used as it is, and otherwise `unknown`: the
//! build never fails because of git.
//!
//! The script reruns when HEAD moves (`.git/HEAD`, the branch it points to, `packed-refs`),
//! when the index changes (a commit, `git add`), and when a file under `crates/` changes,
//! which rebuilds the binary anyway; an edit elsewhere (docs, scripts) shows as `-dirty`
//! only from the next of those.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=LARCH_COMMIT");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let info = match git_commit_info(&manifest_dir) {
        Some(info) => info,
        None => std::env::var("LARCH_COMMIT")
            .ok()
            .filter(|c| !c.trim().is_empty())
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=LARCH_COMMIT_INFO={info}");
}

/// `HASH[-dirty], DATE` of the checkout `dir` is in, or `None` when git cannot say. Also
/// prints the `rerun-if-changed` lines for the files that move with HEAD.
fn git_commit_info(dir: &Path) -> Option<String> {
    let hash = git(dir, &["rev-parse", "--short=12", "HEAD"])?;
    watch_head(dir);
    // Untracked files do not make a build dirty (as with `git describe --dirty`), and
    // `--no-optional-locks` keeps status from rewriting the index it watches.
    let dirty = match git(
        dir,
        &[
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
        ],
    ) {
        Some(changes) if !changes.is_empty() => "-dirty",
        _ => "",
    };
    match git(dir, &["show", "-s", "--format=%cs", "HEAD"]) {
        Some(date) => Some(format!("{hash}{dirty}, {date}")),
        None => Some(format!("{hash}{dirty}")),
    }
}

/// Asks for reruns when HEAD, the branch it names, the packed refs, the index or the
/// crates' sources change. Paths come from git itself, so a worktree (where `.git` is a
/// file) works too.
fn watch_head(dir: &Path) {
    let absolute = |p: String| -> PathBuf {
        let p = PathBuf::from(p);
        if p.is_absolute() { p } else { dir.join(p) }
    };
    if let Some(git_dir) = git(dir, &["rev-parse", "--git-dir"]).map(absolute) {
        rerun_if_changed(&git_dir.join("HEAD"));
        rerun_if_changed(&git_dir.join("index"));
    }
    if let Some(common_dir) = git(dir, &["rev-parse", "--git-common-dir"]).map(absolute) {
        rerun_if_changed(&common_dir.join("packed-refs"));
        // A detached HEAD names no branch; then `.git/HEAD` itself holds the hash.
        if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
            rerun_if_changed(&common_dir.join(branch));
        }
    }
    if let Some(top) = git(dir, &["rev-parse", "--show-toplevel"]) {
        rerun_if_changed(&Path::new(&top).join("crates"));
    }
}

/// Cargo treats a watched path that does not exist as changed on every build, so only
/// existing ones are named (a branch only in `packed-refs` has no file of its own).
fn rerun_if_changed(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// The trimmed standard output of `git ARGS` run in `dir`, or `None` if git is missing or
/// fails (not a checkout, a checkout owned by another user, ...).
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}
