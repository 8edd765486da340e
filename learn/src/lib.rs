//! Placeholder: filled in by the learn crate work.
