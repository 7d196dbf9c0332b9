//! The book's Quick start, followed as a user follows it: a crate made
//! with `cargo new` outside this repository, the chapter's dependency line
//! added to its `Cargo.toml`, the chapter's program as its `src/main.rs`,
//! then the chapter's own commands (`cargo build`, `taskfold run -n 4`),
//! whose output must be the chapter's expected output.
//!
//! Three things differ from a user's machine, none of them in what the
//! chapter says: `taskfold` on the `PATH` is this workspace's build
//! instead of one from `cargo install`; the crate starts from the
//! workspace's `Cargo.lock` (the versions CI tests, and no registry lookup
//! in the test); and its `target` is kept between runs under this
//! workspace's target directory (`quick-start/`), so that only the first
//! run builds taskfold's dependencies.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use taskfold_tests::{run_bounded, target_dir, taskfold_bin, text};

/// A fenced block of the chapter: its language and its text.
struct Block {
    lang: String,
    code: String,
}

/// Every fenced block of `markdown`, in order (the language is the info
/// string up to its first comma).
fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for line in markdown.lines() {
        match (open.as_mut(), line.strip_prefix("```")) {
            (Some(_), Some(_)) => out.push(open.take().expect("open block")),
            (Some(b), None) => {
                b.code.push_str(line);
                b.code.push('\n');
            }
            (None, Some(info)) => {
                let lang = info.split(',').next().unwrap_or("").trim().to_string();
                open = Some(Block {
                    lang,
                    code: String::new(),
                });
            }
            (None, None) => {}
        }
    }
    out
}

fn of<'a>(all: &'a [Block], lang: &str) -> Vec<&'a Block> {
    all.iter().filter(|b| b.lang == lang).collect()
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository")
}

/// Runs one of the chapter's command lines in `dir`, with this workspace's
/// `taskfold` first on the `PATH`.
fn sh(line: &str, dir: &Path, limit: Duration) -> Output {
    let bin_dir = taskfold_bin().parent().expect("bin dir").to_path_buf();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin_dir];
    paths.extend(std::env::split_paths(&path));
    let mut cmd = Command::new("sh");
    cmd.args(["-c", line])
        .current_dir(dir)
        .env("PATH", std::env::join_paths(paths).expect("PATH"))
        // The outer `cargo test`'s settings are not a user's.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET_DIR");
    let out = run_bounded(cmd, limit);
    assert!(
        out.status.success(),
        "`{line}` failed in {}:\n{}",
        dir.display(),
        text(&out)
    );
    out
}

#[test]
fn the_quick_start_builds_and_runs_as_a_new_crate() {
    let page = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/quick-start.md");
    let all = blocks(&std::fs::read_to_string(&page).expect("quick-start.md"));
    let (sh_blocks, toml, rust, expected) = (
        of(&all, "sh"),
        of(&all, "toml"),
        of(&all, "rust"),
        of(&all, "text"),
    );
    assert_eq!(
        (sh_blocks.len(), toml.len(), rust.len(), expected.len()),
        (3, 1, 1, 1),
        "the chapter's blocks changed: update this test with it"
    );
    // The chapter's first commands, as this test follows them below.
    let setup: Vec<&str> = sh_blocks[0].code.lines().collect();
    assert_eq!(
        setup,
        [
            "cargo install --path taskfold/apps",
            "cargo new my_app",
            "cd my_app"
        ]
    );

    // Beside the crate, `taskfold` is this repository: `../taskfold`.
    let home = tempfile::tempdir().expect("tempdir");
    assert!(
        !home.path().starts_with(repo_root()),
        "the crate must be outside the workspace"
    );
    std::os::unix::fs::symlink(repo_root(), home.path().join("taskfold")).unwrap();
    sh("cargo new my_app", home.path(), Duration::from_secs(60));
    let app = home.path().join("my_app");

    let manifest = app.join("Cargo.toml");
    let mut m = std::fs::read_to_string(&manifest).unwrap();
    assert!(
        m.trim_end().ends_with("[dependencies]"),
        "cargo new's Cargo.toml no longer ends with [dependencies]:\n{m}"
    );
    m.push_str(&toml[0].code);
    std::fs::write(&manifest, m).unwrap();
    std::fs::write(app.join("src/main.rs"), &rust[0].code).unwrap();
    std::fs::copy(repo_root().join("Cargo.lock"), app.join("Cargo.lock")).unwrap();
    let cache = target_dir().join("../quick-start");
    std::fs::create_dir_all(&cache).unwrap();
    std::os::unix::fs::symlink(&cache, app.join("target")).unwrap();

    let run: Vec<&str> = sh_blocks[1].code.lines().collect();
    assert_eq!(
        run,
        ["cargo build", "taskfold run -n 4 -- target/debug/my_app"]
    );
    // The first run builds taskfold and its dependencies (minutes on a
    // busy 2-core machine); later ones only the crate and taskfold's own.
    sh(run[0], &app, Duration::from_secs(1500));
    let out = sh(run[1], &app, Duration::from_secs(180));

    // The ranks' lines (`[r] ...`) are the launcher's standard output, its
    // own (`taskfold run: ...`) its standard error; each as the chapter
    // shows them, in order, and nothing else.
    let want: Vec<&str> = expected[0].code.lines().collect();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (ranks, launcher): (Vec<&str>, Vec<&str>) =
        want.into_iter().partition(|l| l.starts_with('['));
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ranks, "{}", text(&out));
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        launcher,
        "{}",
        text(&out)
    );
}

/// The Metrics chapter's dependency line is the Quick start's, with the
/// feature it needs: the two never disagree on how taskfold is had.
#[test]
fn the_metrics_dependency_line_is_the_quick_starts() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let read = |page: &str| std::fs::read_to_string(src.join(page)).expect(page);
    let quick = blocks(&read("quick-start.md"));
    let metrics = blocks(&read("metrics.md"));
    let (quick, metrics) = (of(&quick, "toml"), of(&metrics, "toml"));
    assert_eq!((quick.len(), metrics.len()), (1, 1));
    let want = quick[0]
        .code
        .replace(" }", r#", features = ["prometheus"] }"#);
    assert_eq!(metrics[0].code, want);
}

#[test]
fn blocks_are_split_by_language() {
    let md = "a\n```sh\nls\n```\n```rust,no_run\nfn main() {}\n```\n```text\nx\n```\n";
    let b = blocks(md);
    let langs: Vec<&str> = b.iter().map(|b| b.lang.as_str()).collect();
    assert_eq!(langs, ["sh", "rust", "text"]);
    assert_eq!(b[1].code, "fn main() {}\n");
}
