//! The dialplan: named contexts of ordered rules. The first rule whose pattern
//! matches the dialled extension (and caller, if given) supplies the steps.
//! Steps are expanded one at a time by [`Route::next_step`] so that `set` affects
//! the steps after it.

pub mod cause;
pub mod cond;
pub mod groups;
mod step;
mod vars;

use std::collections::BTreeMap;
use std::sync::Arc;

use regex::Regex;

pub use cause::Cause;
pub use groups::{RingGroup, Strategy};
pub(crate) use step::dialable;
pub(crate) use step::MAX_READ_DIGITS;
pub use step::{Audio, SayAs, Step, Tone};
pub use vars::{Vars, BUILTIN_VARS, ENGINE_VARS};

use crate::config::raw::{RawDialplan, RawRingGroup, RawRule};
use crate::config::Diagnostics;

#[derive(Clone, Debug)]
pub struct Dialplan {
    default_context: String,
    contexts: BTreeMap<String, Vec<Rule>>,
    /// Each context's `trunks`: the trunks its calls may dial out through.
    trunks: BTreeMap<String, Vec<String>>,
    /// `[vars]`: visible to every call, overridden by call variables.
    globals: Arc<Vars>,
    /// The rules of every context that start with `retrieve`, `pickup` or `conference`
    /// (`rendezvous`).
    rendezvous: Vec<Rule>,
    /// `dialplan.timezone`: where `goto ... time="..."` reads the wall clock.
    timezone: jiff::tz::TimeZone,
    /// `[ring_groups.NAME]`, dialled as `group/NAME`.
    ring_groups: Arc<BTreeMap<String, RingGroup>>,
}

#[derive(Clone, Debug)]
struct Rule {
    exten: Pattern,
    caller: Option<Regex>,
    /// Unexpanded; shared with the routes in progress.
    steps: Arc<[Step]>,
}

#[derive(Clone, Debug)]
enum Pattern {
    Exact(String),
    /// `""` matches every extension.
    Prefix(String),
    /// Searched as written (anchor with `^`/`$`); captures become `${1}`, `${name}`.
    Regex(Regex),
}

/// A matched rule being executed. Variables resolve from the call's own [`Vars`]
/// first, then this rule's regex captures, then `[vars]` globals.
#[derive(Clone, Debug)]
pub struct Route {
    steps: Arc<[Step]>,
    next: usize,
    captures: Vars,
    globals: Arc<Vars>,
}

impl Dialplan {
    /// The context calls start in.
    pub fn default_context(&self) -> &str {
        &self.default_context
    }

    /// Whether the dialplan defines context `name`.
    pub fn has_context(&self, name: &str) -> bool {
        self.contexts.contains_key(name)
    }

    /// Whether calls in `context` may dial out through trunk `trunk` (the context lists it).
    pub fn allows_trunk(&self, context: &str, trunk: &str) -> bool {
        self.trunks
            .get(context)
            .is_some_and(|t| t.iter().any(|n| n == trunk))
    }

    /// The first rule of `context` that matches every extension (a `prefix = ""`, or a regex
    /// that matches whatever is dialled), if any.
    pub fn catch_all(&self, context: &str) -> Option<usize> {
        const PROBES: [&str; 8] = ["", "0", "9", "1001", "2000", "s", "+15551234567", "0044203"];
        self.contexts
            .get(context)?
            .iter()
            .position(|r| match &r.exten {
                Pattern::Prefix(p) => p.is_empty(),
                Pattern::Regex(re) => PROBES.iter().all(|p| re.is_match(p)),
                Pattern::Exact(_) => false,
            })
    }

    /// The time zone of `time=` conditions.
    pub fn timezone(&self) -> &jiff::tz::TimeZone {
        &self.timezone
    }

    pub fn ring_group(&self, name: &str) -> Option<&RingGroup> {
        self.ring_groups.get(name)
    }

    /// Sets a `[vars]` global (the `--var NAME=VALUE` command-line override).
    pub fn set_global(&mut self, name: &str, value: &str) {
        Arc::make_mut(&mut self.globals).set(name, value);
    }

    /// Finds the first rule in `context` matching `exten` and `vars["CALLER"]`.
    pub fn route(&self, context: &str, exten: &str, vars: &Vars) -> Option<Route> {
        let caller = vars.get("CALLER").unwrap_or_default();
        self.contexts
            .get(context)?
            .iter()
            .find_map(|rule| self.matched(rule, exten, caller))
    }

    /// The retrieve or pickup step a new call to `exten` would start with in some context
    /// (rules whose first step other than `set` is one), expanded: what tells a worker which
    /// call it must join before it knows which context the caller's credentials give it.
    pub fn rendezvous(&self, exten: &str, vars: &Vars) -> Option<Step> {
        let caller = vars.get("CALLER").unwrap_or_default();
        self.rendezvous.iter().find_map(|rule| {
            let mut route = self.matched(rule, exten, caller)?;
            let mut vars = vars.clone();
            std::iter::from_fn(|| route.next(&mut vars))
                .find(|s| !matches!(s, Step::Set { .. }))
                .filter(|s| {
                    matches!(
                        s,
                        Step::Retrieve { .. } | Step::Pickup { .. } | Step::Conference { .. }
                    )
                })
        })
    }

