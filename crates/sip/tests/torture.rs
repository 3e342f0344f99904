//! RFC 4475 / RFC 5118 torture messages through the parser and the request checks: each message
//! must frame (or be dropped when the RFC says so) and get the status the RFC recommends.

use sip::validate::{check_request, check_response};
use sip::Message;
use std::path::PathBuf;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/sip-torture")
}

/// What strowger (a UAS / B2BUA) does with each message: `Ok` = accepted for processing,
/// a status = rejected with it, 0 = dropped.
fn expected(name: &str) -> &'static [u16] {
    match name {
        "badinv01" | "clerr" | "ncl" | "scalar02" | "quotbal" | "ltgtruri" | "lwsruri"
        | "lwsstart" | "trws" | "escruri" | "regbadct" | "badaspec" | "baddn" | "mismatch01"
        | "badbranch" | "insuf" | "multi01" | "mcl01" | "ipv6-bad" => &[400],
        "badvers" => &[505],
        "mismatch02" | "intmeth" | "esc02" => &[501],
        "unkscm" | "novelsc" => &[416],
        "bext01" => &[420],
        "scalarlg" | "bigcode" => &[0],
        _ => &[200],
    }
}

#[test]
fn torture_corpus_gets_the_rfc_answers() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for dir in ["rfc4475", "rfc5118"] {
        let mut files: Vec<_> = std::fs::read_dir(corpus().join(dir))
            .expect("shared/conformance/sip-torture beside the repository")
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for path in files {
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            let bytes = std::fs::read(&path).unwrap();
            let got = match Message::parse(&bytes, true) {
                Err(_) => 0,
                Ok(m) if m.is_request() => match check_request(&m, &["timer"]) {
                    Ok(()) => 200,
                    Err(r) => r.status,
                },
                Ok(m) => match check_response(&m) {
                    Ok(_) => 200,
                    Err(_) => 0,
                },
            };
            if !expected(&name).contains(&got) {
                wrong.push(format!("{name}: got {got}, want {:?}", expected(&name)));
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 61);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn dblreq_processes_only_the_register() {
    let bytes = std::fs::read(corpus().join("rfc4475/dblreq.dat")).unwrap();
    let m = Message::parse(&bytes, true).unwrap();
    assert_eq!(m.method(), Some(&sip::Method::Register));
    assert!(m.body().is_empty());
}
