//! A real softphone: Debian's baresip, headless, with file audio (aufile source; the sndfile
//! filter dumps what it decodes), bound to 127.0.0.1 only, no registration. It calls 9196 with
//! espeak-ng speech and must hear that speech back, then calls 44444 and must hear demo.wav.

mod common;

use common::audio::{best_correlation, read_wav, Wav};
use common::net::{free_port, free_port_range};
use common::switch::assert_answered_cdrs;
use common::{read_text, tail, Strowger, TempDir};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How long baresip stays up (-t): the call lasts a little less.
const RUN_S: u32 = 8;

/// Speech from espeak-ng, as 8 kHz 16-bit mono (what aufile needs for a G.711 call).
fn speech_wav(dir: &Path) -> PathBuf {
    let raw = dir.join("speech22k.wav");
    let out = dir.join("speech.wav");
    let text = "Testing the strowger echo extension. The quick brown fox jumps over the lazy dog, \
                one two three four five six seven eight nine ten.";
    run(Command::new("espeak-ng")
        .args(["-v", "en-us", "-s", "150", "-w"])
        .arg(&raw)
        .arg(text));
    run(Command::new("sox")
        .arg(&raw)
        .args(["-r", "8000", "-c", "1", "-b", "16"])
        .arg(&out));
    out
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (run scripts/setup.sh)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs baresip once: dials `exten` at `sip`, plays `source`, quits after RUN_S seconds, and
/// returns what it decoded (the sndfile filter's *-dec.wav dump).
fn baresip_call(dir: &Path, sip: SocketAddr, exten: &str, source: &Path) -> Wav {
    let conf = dir.join(format!("baresip-{exten}"));
    let dumps = conf.join("dumps");
    std::fs::create_dir_all(&dumps).unwrap();
    let rtp = free_port_range(10);
    let config = format!(
        "poll_method epoll\n\
         sip_listen 127.0.0.1:{sip_port}\n\
         net_interface 127.0.0.1\n\
         rtp_ports {rtp}-{rtp_hi}\n\
         call_local_timeout 10\n\
         audio_source aufile,{source}\n\
         audio_player nil\n\
         audio_alert nil\n\
         ausrc_srate 8000\n\
         auplay_srate 8000\n\
         ausrc_channels 1\n\
         auplay_channels 1\n\
         module_path /usr/lib/baresip/modules\n\
         module g711.so\n\
         module aufile.so\n\
         module sndfile.so\n\
         snd_path {dumps}\n\
         module_tmp account.so\n\
         module_app menu.so\n",
        sip_port = free_port(),
        rtp_hi = rtp + 9,
        source = source.display(),
        dumps = dumps.display(),
    );
    std::fs::write(conf.join("config"), config).unwrap();
    std::fs::write(
        conf.join("accounts"),
        "<sip:tester@127.0.0.1>;regint=0;audio_codecs=PCMU\n",
    )
    .unwrap();
    let log = conf.join("baresip.log");
    let out = std::fs::File::create(&log).unwrap();
    let status = Command::new("timeout")
        .args([
            format!("{}", RUN_S + 20),
            "baresip".into(),
            "-4".into(),
            "-f".into(),
        ])
        .arg(&conf)
        .args([
            "-e",
            &format!("/dial sip:{exten}@{sip}"),
            "-t",
            &RUN_S.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .status()
        .expect("run baresip (scripts/setup.sh installs it)");
    let log = read_text(&log).replace('\r', "\n");
    let log: String = log
        .lines()
        .filter(|l| !l.contains("audio="))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        status.success(),
        "baresip exited {status}; its log:\n{}",
        tail(&log, 40)
    );
    assert!(
        log.contains("Call established"),
        "baresip never got its call to {exten} answered; its log:\n{}",
        tail(&log, 40)
    );
    let dec = std::fs::read_dir(&dumps)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("-dec.wav"))
        .unwrap_or_else(|| panic!("no decoded-audio dump; baresip log:\n{}", tail(&log, 40)));
    let wav = read_wav(&dec);
    assert_eq!((wav.rate, wav.channels), (8000, 1));
    wav
}

/// Best correlation of 3 s of what baresip heard (from 0.5 s in) with `reference`.
fn assert_heard(heard: &Wav, reference: &[i16], what: &str) {
    let (c, lag) = best_correlation(&heard.samples, reference, 4000, 24000, -8000..=8000);
    println!("baresip vs {what}: correlation {c:.3} at lag {lag}");
    assert!(
        c > 0.9,
        "baresip's received audio vs {what}: best correlation {c:.3} at lag {lag} samples"
    );
}

#[test]
fn baresip_hears_its_echo_and_the_demo() {
    let dir = TempDir::new("baresip");
    let s = Strowger::start("baresip");
    let speech = speech_wav(dir.path());

    let heard = baresip_call(dir.path(), s.sip, "9196", &speech);
    assert_heard(
        &heard,
        &read_wav(&speech).samples,
        "the speech it sent (echo)",
    );

    let heard = baresip_call(dir.path(), s.sip, "44444", &speech);
    let demo = read_wav(&common::repo_root().join("assets/demo.wav"));
    assert_heard(&heard, &demo.samples, "assets/demo.wav");

    let mut cdrs = s.wait_cdrs(2);
    cdrs.sort_by(|a, b| a.num("start").total_cmp(&b.num("start")));
    assert_answered_cdrs(&cdrs[..1], 1, "9196");
    assert_answered_cdrs(&cdrs[1..], 1, "44444");
}
