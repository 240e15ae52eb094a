//! The output log. (being written)
