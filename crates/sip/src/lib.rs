//! sip
