//! The daemon. (being written)
