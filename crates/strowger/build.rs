//! Fetches the web pages' JavaScript dependencies from npm (console/package-lock.json pins
//! them) into OUT_DIR and builds what the binary embeds from them, so neither the console nor
//! the phone page needs a CDN at run time: uPlot's files as they come, and JsSIP (which npm
//! carries only as CommonJS modules) bundled into one browser script by esbuild.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Files taken as they come: (file in node_modules, name it is served as).
const ASSETS: &[(&str, &str)] = &[
    ("uplot/dist/uPlot.iife.min.js", "uPlot.iife.min.js"),
    ("uplot/dist/uPlot.min.css", "uPlot.min.css"),
];

/// Packages bundled for the browser: (entry module in node_modules, the global it defines,
/// its licence, which heads the bundle, name it is served as).
const BUNDLES: &[(&str, &str, &str, &str)] = &[(
    "jssip/lib/JsSIP.js",
    "JsSIP",
    "jssip/LICENSE.md",
    "jssip.min.js",
)];

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
    let modules = out.join("node_modules");
    let installed = ASSETS
        .iter()
        .map(|(from, _)| from)
        .chain(BUNDLES.iter().map(|(e, ..)| e));
    let installed =
        modules.join("esbuild").exists() && installed.into_iter().all(|f| modules.join(f).exists());
    if !installed {
        run(
            "npm",
            &[
                "ci",
                "--ignore-scripts",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ],
            &out,
            "check the network to the npm registry",
        );
    }
    for (from, to) in ASSETS {
        std::fs::copy(modules.join(from), out.join(to))
            .unwrap_or_else(|e| panic!("the console's {from} is missing after npm ci: {e}"));
    }
    for (entry, global, licence, to) in BUNDLES {
        let licence = std::fs::read_to_string(modules.join(licence))
            .unwrap_or_else(|e| panic!("the licence {licence} is missing after npm ci: {e}"));
        run(
            "node",
            &[
                "node_modules/esbuild/bin/esbuild",
                &format!("node_modules/{entry}"),
                "--bundle",
                "--minify",
                "--format=iife",
                &format!("--global-name={global}"),
                &format!("--banner:js=/*! {}\n*/", licence.replace("*/", "* /")),
                "--target=es2020",
                "--log-level=warning",
                &format!("--outfile={to}"),
            ],
            &out,
            "its output above says why",
        );
    }
}

/// Runs `program args` in `dir`, panicking with `fix` when it fails.
fn run(program: &str, args: &[&str], dir: &Path, fix: &str) {
    match Command::new(program).args(args).current_dir(dir).status() {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "`{program} {}` failed ({s}) in {}: {fix}",
            args.join(" "),
            dir.display()
        ),
        Err(e) => panic!(
            "cannot run {program} for the web pages' JavaScript ({e}): install Node.js and npm \
             (`bash scripts/setup.sh build` does)"
        ),
    }
}
