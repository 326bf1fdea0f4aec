//! ADD, MUL and DIV with src1 broadcast over src0 (ggml's repeat semantics).

use ggml_core::Result;

use crate::compute::{par_rows, NodeCtx};

/// The element-wise operation.
#[derive(Clone, Copy, Debug)]
pub(crate) enum BinOp {
    Add,
    Mul,
    Div,
}

/// `dst = src0 op src1`, src1 repeated over src0's shape.
pub(crate) fn binary(ctx: &NodeCtx<'_>, op: BinOp) -> Result<()> {
    let (a, b, d) = (&ctx.src[0], &ctx.src[1], &ctx.dst);
    let n = d.ne[0];
    let nb0 = b.ne[0];
    let (alias_a, alias_b) = (ctx.alias[0], ctx.alias[1]);
    par_rows(d.n_rows(), n, |rows, s| {
        for r in rows {
            let i = d.row_index(r);
            let ib = [i[0] % b.ne[1], i[1] % b.ne[2], i[2] % b.ne[3]];
            // SAFETY: row indices are in range for both sources (ib by
            // modulo); sources are only written through `dst` when aliased,
            // and aliased rows are copied first.
            let x = unsafe { a.read_row(i, alias_a, &mut s.a)? };
            // SAFETY: as above.
            let y = unsafe { b.read_row(ib, alias_b, &mut s.b)? };
            let body = |out: &mut [f32]| {
                if nb0 == n {
                    match op {
                        BinOp::Add => {
                            for ((o, &p), &q) in out.iter_mut().zip(x).zip(y) {
                                *o = p + q;
                            }
                        }
                        BinOp::Mul => {
                            for ((o, &p), &q) in out.iter_mut().zip(x).zip(y) {
                                *o = p * q;
                            }
                        }
                        BinOp::Div => {
                            for ((o, &p), &q) in out.iter_mut().zip(x).zip(y) {
                                *o = p / q;
                            }
                        }
                    }
                } else {
                    for (k, (o, &p)) in out.iter_mut().zip(x).enumerate() {
                        let q = y[k % nb0];
                        *o = match op {
                            BinOp::Add => p + q,
                            BinOp::Mul => p * q,
                            BinOp::Div => p / q,
                        };
                    }
                }
            };
            // SAFETY: each row of the result is written by one task only.
            unsafe { d.write_row(i, &mut s.c, body)? };
        }
        Ok(())
    })
}