    /// Whether some rule starts with a rendezvous step (calls then go on the ring board).
    pub fn has_pickup(&self) -> bool {
        self.rendezvous
            .iter()
            .any(|r| r.steps.iter().any(|s| matches!(s, Step::Pickup { .. })))
    }

    /// Whether some rule starts with `conference`: new calls may then have to meet on the
    /// worker of their room.
    pub fn has_conference(&self) -> bool {
        self.rendezvous
            .iter()
            .any(|r| r.steps.iter().any(|s| matches!(s, Step::Conference { .. })))
    }

    /// `rule` run for `exten` dialled by `caller`, if it matches.
    fn matched(&self, rule: &Rule, exten: &str, caller: &str) -> Option<Route> {
        if rule.caller.as_ref().is_some_and(|re| !re.is_match(caller)) {
            return None;
        }
        let mut captures = Vars::new();
        match &rule.exten {
            Pattern::Exact(e) if e == exten => {}
            Pattern::Prefix(p) if exten.starts_with(p.as_str()) => {}
            Pattern::Regex(re) => {
                let found = re.captures(exten)?;
                for (i, name) in re.capture_names().enumerate() {
                    let value = found.get(i).map_or("", |m| m.as_str());
                    captures.set(i.to_string(), value);
                    if let Some(name) = name {
                        captures.set(name, value);
                    }
                }
            }
            _ => return None,
        }
        Some(Route {
            steps: rule.steps.clone(),
            next: 0,
            captures,
            globals: self.globals.clone(),
        })
    }

    /// Builds the dialplan from its file form, reporting every problem to `d`.
    pub(crate) fn compile(
        raw: &RawDialplan,
        globals: BTreeMap<String, String>,
        ring_groups: &BTreeMap<String, RawRingGroup>,
        d: &mut Diagnostics,
    ) -> Dialplan {
        let timezone = jiff::tz::TimeZone::get(&raw.timezone).unwrap_or_else(|_| {
            d.error(
                "dialplan.timezone",
                format_args!(
                    "unknown time zone {:?} — use an IANA name such as \"Europe/Berlin\" (the system's time zone database), or \"UTC\"",
                    raw.timezone
                ),
            );
            jiff::tz::TimeZone::UTC
        });
        let ring_groups = groups::compile(ring_groups, d);
        if !raw.contexts.contains_key(&raw.default_context) {
            d.error(
                "dialplan.default_context",
                format_args!(
                    "context {:?} is not defined in [dialplan.contexts]",
                    raw.default_context
                ),
            );
        }
        let globals: Arc<Vars> = Arc::new(globals.into_iter().collect());
        let contexts: BTreeMap<String, Vec<Rule>> = raw
            .contexts
            .iter()
            .map(|(name, context)| {
                let rules = context.rules.iter().enumerate();
                let rules = rules.filter_map(|(i, rule)| {
                    let key = format!("dialplan.contexts.{name}.rules[{i}]");
                    compile_rule(rule, &key, raw, &ring_groups, &globals, d)
                });
                (name.clone(), rules.collect())
            })
            .collect();
        let trunks = raw
            .contexts
            .iter()
            .map(|(name, c)| (name.clone(), c.trunks.clone()))
            .collect();
        let rendezvous = contexts
            .values()
            .flatten()
            .filter(|r: &&Rule| {
                let first = r.steps.iter().find(|s| !matches!(s, Step::Set { .. }));
                matches!(
                    first,
                    Some(Step::Retrieve { .. } | Step::Pickup { .. } | Step::Conference { .. })
                )
            })
            .cloned()
            .collect();
        Dialplan {
            default_context: raw.default_context.clone(),
            contexts,
            trunks,
            globals,
            rendezvous,
            timezone,
            ring_groups: Arc::new(ring_groups),
        }
    }
}

impl Route {
    /// This route with no step left to run (a call that only waits, its end decided elsewhere).
    pub fn done(&self) -> Route {
        Route {
            next: self.steps.len(),
            ..self.clone()
        }
    }

    /// The next step with variables expanded, or `None` after the last one (the
    /// engine then hangs up normally). `vars` is the call's scope: `Set` writes to
    /// it, and the engine may add its own (e.g. a bridge status) between steps.
    /// On `Goto`, pass the same `vars` to [`Dialplan::route`].
    pub fn next(&mut self, vars: &mut Vars) -> Option<Step> {
        let step = self.expand(self.steps.get(self.next)?, vars);
        self.next += 1;
        if let Step::Set { name, value } = &step {
            vars.set(name.clone(), value.clone());
        }
        Some(step)
    }

    /// `step` with variables expanded in this route's scope (a menu's choices run in it).
    pub fn expand(&self, step: &Step, vars: &Vars) -> Step {
        step.expand(|name| {
            vars.get(name)
                .or_else(|| self.captures.get(name))
                .or_else(|| self.globals.get(name))
        })
    }
}

