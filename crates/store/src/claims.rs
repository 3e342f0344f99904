//! What one node of a cluster holds for all of them, for a while: a conference room (its
//! members meet on the node that hosts it), a call queue (its callers wait on one node), a park
//! slot (the parked call lives on one node). A claim set is one value in the backend (a hash in
//! Redis: one key, so one script serves a Redis Cluster); each name in it has a holder and the
//! unix second its claim lapses, so a node that dies gives its claims up by itself once they
//! lapse. Beside the claims, the rosters every node reads alike: a queue's agents logged in or
//! out by hand (one hash per queue), kept until changed.

use crate::Result;
use std::collections::HashMap;
use std::sync::Mutex;

/// The outcome of [`Claims::claim`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// This name is now the caller's, until the claim's lifetime passes (or is renewed).
    Taken(String),
    /// Every name asked for is someone else's; the first one's holder.
    Held(String),
}

/// Names claimed by nodes, each for a lifetime. Implemented by the store several nodes share
/// atomically (Redis); the local store has none (one node holds everything anyway).
pub trait Claims: Send + Sync {
    /// Claims the first of `names` in `set` that nobody holds or `holder` holds already (then
    /// its lifetime is renewed), for `ttl_s` seconds from `now` (unix seconds).
    fn claim(
        &self,
        set: &str,
        names: &[String],
        holder: &str,
        now: u64,
        ttl_s: u64,
    ) -> Result<Claim>;
    /// Gives `name` up if `holder` still holds it.
    fn release(&self, set: &str, name: &str, holder: &str) -> Result<()>;
    /// Who holds `name` at `now`.
    fn holder(&self, set: &str, name: &str, now: u64) -> Result<Option<String>>;
    /// Writes `member` into `roster` as logged in (`on`) or out.
    fn enrol(&self, roster: &str, member: &str, on: bool) -> Result<()>;
    /// Every member of `roster` written by `enrol`, with its last state, by name.
    fn roster(&self, roster: &str) -> Result<Vec<(String, bool)>>;
}

/// Claims in this process's memory: for stores kept in memory that stand for a shared one
/// (several switches in one process, as the flow tests run them).
#[derive(Default)]
pub struct LocalClaims {
    /// (set, name) → (lapses at, holder).
    held: Mutex<HashMap<(String, String), (u64, String)>>,
    /// roster → member → logged in.
    rosters: Mutex<HashMap<String, std::collections::BTreeMap<String, bool>>>,
}

impl Claims for LocalClaims {
    fn claim(
        &self,
        set: &str,
        names: &[String],
        holder: &str,
        now: u64,
        ttl_s: u64,
    ) -> Result<Claim> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|_, (until, _)| *until > now);
        let free = names.iter().find(|n| {
            held.get(&(set.to_string(), n.to_string()))
                .is_none_or(|(_, h)| h == holder)
        });
        let Some(name) = free else {
            let first = names.first().map(|n| (set.to_string(), n.clone()));
            let by = first.and_then(|k| held.get(&k)).map(|(_, h)| h.clone());
            return Ok(Claim::Held(by.unwrap_or_default()));
        };
        let entry = (now + ttl_s, holder.to_string());
        held.insert((set.to_string(), name.clone()), entry);
        Ok(Claim::Taken(name.clone()))
    }

    fn release(&self, set: &str, name: &str, holder: &str) -> Result<()> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let k = (set.to_string(), name.to_string());
        if held.get(&k).is_some_and(|(_, h)| h == holder) {
            held.remove(&k);
        }
        Ok(())
    }

    fn holder(&self, set: &str, name: &str, now: u64) -> Result<Option<String>> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let k = (set.to_string(), name.to_string());
        Ok(held
            .get(&k)
            .filter(|(until, _)| *until > now)
            .map(|(_, h)| h.clone()))
    }

    fn enrol(&self, roster: &str, member: &str, on: bool) -> Result<()> {
        let mut r = self.rosters.lock().unwrap_or_else(|e| e.into_inner());
        let members = r.entry(roster.to_string()).or_default();
        members.insert(member.to_string(), on);
        Ok(())
    }

    fn roster(&self, roster: &str) -> Result<Vec<(String, bool)>> {
        let r = self.rosters.lock().unwrap_or_else(|e| e.into_inner());
        let members = r.get(roster).into_iter().flatten();
        Ok(members.map(|(m, &on)| (m.clone(), on)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn first_free_name_is_taken_renewed_by_its_holder_and_lapses() {
        let c = LocalClaims::default();
        let slots = names(&["701", "702"]);
        let taken = |n: &str| Ok(Claim::Taken(n.to_string()));
        assert_eq!(c.claim("park", &slots, "a", 100, 10), taken("701"));
        assert_eq!(c.claim("park", &slots, "b", 100, 10), taken("702"));
        assert_eq!(
            c.claim("park", &slots, "c", 105, 10),
            Ok(Claim::Held("a".into()))
        );
        assert_eq!(c.claim("park", &slots[..1], "a", 108, 10), taken("701"));
        assert_eq!(
            c.holder("park", "701", 117),
            Ok(Some("a".into())),
            "renewed"
        );
        assert_eq!(c.holder("park", "702", 117), Ok(None), "lapsed");
        c.release("park", "701", "b").unwrap();
        assert_eq!(
            c.holder("park", "701", 110),
            Ok(Some("a".into())),
            "not b's"
        );
        c.release("park", "701", "a").unwrap();
        assert_eq!(c.holder("park", "701", 110), Ok(None));
        assert_eq!(c.claim("other", &slots, "c", 110, 10), taken("701"));
    }

    #[test]
    fn a_roster_keeps_each_members_last_state() {
        let c = LocalClaims::default();
        assert_eq!(c.roster("q"), Ok(vec![]));
        c.enrol("q", "1002", true).unwrap();
        c.enrol("q", "1001", true).unwrap();
        c.enrol("q", "1002", false).unwrap();
        c.enrol("other", "1003", true).unwrap();
        let want = vec![("1001".to_string(), true), ("1002".to_string(), false)];
        assert_eq!(c.roster("q"), Ok(want));
    }
}
