//! Saved sequence states: a real state of stories260K (a few decoded
//! tokens) damaged by the input (bytes changed, cut, grown), or the raw
//! input itself, restored into a context, whole or as a partial state (a
//! context checkpoint: the sliding-window and recurrent parts only). A
//! refused state is an error and leaves the sequence empty; an accepted one
//! can be decoded after.

#![no_main]

use std::cell::RefCell;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use llama::memory::StateParts;
use llama::{Batch, Context};

#[derive(Arbitrary, Debug)]
struct Input {
    partial: bool,
    body: Body,
}

#[derive(Arbitrary, Debug)]
enum Body {
    Damaged {
        patches: Vec<(u16, u8)>,
        cut: Option<u16>,
        tail: Vec<u8>,
    },
    Raw(Vec<u8>),
}

struct Fixture {
    ctx: Context<'static>,
    state: Vec<u8>,
    partial: Vec<u8>,
}

thread_local! {
    static FIX: RefCell<Option<Fixture>> = const { RefCell::new(None) };
}

fn fixture() -> Fixture {
    let model = llama_rs_fuzz::stories();
    let mut ctx = llama_rs_fuzz::context(model);
    let toks = [1, 400, 31, 7, 250];
    let mut b = Batch::new();
    for (i, &t) in toks.iter().enumerate() {
        b.add(t, i as i32, &[0], i + 1 == toks.len());
    }
    ctx.decode(&b).expect("decode");
    let state = ctx.state_seq_get_data(0, &toks).expect("state");
    let partial = ctx
        .state_seq_get_data_parts(0, &toks, StateParts::RollbackOnly)
        .expect("partial state");
    ctx.kv_clear();
    Fixture {
        ctx,
        state,
        partial,
    }
}

fuzz_target!(|input: Input| {
    FIX.with(|f| {
        let mut f = f.borrow_mut();
        let fx = f.get_or_insert_with(fixture);
        let (parts, saved) = if input.partial {
            (StateParts::RollbackOnly, &fx.partial)
        } else {
            (StateParts::All, &fx.state)
        };
        let data = match input.body {
            Body::Damaged { patches, cut, tail } => {
                let mut d = saved.clone();
                for (at, v) in patches {
                    if let Some(b) = d.get_mut(usize::from(at)) {
                        *b = v;
                    }
                }
                if let Some(c) = cut {
                    d.truncate(usize::from(c));
                }
                d.extend(tail);
                d
            }
            Body::Raw(d) => d,
        };
        let unchanged = data == *saved && !input.partial;
        match fx.ctx.state_seq_set_data_parts(1, &data, parts) {
            Ok(tokens) => {
                // The positions of a saved state are free (a patched one is
                // still a state, as in llama.cpp): only an unchanged state
                // must come back as it was saved.
                let max = fx.ctx.seq_pos_max(1);
                if unchanged {
                    assert_eq!(max, tokens.len() as i32 - 1, "restored positions");
                }
                assert!(
                    fx.ctx.seq_pos_min(1) <= max,
                    "positions of the restored sequence"
                );
                let mut b = Batch::new();
                b.add(2, max.saturating_add(1), &[1], true);
                // The next position decodes, unless the restored cells fill
                // the context or the position cannot follow: an error then.
                if let Err(e) = fx.ctx.decode(&b) {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("no room") || msg.contains("position"),
                        "decode after a restored state: {msg}"
                    );
                }
            }
            Err(_) => assert_eq!(fx.ctx.seq_pos_max(1), -1, "a refused state leaves nothing"),
        }
        fx.ctx.kv_clear();
    });
});
