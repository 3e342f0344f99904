//! DTMF carried in SIP INFO bodies: `application/dtmf-relay` (`Signal=5\r\nDuration=160`) and
//! `application/dtmf` (a bare `5`), the two legacy formats phones and trunks send (RFC 6086
//! §9.2 lets them go on without an Info-Package). The parser is total: any bytes give a digit
//! or an error the caller answers with 415 or 400.

/// The body type strowger sends digits in, and lists first when it refuses another.
pub const DTMF_RELAY: &str = "application/dtmf-relay";
/// The bare-digit body type.
pub const DTMF: &str = "application/dtmf";
/// Duration assumed when a body does not give one (ms).
pub const DEFAULT_DURATION_MS: u32 = 100;
/// Longest duration taken as given (ms); longer ones are clamped.
const MAX_DURATION_MS: u32 = 10_000;

/// A digit read from an INFO body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InfoDigit {
    /// `0`-`9`, `*`, `#`, `A`-`D`, or `!` for flash.
    pub digit: char,
    pub duration_ms: u32,
}

/// Why an INFO body gave no digit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InfoError {
    /// Not a DTMF body type: 415 Unsupported Media Type, with an Accept of ours.
    UnsupportedType,
    /// A DTMF body type with nothing readable in it: 400 Bad Request.
    Malformed,
}

impl InfoError {
    /// The status and reason phrase RFC 6086 §4.2.2 answers this with.
    pub fn status(self) -> (u16, &'static str) {
        match self {
            InfoError::UnsupportedType => (415, "Unsupported Media Type"),
            InfoError::Malformed => (400, "Bad Request"),
        }
    }
}

/// The digit in an INFO body of `content_type` (a header value, parameters allowed).
pub fn parse(content_type: &str, body: &[u8]) -> Result<InfoDigit, InfoError> {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let text = std::str::from_utf8(body).map_err(|_| InfoError::Malformed)?;
    match mime.as_str() {
        DTMF_RELAY => relay(text),
        DTMF => signal(text.trim()).map(|digit| InfoDigit {
            digit,
            duration_ms: DEFAULT_DURATION_MS,
        }),
        _ => Err(InfoError::UnsupportedType),
    }
}

/// `key=value` lines; `Signal` is required, `Duration` optional, other keys ignored.
fn relay(text: &str) -> Result<InfoDigit, InfoError> {
    let mut digit = None;
    let mut duration_ms = DEFAULT_DURATION_MS;
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim();
        match key.trim().to_ascii_lowercase().as_str() {
            "signal" => digit = Some(signal(value)?),
            "duration" => {
                duration_ms = value
                    .parse::<u64>()
                    .map_err(|_| InfoError::Malformed)?
                    .clamp(1, u64::from(MAX_DURATION_MS)) as u32
            }
            _ => {}
        }
    }
    let digit = digit.ok_or(InfoError::Malformed)?;
    Ok(InfoDigit { digit, duration_ms })
}

/// A digit character, or its RFC 4733 event code (`10` for `*`, as some gateways send).
fn signal(value: &str) -> Result<char, InfoError> {
    let mut chars = value.chars();
    let one = match (chars.next(), chars.next()) {
        (Some(c), None) => Some(c.to_ascii_uppercase()),
        _ => None,
    };
    match one {
        Some(c @ ('0'..='9' | '*' | '#' | 'A'..='D' | '!')) => Ok(c),
        _ => match value.parse::<u8>() {
            Ok(10) => Ok('*'),
            Ok(11) => Ok('#'),
            Ok(n @ 12..=15) => Ok((b'A' + n - 12) as char),
            Ok(16) => Ok('!'),
            _ => Err(InfoError::Malformed),
        },
    }
}

/// The `application/dtmf-relay` body that sends `digit` for `duration_ms`.
pub fn relay_body(digit: char, duration_ms: u32) -> String {
    format!("Signal={digit}\r\nDuration={duration_ms}\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digit(ct: &str, body: &str) -> Result<(char, u32), InfoError> {
        parse(ct, body.as_bytes()).map(|d| (d.digit, d.duration_ms))
    }

    #[test]
    fn dtmf_relay_bodies() {
        assert_eq!(
            digit(DTMF_RELAY, "Signal=5\r\nDuration=160\r\n"),
            Ok(('5', 160))
        );
        assert_eq!(
            digit(
                "Application/DTMF-Relay; charset=x",
                "signal = #\nduration= 250"
            ),
            Ok(('#', 250))
        );
        assert_eq!(digit(DTMF_RELAY, "Signal=*"), Ok(('*', 100)));
        assert_eq!(digit(DTMF_RELAY, "Signal=11\r\nDuration=0"), Ok(('#', 1)));
        assert_eq!(digit(DTMF_RELAY, "Signal=d"), Ok(('D', 100)));
        assert_eq!(
            digit(DTMF_RELAY, "Signal=1\r\nDuration=99999999999"),
            Ok(('1', MAX_DURATION_MS))
        );
    }

    #[test]
    fn dtmf_bodies() {
        assert_eq!(digit(DTMF, "5"), Ok(('5', DEFAULT_DURATION_MS)));
        assert_eq!(digit("application/dtmf", " 10\r\n"), Ok(('*', 100)));
        assert_eq!(digit(DTMF, "b"), Ok(('B', 100)));
    }

    #[test]
    fn unreadable_dtmf_bodies_are_malformed() {
        for body in [
            "",
            "Duration=100",
            "Signal=",
            "Signal=55",
            "Signal=E",
            "Signal=5\r\nDuration=-3",
            "Signal=5\r\nDuration=x",
            "Signal=17",
        ] {
            assert_eq!(
                digit(DTMF_RELAY, body),
                Err(InfoError::Malformed),
                "{body:?}"
            );
        }
        for body in ["", "55", "x", "Signal=5"] {
            assert_eq!(digit(DTMF, body), Err(InfoError::Malformed), "{body:?}");
        }
        assert_eq!(parse(DTMF, &[0xff, 0xfe]), Err(InfoError::Malformed));
    }

    #[test]
    fn other_types_are_unsupported() {
        for ct in ["application/sdp", "text/plain", "", ";"] {
            assert_eq!(
                digit(ct, "Signal=5"),
                Err(InfoError::UnsupportedType),
                "{ct}"
            );
        }
        assert_eq!(InfoError::UnsupportedType.status().0, 415);
        assert_eq!(InfoError::Malformed.status().0, 400);
    }

    #[test]
    fn what_we_send_reads_back() {
        assert_eq!(digit(DTMF_RELAY, &relay_body('#', 160)), Ok(('#', 160)));
    }
}
