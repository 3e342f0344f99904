//! switch
