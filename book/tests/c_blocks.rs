//! The book's C and Fortran code blocks: each is a whole program, compiled
//! against libtaskfold (the header and the Fortran module of
//! `actors/capi`) and run under `taskfold run -n 2`, where it must exit 0;
//! a block tagged `no_run` is compiled only, and one tagged `fragment`
//! (statements, not a program) is compiled as the body of a function
//! after `#include <taskfold.h>`. Blocks of other languages
//! (`sh`, `cmake`) are not programs and are skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use taskfold_tests::{run_bounded, target_dir, taskfold_bin, text};

/// One block: its page, first line, language and flags, and its text.
struct Block {
    page: String,
    line: usize,
    lang: String,
    no_run: bool,
    fragment: bool,
    code: String,
}

/// The blocks of `markdown` fenced as `c` or `fortran` (with flags after
/// a comma: `c,no_run`).
fn blocks(page: &str, markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(b) = open.as_mut() {
            if trimmed.starts_with("```") {
                out.push(open.take().expect("open block"));
            } else {
                // Blocks inside list items are indented: drop the indent.
                let indent = line.len() - trimmed.len();
                b.code.push_str(if indent >= 2 {
                    &line[indent.min(2)..]
                } else {
                    line
                });
                b.code.push('\n');
            }
            continue;
        }
        let Some(info) = trimmed.strip_prefix("```") else {
            continue;
        };
        let mut tags = info.split(',').map(str::trim);
        let lang = tags.next().unwrap_or("").to_string();
        let tags: Vec<&str> = tags.collect();
        let fragment = tags.contains(&"fragment");
        open = Some(Block {
            page: page.to_string(),
            line: i + 1,
            lang,
            no_run: fragment || tags.contains(&"no_run"),
            fragment,
            code: String::new(),
        });
        // A fence of another language is skipped as a whole, below.
    }
    out.retain(|b| b.lang == "c" || b.lang == "fortran");
    out
}

fn capi() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../actors/capi")
}

/// Builds libtaskfold (shared) where this test's binaries are.
fn lib_dir() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "taskfold-capi", "--lib"])
        .status()
        .expect("run cargo build");
    assert!(status.success(), "building libtaskfold failed");
    let dir = target_dir();
    assert!(dir.join("libtaskfold_capi.so").exists());
    dir
}

fn compile(b: &Block, dir: &Path, lib: &Path, n: usize) -> PathBuf {
    let exe = dir.join(format!("block{n}"));
    let rpath = format!("-Wl,-rpath,{}", lib.display());
    let mut cmd;
    if b.lang == "c" {
        let src = dir.join(format!("block{n}.c"));
        let code = if b.fragment {
            format!(
                "#include <taskfold.h>\nvoid fragment(void);\nvoid fragment(void) {{\n{}}}\nint main(void) {{ return 0; }}\n",
                b.code
            )
        } else {
            b.code.clone()
        };
        std::fs::write(&src, code).unwrap();
        cmd = Command::new("cc");
        if b.fragment {
            // A fragment sets variables it shows and never reads them.
            cmd.arg("-Wno-unused-but-set-variable");
        }
        cmd.args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-D_POSIX_C_SOURCE=200809L",
        ])
        .arg("-I")
        .arg(capi().join("include"))
        .arg(&src);
    } else {
        let src = dir.join(format!("block{n}.f90"));
        std::fs::write(&src, &b.code).unwrap();
        let module = dir.join("taskfold_mod.o");
        if !module.exists() {
            let out = Command::new("gfortran")
                .args(["-std=f2018", "-c"])
                .arg(capi().join("fortran/taskfold.f90"))
                .arg("-J")
                .arg(dir)
                .arg("-o")
                .arg(&module)
                .output()
                .expect("gfortran (CI installs it)");
            assert!(out.status.success(), "the Fortran module:\n{}", text(&out));
        }
        cmd = Command::new("gfortran");
        cmd.args(["-std=f2018", "-Wall", "-Werror"])
            .arg("-I")
            .arg(dir)
            .arg(&src)
            .arg(&module);
    }
    cmd.current_dir(dir)
        .arg("-L")
        .arg(lib)
        .arg(&rpath)
        .args(["-ltaskfold_capi", "-lm", "-o"])
        .arg(&exe);
    let out = cmd.output().expect("run the compiler");
    assert!(
        out.status.success(),
        "{} block at line {} of {} does not compile:\n{}\n{}",
        b.lang,
        b.line,
        b.page,
        text(&out),
        b.code
    );
    exe
}

#[test]
fn the_c_and_fortran_blocks_compile_and_run() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            all.extend(blocks(&name, &std::fs::read_to_string(&path).unwrap()));
        }
    }
    // The chapter Embedding from C and Fortran has blocks of both kinds:
    // a test that found none would prove nothing.
    let c = all.iter().filter(|b| b.lang == "c").count();
    let f = all.iter().filter(|b| b.lang == "fortran").count();
    assert!(c >= 5 && f >= 1, "{c} C and {f} Fortran blocks found");
    let lib = lib_dir();
    let dir = tempfile::tempdir().unwrap();
    for (n, b) in all.iter().enumerate() {
        let exe = compile(b, dir.path(), &lib, n);
        if b.no_run {
            continue;
        }
        let mut cmd = Command::new(taskfold_bin());
        cmd.args(["run", "-n", "2", "--timeout", "120s", "--"])
            .arg(&exe);
        let out = run_bounded(cmd, Duration::from_secs(180));
        assert!(
            out.status.success(),
            "{} block at line {} of {} failed:\n{}\n{}",
            b.lang,
            b.line,
            b.page,
            text(&out),
            b.code
        );
    }
}

#[test]
fn blocks_are_found_with_their_flags() {
    let md = "text\n```c\nint main(void) { return 0; }\n```\n\n  ```fortran,no_run\n  end\n  ```\n```sh\nls\n```\n```c,fragment\nint x;\n```\n";
    let b = blocks("x.md", md);
    assert_eq!(b.len(), 3);
    assert!(b[2].fragment && b[2].no_run && !b[0].fragment);
    assert_eq!(
        (b[0].lang.as_str(), b[0].no_run, b[0].line),
        ("c", false, 2)
    );
    assert_eq!(b[0].code, "int main(void) { return 0; }\n");
    assert_eq!((b[1].lang.as_str(), b[1].no_run), ("fortran", true));
    assert_eq!(b[1].code, "end\n");
}
