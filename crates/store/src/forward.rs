//! Per-user call forwarding, kept with the user's credentials so every backend stores it and
//! every instance sharing the backend honours it.

use serde::{Deserialize, Serialize};

/// When a call to the user goes elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// Every call, without ringing the user.
    Always,
    /// When the user's phones answer busy.
    Busy,
    /// When no phone answers in time, or none is registered.
    NoAnswer,
}

impl Forward {
    pub const ALL: [Forward; 3] = [Forward::Always, Forward::Busy, Forward::NoAnswer];

    /// The name the dialplan's `forward` step uses.
    pub fn name(self) -> &'static str {
        match self {
            Forward::Always => "always",
            Forward::Busy => "busy",
            Forward::NoAnswer => "noanswer",
        }
    }

    pub fn from_name(name: &str) -> Option<Forward> {
        Forward::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// A user's forward targets: numbers dialled through the context of the forwarded call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forwarding {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub always: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noanswer: Option<String>,
}

impl Forwarding {
    pub fn is_empty(&self) -> bool {
        self == &Forwarding::default()
    }

    pub fn target(&self, kind: Forward) -> Option<&str> {
        self.slot(kind).as_deref()
    }

    /// Sets (Some) or clears (None) one kind of forwarding.
    pub fn set(&mut self, kind: Forward, target: Option<String>) {
        *self.slot_mut(kind) = target;
    }

    fn slot(&self, kind: Forward) -> &Option<String> {
        match kind {
            Forward::Always => &self.always,
            Forward::Busy => &self.busy,
            Forward::NoAnswer => &self.noanswer,
        }
    }

    fn slot_mut(&mut self, kind: Forward) -> &mut Option<String> {
        match kind {
            Forward::Always => &mut self.always,
            Forward::Busy => &mut self.busy,
            Forward::NoAnswer => &mut self.noanswer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_clear_each_kind_and_names_round_trip() {
        let mut f = Forwarding::default();
        f.set(Forward::Busy, Some("2001".into()));
        assert_eq!(f.target(Forward::Busy), Some("2001"));
        assert_eq!(f.target(Forward::Always), None);
        assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"busy":"2001"}"#);
        f.set(Forward::Busy, None);
        assert!(f.is_empty());
        for k in Forward::ALL {
            assert_eq!(Forward::from_name(k.name()), Some(k));
        }
        assert_eq!(Forward::from_name("sometimes"), None);
    }
}
