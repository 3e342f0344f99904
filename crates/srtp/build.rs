//! Links Debian's libsrtp2 (libsrtp2-dev; scripts/setup.sh installs it).
fn main() {
    println!("cargo:rustc-link-lib=dylib=srtp2");
}
