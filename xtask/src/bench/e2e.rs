//! End-to-end prompt processing (pp512) and generation (tg128) through the
//! llama crate's context API. The context does not exist yet; until it does
//! this suite reports that it is unavailable.

use super::report::Row;
use super::{BenchOptions, Suite};
use crate::error::{Error, Result};

/// pp512 / tg128.
pub struct Generation;

impl Suite for Generation {
    fn name(&self) -> &'static str {
        "e2e"
    }

    fn run(&self, _opts: &BenchOptions) -> Result<Vec<Row>> {
        Err(Error::Unavailable(
            "the e2e bench (pp512/tg128) needs the llama crate's context API \
             (Model::load, Context::new, decode), which is not implemented yet"
                .into(),
        ))
    }
}
