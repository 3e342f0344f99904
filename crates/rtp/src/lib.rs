//! rtp
