//! What a waiting caller is told: its position and expected wait, as a list of the prompts
//! Asterisk's sound packages name (queue-thereare.wav, digits/2.wav, ...).

use std::time::Duration;

/// The prompts of announcements, in a queue's `sounds_dir` (Asterisk's names, .wav).
const PROMPTS: [&str; 7] = [
    "queue-youarenext",
    "queue-thereare",
    "queue-callswaiting",
    "queue-holdtime",
    "queue-less-than",
    "queue-minute",
    "queue-minutes",
];

/// Every prompt an announcement may play (names in `sounds_dir`, without .wav).
pub(super) fn prompts() -> impl Iterator<Item = String> {
    let digits = (0..=20)
        .chain((30..=90).step_by(10))
        .map(|n| format!("digits/{n}"));
    PROMPTS
        .iter()
        .map(|p| p.to_string())
        .chain(digits)
        .chain(["digits/hundred".to_string()])
}

/// The prompts (names in `sounds_dir`, without .wav) telling a caller its position and
/// expected wait: "you are next" or "there are N calls waiting", then "the estimated hold time
/// is less than 1 minute" or "N minutes" once a wait can be estimated.
pub(super) fn announcement(position: usize, expected: Option<Duration>) -> Vec<String> {
    let mut out = Vec::new();
    if position <= 1 {
        out.push("queue-youarenext".to_string());
    } else {
        out.push("queue-thereare".to_string());
        out.extend(number(position));
        out.push("queue-callswaiting".to_string());
    }
    if let Some(e) = expected {
        out.push("queue-holdtime".to_string());
        let minutes = (e.as_secs() + 30) / 60;
        if minutes < 1 {
            out.push("queue-less-than".to_string());
            out.extend(number(1));
            out.push("queue-minute".to_string());
        } else {
            out.extend(number(minutes as usize));
            let unit = if minutes == 1 { "minute" } else { "minutes" };
            out.push(format!("queue-{unit}"));
        }
    }
    out
}

/// A number as the digits/ prompts say it: up to 20 in one, then tens and units, hundreds;
/// from 1000 on digit by digit.
pub(crate) fn number(n: usize) -> Vec<String> {
    let d = |n: usize| format!("digits/{n}");
    match n {
        0..=20 => vec![d(n)],
        21..=99 if n.is_multiple_of(10) => vec![d(n)],
        21..=99 => vec![d(n / 10 * 10), d(n % 10)],
        100..=999 => {
            let mut v = vec![d(n / 100), "digits/hundred".to_string()];
            if !n.is_multiple_of(100) {
                v.extend(number(n % 100));
            }
            v
        }
        _ => n
            .to_string()
            .bytes()
            .map(|b| d(usize::from(b - b'0')))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_say_position_and_wait() {
        assert_eq!(announcement(1, None), ["queue-youarenext"]);
        assert_eq!(
            announcement(23, Some(Duration::from_secs(130))),
            [
                "queue-thereare",
                "digits/20",
                "digits/3",
                "queue-callswaiting",
                "queue-holdtime",
                "digits/2",
                "queue-minutes"
            ]
        );
        assert_eq!(
            announcement(2, Some(Duration::from_secs(20)))[3..],
            [
                "queue-holdtime",
                "queue-less-than",
                "digits/1",
                "queue-minute"
            ]
        );
        assert_eq!(number(305), ["digits/3", "digits/hundred", "digits/5"]);
        // Whatever an announcement says is among the prompts loaded ahead.
        let all: Vec<String> = prompts().collect();
        for n in (1..1000).chain([1234, 99_999]) {
            let said = announcement(n, Some(Duration::from_secs(n as u64 * 7)));
            assert!(said.iter().all(|p| all.contains(p)), "{n}: {said:?}");
        }
        assert_eq!(
            number(1200),
            ["digits/1", "digits/2", "digits/0", "digits/0"]
        );
    }
}
