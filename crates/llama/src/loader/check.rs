//! `check_tensors`: validating tensor data as it loads, in parallel
//! batches of readable data or piece by piece out of staging memory; the
//! error names the first bad tensor in file order.

use super::*;

/// Bytes of tensor data gathered before a batch is validated.
pub(super) const CHECK_BATCH: usize = 64 << 20;

/// Largest part of a tensor one validation task takes: a staging buffer
/// splits into several.
pub(super) const CHECK_UNIT: usize = 256 << 10;

pub(super) fn validate(desc: &TensorDesc, data: &[u8]) -> Result<()> {
    ggml_core::quants::validate_row_data(desc.ty, data).map_err(|e| LlamaError::TensorData {
        name: desc.name.clone(),
        why: e.to_string(),
    })
}

/// Validates `data` in parallel parts of whole blocks. When a part is bad,
/// all of `data` is validated again in one piece, so that the indices in
/// the message count from the start of `data`.
pub(super) fn validate_parallel(desc: &TensorDesc, data: &[u8]) -> Result<()> {
    let unit = check_unit(desc);
    if data.len() <= unit {
        return validate(desc, data);
    }
    match data
        .par_chunks(unit)
        .find_first(|part| validate(desc, part).is_err())
    {
        None => Ok(()),
        Some(_) => validate(desc, data),
    }
}

/// Bytes of one validation task for `desc`: whole blocks, about [`CHECK_UNIT`].
pub(super) fn check_unit(desc: &TensorDesc) -> usize {
    let ts = desc.ty.type_size().max(1);
    (CHECK_UNIT / ts).max(1) * ts
}

/// Tensor data waiting to be validated. A batch is validated in parallel
/// and its first bad tensor in request (file) order is the one reported.
pub(super) struct Checks<'a> {
    pub(super) on: bool,
    pub(super) items: Vec<(usize, &'a [u8])>,
    pub(super) bytes: usize,
}

impl<'a> Checks<'a> {
    /// Adds the data of request `i`; validates the batch once it is large.
    pub(super) fn push(&mut self, reqs: &[WeightRequest], i: usize, data: &'a [u8]) -> Result<()> {
        if !self.on {
            return Ok(());
        }
        self.items.push((i, data));
        self.bytes += data.len();
        if self.bytes >= CHECK_BATCH {
            self.flush(reqs)?;
        }
        Ok(())
    }

    /// Validates everything gathered, in parallel over parts of tensors.
    pub(super) fn flush(&mut self, reqs: &[WeightRequest]) -> Result<()> {
        let items = std::mem::take(&mut self.items);
        self.bytes = 0;
        let mut parts: Vec<(usize, &[u8])> = Vec::new();
        for (k, &(i, data)) in items.iter().enumerate() {
            let unit = check_unit(&reqs[i].desc);
            if data.is_empty() {
                parts.push((k, data));
            } else {
                parts.extend(data.chunks(unit).map(|p| (k, p)));
            }
        }
        let bad = parts
            .par_iter()
            .find_first(|&&(k, part)| validate(&reqs[items[k].0].desc, part).is_err());
        match bad {
            None => Ok(()),
            Some(&(k, _)) => {
                let (i, data) = items[k];
                validate(&reqs[i].desc, data)
            }
        }
    }
}

/// Validates a piece of request `i` that starts `start` bytes into it; on
/// an error, earlier tensors waiting in `checks` are validated first, so
/// that the first bad tensor in file order is the one reported.
pub(super) fn check_piece(
    checks: &mut Checks<'_>,
    reqs: &[WeightRequest],
    i: usize,
    data: &[u8],
    start: usize,
) -> Result<()> {
    let Err(e) = validate_parallel(&reqs[i].desc, data) else {
        return Ok(());
    };
    checks.flush(reqs)?;
    Err(match e {
        LlamaError::TensorData { name, why } if data.len() != reqs[i].size => {
            LlamaError::TensorData {
                name,
                why: format!(
                    "{why} (counting from byte {start} of the tensor, in the piece of {} bytes read there)",
                    data.len()
                ),
            }
        }
        e => e,
    })
}
