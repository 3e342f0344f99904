//! sdp
