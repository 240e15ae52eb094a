//! The daemon client. (being written)