fn regex(d: &mut Diagnostics, key: &str, pattern: &str) -> Option<Regex> {
    Regex::new(pattern)
        .map_err(|e| {
            // The crate's message draws a caret diagram; its last line is the reason.
            let text = e.to_string();
            let reason = text
                .lines()
                .last()
                .unwrap_or_default()
                .trim_start_matches("error: ")
                .to_owned();
            d.error(key, format_args!("invalid regex {pattern:?}: {reason}"));
        })
        .ok()
}

fn compile_rule(
    rule: &RawRule,
    key: &str,
    raw: &RawDialplan,
    ring_groups: &BTreeMap<String, RingGroup>,
    globals: &Vars,
    d: &mut Diagnostics,
) -> Option<Rule> {
    let exten = match (&rule.exten, &rule.prefix, &rule.regex) {
        (Some(e), None, None) => Some(Pattern::Exact(e.clone())),
        (None, Some(p), None) => Some(Pattern::Prefix(p.clone())),
        (None, None, Some(r)) => regex(d, &format!("{key}.regex"), r).map(Pattern::Regex),
        _ => {
            d.error(
                key,
                "needs exactly one of exten = \"...\", prefix = \"...\" or regex = \"...\"",
            );
            None
        }
    };
    let caller = match &rule.caller {
        Some(c) => Some(regex(d, &format!("{key}.caller"), c)?),
        None => None,
    };
    if rule.steps.is_empty() {
        d.error(
            &format!("{key}.steps"),
            "needs at least one step, e.g. [\"answer\", \"echo\"]",
        );
    }
    // Names a step may use: built-ins, globals, captures, and earlier `set`s.
    let mut known: Vec<String> = BUILTIN_VARS
        .iter()
        .chain(&ENGINE_VARS)
        .map(|v| v.to_string())
        .collect();
    if let Some(Pattern::Regex(re)) = &exten {
        known.extend((0..re.captures_len()).map(|i| i.to_string()));
        known.extend(re.capture_names().flatten().map(str::to_owned));
    }
    let mut steps = Vec::new();
    for (i, text) in rule.steps.iter().enumerate() {
        let step_key = format!("{key}.steps[{i}]");
        check_vars(d, &step_key, text, &known, globals);
        match Step::parse(text) {
            Ok(Step::Goto { context, .. }) if !raw.contexts.contains_key(&context) => {
                let names: Vec<_> = raw.contexts.keys().map(String::as_str).collect();
                d.error(
                    &step_key,
                    format_args!(
                        "goto: no context {context:?} — defined: {}",
                        names.join(", ")
                    ),
                );
            }
            Ok(step) => {
                match &step {
                    Step::Set { name, .. } | Step::Read { var: name, .. } => {
                        known.push(name.clone())
                    }
                    Step::Bridge { uri, .. } => {
                        if let Some(problem) = bridge_problem(uri, ring_groups) {
                            d.error(&step_key, format_args!("bridge: {problem}"));
                        }
                    }
                    _ => {}
                }
                steps.push(step);
            }
            Err(e) => d.at(&step_key, e.offset, e.message, false),
        }
    }
    Some(Rule {
        exten: exten?,
        caller,
        steps: steps.into(),
    })
}

/// What is wrong with a bridge target known at load: a `group/` no `[ring_groups]` defines, or
/// a member of an `&` list that cannot ring with others. Targets with variables are checked
/// when dialled.
fn bridge_problem(uri: &str, ring_groups: &BTreeMap<String, RingGroup>) -> Option<String> {
    let members: Vec<&str> = uri.split('&').collect();
    for m in members.iter().filter(|m| !m.contains("${")) {
        if let Some(name) = m.strip_prefix("group/") {
            if !ring_groups.contains_key(name) {
                let names: Vec<_> = ring_groups.keys().map(String::as_str).collect();
                return Some(format!(
                    "no ring group {name:?} — define [ring_groups.{name}] (defined: {})",
                    names.join(", ")
                ));
            }
            if members.len() > 1 {
                return Some(format!(
                    "{m:?} in a list: list the group's members instead ({})",
                    groups::MEMBER_HELP
                ));
            }
        } else if members.len() > 1 && !groups::member_kind_ok(m) {
            return Some(format!("{m:?} in a list: {}", groups::MEMBER_HELP));
        }
    }
    None
}

/// Warns about `${name}` references that would always expand to "".
fn check_vars(d: &mut Diagnostics, key: &str, text: &str, known: &[String], globals: &Vars) {
    match vars::segments(text) {
        Err(offset) => d.at(
            key,
            offset,
            "bad variable reference — expected ${NAME} with letters, digits and _",
            false,
        ),
        Ok(segments) => {
            for segment in segments {
                if let vars::Segment::Var { name, offset } = segment {
                    if globals.get(name).is_none() && !known.iter().any(|k| k == name) {
                        d.at(
                            key,
                            offset,
                            format_args!(
                                "unknown variable ${{{name}}} expands to \"\" — define it in [vars] or set it in an earlier step"
                            ),
                            true,
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
