//! Links the system codec libraries (Debian -dev packages; scripts/setup.sh installs them).
fn main() {
    for lib in ["gsm", "spandsp", "speex", "speexdsp", "opus"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    if std::env::var_os("CARGO_FEATURE_G729").is_some() {
        println!("cargo:rustc-link-lib=dylib=bcg729");
    }
}
