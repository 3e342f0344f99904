//! Voice-menu steps on the simulated network (tests/net): `read`, `background`, `say` and
//! `menu` with RFC 4733 digits, in virtual time. Every prompt the test shell loads plays for
//! one second; which prompts the engine asked for, and when, show what the steps did.

use crate::net;

use net::*;

const IVR: &str = r#"
[sounds]
dir = "/snd"

[menus.main]
prompt = "main.wav"
choices = { "1" = "goto default exten=6001", "10" = "goto default exten=6010", "2" = "goto default exten=6002" }
invalid = "invalid.wav"
timeout_s = 3
retries = 1
fallback = "playback bye.wav"

[[dialplan.contexts.default.rules]]
exten = "6000"
steps = ["answer", "read PIN digits=4 timeout=3 prompt=enter.wav", "playback got-${PIN}.wav", "hangup"]

[[dialplan.contexts.default.rules]]
exten = "6100"
steps = ["answer", "background intro.wav", "read X digits=2", "playback x-${X}.wav", "hangup"]

[[dialplan.contexts.default.rules]]
exten = "6200"
steps = ["answer", "menu main"]

[menus.spoken]
prompt = "tts:Press 2"
choices = { "2" = "goto default exten=6002" }

[[dialplan.contexts.default.rules]]
exten = "6400"
steps = ["answer", "menu spoken"]

[[dialplan.contexts.default.rules]]
exten = "6500"
steps = ["answer", "say number ${CALLER}", "playback after.wav", "hangup"]

[[dialplan.contexts.default.rules]]
regex = "^60(\\d\\d)$"
steps = ["answer", "playback chose-${1}.wav", "hangup"]

[[dialplan.contexts.default.rules]]
exten = "6300"
steps = ["answer", "say number 1234", "say digits 56", "say alpha x", "say text \"Welcome to strowger\"", "hangup"]
"#;

