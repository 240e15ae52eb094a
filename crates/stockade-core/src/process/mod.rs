//! Process trees. (being written)
