//! Fetches the web console's JavaScript dependencies from npm (console/package-lock.json pins
//! them) into OUT_DIR, so the binary embeds them and the console needs no CDN at run time.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the console takes from each package: (file in node_modules, name it is served as).
const ASSETS: &[(&str, &str)] = &[
    ("uplot/dist/uPlot.iife.min.js", "uPlot.iife.min.js"),
    ("uplot/dist/uPlot.min.css", "uPlot.min.css"),
];

fn main() {
    let src = Path::new("console");
    for f in ["package.json", "package-lock.json"] {
        println!("cargo:rerun-if-changed=console/{f}");
    }
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("console");
    std::fs::create_dir_all(&out).expect("create OUT_DIR/console");
    for f in ["package.json", "package-lock.json"] {
        std::fs::copy(src.join(f), out.join(f)).expect("copy the console's package files");
    }
    let installed = ASSETS
        .iter()
        .all(|(from, _)| out.join("node_modules").join(from).exists());
    if !installed {
        let status = Command::new("npm")
            .args([
                "ci",
                "--ignore-scripts",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ])
            .current_dir(&out)
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => panic!(
                "`npm ci` for the web console failed ({s}) in {}: check the network to the npm registry",
                out.display()
            ),
            Err(e) => panic!(
                "cannot run npm for the web console's JavaScript ({e}): install Node.js and npm \
                 (`bash scripts/setup.sh build` does)"
            ),
        }
    }
    for (from, to) in ASSETS {
        std::fs::copy(out.join("node_modules").join(from), out.join(to))
            .unwrap_or_else(|e| panic!("the console's {from} is missing after npm ci: {e}"));
    }
}