/// A switch with the IVR rules and Alice calling `exten` with RFC 4733 events offered; the
/// call is answered.
fn dial(seed: u64, exten: &str) -> (Net, Id, Id, usize) {
    let mut n = Net::new(seed);
    let sw = b2bua(&mut n, IVR);
    let a = n.ua(ALICE, "alice");
    n.agent(a).codecs = vec![0, 101];
    let c = n.invite(a, &format!("sip:{exten}@127.0.0.1"), SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    (n, sw, a, c)
}

fn prompts(n: &mut Net, sw: Id) -> Vec<String> {
    n.sw(sw).node().prompts().to_vec()
}

/// Runs until the engine asks for prompt `name`, at most `limit`: whether it did.
fn asks_for(n: &mut Net, sw: Id, name: &str, limit: std::time::Duration) -> bool {
    n.run_until(limit, |n| prompts(n, sw).iter().any(|p| p == name))
}

fn press(n: &mut Net, a: Id, c: usize, digits: &str) {
    for d in digits.chars() {
        n.dtmf(a, c, d);
        n.run_for(ms(100));
    }
}

#[test]
fn read_ends_on_its_number_of_digits_and_the_digits_stop_its_prompt() {
    let (mut n, sw, a, c) = dial(1, "6000");
    assert!(asks_for(&mut n, sw, "enter.wav", secs(1)));
    press(&mut n, a, c, "12345");
    assert!(
        asks_for(&mut n, sw, "got-1234.wav", ms(100)),
        "{:?}",
        prompts(&mut n, sw)
    );
    assert!(
        n.run_until(secs(3), ended(a, c)),
        "hung up after the playback"
    );
}

#[test]
fn read_ends_on_the_terminator_which_is_not_kept() {
    let (mut n, sw, a, c) = dial(2, "6000");
    press(&mut n, a, c, "12#");
    assert!(
        asks_for(&mut n, sw, "got-12.wav", ms(100)),
        "{:?}",
        prompts(&mut n, sw)
    );
}

#[test]
fn read_ends_when_no_digit_comes_for_its_timeout() {
    let (mut n, sw, a, c) = dial(3, "6000");
    n.run_for(secs(2));
    press(&mut n, a, c, "7");
    n.run_for(secs(2));
    press(&mut n, a, c, "8");
    // Each digit gives the caller another 3 s.
    assert!(!asks_for(&mut n, sw, "got-78.wav", ms(2500)));
    assert!(
        asks_for(&mut n, sw, "got-78.wav", secs(1)),
        "{:?}",
        prompts(&mut n, sw)
    );

    // Nothing typed at all: the variable is empty once the prompt and the timeout are over.
    let (mut n, sw, _, _) = dial(4, "6000");
    assert!(!asks_for(&mut n, sw, "got-.wav", ms(3500)));
    assert!(asks_for(&mut n, sw, "got-.wav", secs(1)));
}

#[test]
fn a_digit_stops_background_and_starts_the_next_read() {
    let (mut n, sw, a, c) = dial(5, "6100");
    assert!(asks_for(&mut n, sw, "intro.wav", ms(100)));
    let start = n.elapsed();
    press(&mut n, a, c, "56");
    // The one-second intro did not play to its end.
    assert!(
        asks_for(&mut n, sw, "x-56.wav", ms(100)),
        "{:?}",
        prompts(&mut n, sw)
    );
    assert!(n.elapsed() - start < ms(500));
}

#[test]
fn the_menu_runs_the_step_of_the_choice() {
    let (mut n, sw, a, c) = dial(6, "6200");
    assert!(asks_for(&mut n, sw, "main.wav", ms(100)));
    press(&mut n, a, c, "2");
    assert!(asks_for(&mut n, sw, "chose-02.wav", ms(100)));

    // "1" could begin "10": the menu waits for more, then takes "1" at the timeout.
    let (mut n, sw, a, c) = dial(7, "6200");
    press(&mut n, a, c, "1");
    assert!(!asks_for(&mut n, sw, "chose-01.wav", ms(2500)));
    assert!(asks_for(&mut n, sw, "chose-01.wav", secs(1)));

    let (mut n, sw, a, c) = dial(8, "6200");
    press(&mut n, a, c, "10");
    assert!(asks_for(&mut n, sw, "chose-10.wav", ms(100)));
}

#[test]
fn an_invalid_choice_is_told_and_the_menu_asked_again() {
    let (mut n, sw, a, c) = dial(9, "6200");
    press(&mut n, a, c, "9");
    assert!(asks_for(&mut n, sw, "invalid.wav", ms(100)));
    // The invalid prompt, then the menu's again; a choice during it is taken.
    n.run_for(ms(1500));
    press(&mut n, a, c, "2");
    assert!(
        asks_for(&mut n, sw, "chose-02.wav", ms(100)),
        "{:?}",
        prompts(&mut n, sw)
    );
}

#[test]
fn silence_retries_the_menu_then_runs_its_fallback() {
    let (mut n, sw, a, c) = dial(10, "6200");
    // Prompt (1 s) and timeout (3 s), once more (retries = 1), then the fallback.
    assert!(!asks_for(&mut n, sw, "bye.wav", ms(7500)));
    assert!(asks_for(&mut n, sw, "bye.wav", secs(1)));
    assert!(!prompts(&mut n, sw).contains(&"invalid.wav".to_string()));
    assert!(n.run_until(secs(3), ended(a, c)));

    // Invalid choices count as tries too.
    let (mut n, sw, a, c) = dial(11, "6200");
    press(&mut n, a, c, "9");
    n.run_for(ms(2500));
    press(&mut n, a, c, "8");
    assert!(
        asks_for(&mut n, sw, "bye.wav", ms(100)),
        "{:?}",
        prompts(&mut n, sw)
    );
}

#[test]
fn say_plays_the_sound_set_and_text_through_the_speech_engine() {
    let (mut n, sw, a, c) = dial(12, "6300");
    assert!(n.run_until(secs(20), ended(a, c)));
    let d = |p: &str| format!("/snd/{p}.wav");
    assert_eq!(
        prompts(&mut n, sw),
        [
            d("digits/1"),
            d("digits/thousand"),
            d("digits/2"),
            d("digits/hundred"),
            d("digits/30"),
            d("digits/4"),
            d("digits/5"),
            d("digits/6"),
            d("letters/x"),
            "tts:Welcome to strowger".to_string(),
        ]
    );
    // A second more per prompt: the pieces played one after the other.
    assert!(n.elapsed() > secs(10), "{:?}", n.elapsed());
}

/// A digit typed while the menu's spoken prompt is still being rendered: the prompt is not
/// played once it arrives, the choice is taken at once.
#[test]
fn a_digit_during_a_slow_prompt_skips_it() {
    let mut n = Net::new(13);
    let sw = b2bua(&mut n, IVR);
    n.sw(sw).node().hold_speech();
    let a = n.ua(ALICE, "alice");
    n.agent(a).codecs = vec![0, 101];
    let c = n.invite(a, "sip:6400@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    assert!(asks_for(&mut n, sw, "tts:Press 2", ms(100)));
    press(&mut n, a, c, "2");
    n.run_for(secs(2));
    assert!(!prompts(&mut n, sw).contains(&"chose-02.wav".to_string()));
    n.sw(sw).node().release_speech();
    assert!(
        asks_for(&mut n, sw, "chose-02.wav", ms(100)),
        "{:?}",
        prompts(&mut n, sw)
    );
}

/// A value `say number` cannot say is logged, and the program goes on.
#[test]
fn say_of_what_is_not_a_number_is_logged_and_the_call_goes_on() {
    let (mut n, sw, _, _) = dial(14, "6500");
    assert!(asks_for(&mut n, sw, "after.wav", ms(100)));
    let logs = n.sw(sw).logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("say: nothing to say for \"alice\" as Number")),
        "{logs:?}"
    );
}
