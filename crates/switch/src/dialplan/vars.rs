//! Dialplan variables and `${name}` expansion.

use std::collections::BTreeMap;

/// Variables the call engine supplies for every call.
pub const BUILTIN_VARS: [&str; 4] = ["EXTEN", "CALLER", "CALLID", "DATA_DIR"];

/// Variables the call engine sets as the call goes on: how the last `bridge` ended (ANSWER,
/// BUSY, NOANSWER, CONGESTION, CHANUNAVAIL) and its SIP status, and the user whose forwarding
/// sent the call where it is.
pub const ENGINE_VARS: [&str; 3] = ["DIALSTATUS", "BRIDGE_STATUS", "FORWARDED_FROM"];

/// A set of variables: a call's own (built-ins and `set` results), `[vars]` globals,
/// or the captures of a regex match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vars(BTreeMap<String, String>);

impl Vars {
    pub fn new() -> Vars {
        Vars::default()
    }

    /// The built-in variables of one call: dialled extension, From user, Call-ID, data directory.
    pub fn for_call(exten: &str, caller: &str, call_id: &str, data_dir: &str) -> Vars {
        let mut vars = Vars::new();
        for (name, value) in BUILTIN_VARS
            .into_iter()
            .zip([exten, caller, call_id, data_dir])
        {
            vars.set(name, value);
        }
        vars
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.insert(name.into(), value.into());
    }

    /// Replaces each `${name}` with its value; see [`expand`].
    pub fn expand(&self, template: &str) -> String {
        expand(template, |name| self.get(name))
    }
}

/// Replaces each `${name}` with `lookup(name)`; unknown names become "" (load-time
/// validation has already warned about them).
pub(crate) fn expand<'a>(template: &str, lookup: impl Fn(&str) -> Option<&'a str>) -> String {
    let Ok(segments) = segments(template) else {
        return template.to_owned();
    };
    segments
        .iter()
        .map(|s| match s {
            Segment::Text(text) => text,
            Segment::Var { name, .. } => lookup(name).unwrap_or_default(),
        })
        .collect()
}

impl FromIterator<(String, String)> for Vars {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Vars {
        Vars(iter.into_iter().collect())
    }
}

pub(crate) enum Segment<'a> {
    Text(&'a str),
    /// `offset` is where `${` starts.
    Var {
        name: &'a str,
        offset: usize,
    },
}

/// Splits a template into text and `${name}` references; `Err(offset)` marks a `${`
/// that is unterminated or holds something other than letters, digits and `_`.
pub(crate) fn segments(template: &str) -> Result<Vec<Segment<'_>>, usize> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        let offset = template.len() - rest.len() + start;
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or(offset)?;
        let name = &after[..end];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(offset);
        }
        out.push(Segment::Text(&rest[..start]));
        out.push(Segment::Var { name, offset });
        rest = &after[end + 1..];
    }
    out.push(Segment::Text(rest));
    Ok(out)
}
