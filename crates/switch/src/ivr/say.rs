//! What `say` plays: a value as the prompts of an Asterisk sound set name it (digits/2.wav,
//! digits/hundred.wav, letters/a.wav, ...), without the directory and `.wav`.

use crate::dialplan::SayAs;

/// The prompts that say `value` (digits, number or alpha; text goes to the speech engine).
/// A character the sound set has no prompt for is left out; a value that is not a number
/// says nothing as a number.
pub(crate) fn pieces(kind: SayAs, value: &str) -> Vec<String> {
    match kind {
        SayAs::Number => value.parse().map(number).unwrap_or_default(),
        SayAs::Digits => value.chars().filter_map(digit).collect(),
        SayAs::Alpha => value
            .chars()
            .filter_map(|c| digit(c).or_else(|| letter(c)))
            .collect(),
        SayAs::Text => Vec::new(),
    }
}

/// A number as it is spoken: up to 20 in one prompt, then tens and units, and hundreds,
/// thousands, millions and billions each before what is left: 1234 is "1 thousand 2 hundred
/// 30 4".
pub(crate) fn number(n: u64) -> Vec<String> {
    const UNITS: [(u64, &str); 4] = [
        (1_000_000_000, "billion"),
        (1_000_000, "million"),
        (1000, "thousand"),
        (100, "hundred"),
    ];
    let d = |n: u64| format!("digits/{n}");
    match n {
        0..=20 => vec![d(n)],
        21..=99 if n.is_multiple_of(10) => vec![d(n)],
        21..=99 => vec![d(n / 10 * 10), d(n % 10)],
        _ => {
            let (unit, name) = UNITS.into_iter().find(|(u, _)| n >= *u).unwrap_or(UNITS[3]);
            let mut v = number(n / unit);
            v.push(format!("digits/{name}"));
            if !n.is_multiple_of(unit) {
                v.extend(number(n % unit));
            }
            v
        }
    }
}

fn digit(c: char) -> Option<String> {
    match c {
        '0'..='9' => Some(format!("digits/{c}")),
        '*' => Some("digits/star".into()),
        '#' => Some("digits/pound".into()),
        _ => None,
    }
}

fn letter(c: char) -> Option<String> {
    let name = match c.to_ascii_lowercase() {
        c @ 'a'..='z' => return Some(format!("letters/{c}")),
        '.' => "dot",
        '-' => "dash",
        '@' => "at",
        '=' => "equals",
        '/' => "slash",
        '+' => "plus",
        ' ' => "space",
        _ => return None,
    };
    Some(format!("letters/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(kind: SayAs, value: &str) -> String {
        pieces(kind, value).join(" ")
    }

    #[test]
    fn numbers_are_said_as_spoken() {
        let n = |v| said(SayAs::Number, v);
        assert_eq!(
            n("1234"),
            "digits/1 digits/thousand digits/2 digits/hundred digits/30 digits/4"
        );
        assert_eq!(n("0"), "digits/0");
        assert_eq!(n("17"), "digits/17");
        assert_eq!(n("40"), "digits/40");
        assert_eq!(n("305"), "digits/3 digits/hundred digits/5");
        assert_eq!(n("1000"), "digits/1 digits/thousand");
        assert_eq!(n("2000017"), "digits/2 digits/million digits/17");
        assert_eq!(
            n("999999"),
            "digits/9 digits/hundred digits/90 digits/9 digits/thousand digits/9 digits/hundred digits/90 digits/9"
        );
        assert_eq!(n("3000000000"), "digits/3 digits/billion");
        assert_eq!(n("12a"), "", "not a number: nothing");
    }

    #[test]
    fn digits_and_letters_one_by_one() {
        assert_eq!(
            said(SayAs::Digits, "10*#"),
            "digits/1 digits/0 digits/star digits/pound"
        );
        assert_eq!(
            said(SayAs::Alpha, "Ab1.?"),
            "letters/a letters/b digits/1 letters/dot"
        );
        assert_eq!(said(SayAs::Text, "hello"), "");
    }
}
