//! Q.850 hangup causes and their SIP equivalents (RFC 3398 §7.2.4.1 and §8.2.6.1),
//! used by the `hangup` app and for the cause recorded in the CDR.

use std::fmt;

/// A Q.850 cause value (1–127).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cause(pub u8);

/// `(cause, name, final response to an unanswered INVITE)`; names follow the
/// common switch convention. Answered calls are always ended with BYE.
const CAUSES: [(u8, &str, u16); 32] = [
    (1, "unallocated_number", 404),
    (2, "no_route_transit_net", 404),
    (3, "no_route_destination", 404),
    // RFC 3398 maps 16 to BYE/CANCEL only; unanswered, it needs some final response.
    (16, "normal_clearing", 480),
    (17, "user_busy", 486),
    (18, "no_user_response", 408),
    (19, "no_answer", 480),
    (20, "subscriber_absent", 480),
    (21, "call_rejected", 403),
    (22, "number_changed", 410),
    (23, "redirection_to_new_destination", 410),
    // 25 and 63 are not in RFC 3398 §7.2.4.1, only in the reverse table (482/483, 405).
    (25, "exchange_routing_error", 483),
    (26, "non_selected_user_clearing", 404),
    (27, "destination_out_of_order", 502),
    (28, "invalid_number_format", 484),
    (29, "facility_rejected", 501),
    (31, "normal_unspecified", 480),
    (34, "normal_circuit_congestion", 503),
    (38, "network_out_of_order", 503),
    (41, "normal_temporary_failure", 503),
    (42, "switch_congestion", 503),
    (47, "resource_unavailable", 503),
    (55, "incoming_call_barred", 403),
    (57, "bearercapability_notauth", 403),
    (58, "bearercapability_notavail", 503),
    (63, "service_unavailable", 503),
    (65, "bearercapability_notimpl", 488),
    (79, "service_not_implemented", 501),
    (88, "incompatible_destination", 503),
    (102, "recovery_on_timer_expire", 504),
    (111, "protocol_error", 500),
    (127, "interworking", 500),
];

/// RFC 3398 §8.2.6.1: SIP final response → cause. 487 and 488/606 have no mapping
/// there ("by Warning header"); 16 and 65 are the usual choices.
const SIP_TO_CAUSE: [(u16, u8); 35] = [
    (400, 41),
    (401, 21),
    (402, 21),
    (403, 21),
    (404, 1),
    (405, 63),
    (406, 79),
    (407, 21),
    (408, 102),
    (410, 22),
    (413, 127),
    (414, 127),
    (415, 79),
    (416, 127),
    (420, 127),
    (421, 127),
    (423, 127),
    (480, 18),
    (481, 41),
    (482, 25),
    (483, 25),
    (484, 28),
    (485, 1),
    (486, 17),
    (487, 16),
    (488, 65),
    (500, 41),
    (501, 79),
    (502, 38),
    (503, 41),
    (504, 102),
    (505, 127),
    (513, 127),
    (600, 17),
    (603, 21),
];

impl Cause {
    pub const NORMAL_CLEARING: Cause = Cause(16);
    pub const UNALLOCATED_NUMBER: Cause = Cause(1);

    /// Parses a cause number or name (case-insensitive), e.g. `17` or `user_busy`.
    /// Only causes with a known SIP mapping are accepted.
    pub fn parse(s: &str) -> Option<Cause> {
        CAUSES
            .iter()
            .find(|(code, name, _)| name.eq_ignore_ascii_case(s) || s.parse() == Ok(*code))
            .map(|(code, ..)| Cause(*code))
    }

    pub fn name(self) -> Option<&'static str> {
        self.entry().map(|(_, name, _)| *name)
    }

    /// The final response for an INVITE not yet answered (RFC 3398 §7.2.4.1);
    /// causes outside the table count as interworking (500).
    pub fn sip_status(self) -> u16 {
        self.entry().map_or(500, |(.., status)| *status)
    }

    /// The cause for a SIP final response (RFC 3398 §8.2.6.1): 2xx is normal
    /// clearing, 604 as 404, 606 as 488, anything else unlisted interworking.
    pub fn from_sip_status(status: u16) -> Cause {
        let status = match status {
            604 => 404,
            606 => 488,
            s => s,
        };
        if (200..300).contains(&status) {
            return Cause::NORMAL_CLEARING;
        }
        SIP_TO_CAUSE
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(Cause(127), |(_, c)| Cause(*c))
    }

    /// All names the `hangup` app accepts, for error messages.
    pub(crate) fn names() -> impl Iterator<Item = &'static str> {
        CAUSES.iter().map(|(_, name, _)| *name)
    }

    fn entry(self) -> Option<&'static (u8, &'static str, u16)> {
        CAUSES.iter().find(|(code, ..)| *code == self.0)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{} ({name})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}
