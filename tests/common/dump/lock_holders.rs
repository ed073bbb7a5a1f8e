//! The `LOCK.HOLDERS` reply, parsed with its tokens as bytes: the parser is
//! `common::holds`'s, under the names the `DUMP` tests use.

#[allow(unused_imports)]
pub use crate::common::holds::{
    holders_raw as holders, parse_holders_raw as parse_holders, Holder,
};
