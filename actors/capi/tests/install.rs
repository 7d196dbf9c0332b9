//! The documented install step, then the library used as a user outside
//! the workspace uses it: `pkg-config --cflags --libs taskfold` for a C
//! program, and CMake's `find_package(taskfold)` for the C examples
//! (shared and static) and the Fortran one, each run under `taskfold run`.

mod support;

use std::path::Path;
use std::process::Command;
use support::*;

/// Installs into `prefix` from this test run's build of the library.
fn install(prefix: &Path) {
    let mut cmd = Command::new("bash");
    cmd.arg(crate_dir().join("install.sh"))
        .arg("--lib-dir")
        .arg(lib_dir())
        .arg(prefix);
    build(cmd);
    for f in [
        "lib/libtaskfold.so",
        "lib/libtaskfold.a",
        "include/taskfold.h",
        "lib/pkgconfig/taskfold.pc",
        "lib/cmake/taskfold/taskfoldConfig.cmake",
    ] {
        assert!(prefix.join(f).exists(), "{f} not installed");
    }
}

const HELLO: &str = r#"
#include <stdio.h>
#include <taskfold.h>
int main(void) {
  int32_t rank, size;
  if (tf_init() || tf_rank(&rank) || tf_size(&size)) {
    fprintf(stderr, "start: %s\n", tf_last_error());
    return 1;
  }
  double mine = rank + 1, sum = 0;
  tf_request req;
  if (tf_ireduce(&mine, &sum, 1, TF_F64, TF_SUM, 0, NULL, &req) || tf_wait(&req, NULL)) {
    fprintf(stderr, "reduce: %s\n", tf_last_error());
    return 1;
  }
  if (rank == 0) printf("sum %g\n", sum);
  printf("hello from rank %d of %d\n", rank, size);
  return tf_finalize();
}
"#;

fn pkg_config(prefix: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::new("pkg-config")
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .args(args)
        .arg("taskfold")
        .output()
        .expect("pkg-config (CI installs it)");
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn pkg_config_builds_a_c_program_against_the_installed_library() {
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("prefix");
    install(&prefix);
    let flags = pkg_config(&prefix, &["--cflags", "--libs"]);
    assert!(flags.iter().any(|f| f == "-ltaskfold"), "{flags:?}");
    let src = tmp.path().join("hello.c");
    std::fs::write(&src, HELLO).unwrap();
    let exe = tmp.path().join("hello");
    let mut cc = Command::new("cc");
    cc.current_dir(tmp.path())
        .arg(&src)
        .args(&flags)
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
        .arg("-o")
        .arg(&exe);
    build(cc);
    let out = under_taskfold(2, &exe, &[]);
    assert_every_rank(&out, 2, |r| format!("hello from rank {r} of 2"));
    assert!(text(&out).contains("[0] sum 3"), "{}", text(&out));
}

fn cmake(src: &Path, build_dir: &Path, prefix: &Path) {
    let mut configure = Command::new("cmake");
    configure
        .arg("-S")
        .arg(src)
        .arg("-B")
        .arg(build_dir)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()));
    build(configure);
    let mut make = Command::new("cmake");
    make.arg("--build").arg(build_dir);
    build(make);
}

#[test]
fn find_package_builds_the_c_and_fortran_examples() {
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("prefix");
    install(&prefix);
    let apps = workspace().join("apps");
    let (c, f) = (tmp.path().join("build-c"), tmp.path().join("build-f"));
    cmake(&apps.join("c"), &c, &prefix);
    cmake(&apps.join("fortran"), &f, &prefix);
    // The static build needs no libtaskfold.so at run time.
    let ldd = Command::new("ldd")
        .arg(c.join("kirchhoff_static"))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&ldd.stdout).contains("libtaskfold"));
    let small = [
        "--nx",
        "64",
        "--nz",
        "32",
        "--shots",
        "2",
        "--receivers",
        "8",
        "--batch",
        "4",
    ];
    for exe in ["kirchhoff", "kirchhoff_static"] {
        let out = under_taskfold(2, &c.join(exe), &small);
        assert_every_rank(&out, 2, |r| format!("[{r}] rank {r}: kirchhoff done"));
    }
    let out = under_taskfold(2, &f.join("field_stats"), &["2"]);
    assert_every_rank(&out, 2, |r| format!("[{r}] rank {r}: fortran stats ok"));
}
