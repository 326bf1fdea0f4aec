//! `/slots/{id}?action=save|restore|erase` on the engine thread: a slot's
//! tokens and sequence state written to a file, read back (refused when the
//! file was written by another model, with the slot left empty), or
//! forgotten. A slot that runs a task is left alone.

use std::time::Instant;

use super::slots::Engine;
use super::task::{Event, SlotAction, SlotOutcome, Task, TaskKind};

impl Engine<'_> {
    /// Runs a slot action and answers it.
    pub(super) fn slot_action(&mut self, task: Task) {
        let TaskKind::Slot(action) = &task.kind else {
            return;
        };
        let reply = self.run_slot_action(action);
        self.publish();
        let event = match reply {
            Ok(o) => Event::Slot(o),
            Err(e) => Event::Error(e),
        };
        task.out.send(event).ok();
    }

    fn run_slot_action(&mut self, action: &SlotAction) -> Result<SlotOutcome, String> {
        let slot = match action {
            SlotAction::Save { slot, .. }
            | SlotAction::Restore { slot, .. }
            | SlotAction::Erase { slot } => *slot,
        };
        if slot >= self.caches.len() {
            return Err(format!(
                "invalid slot id {slot}: the server has {} slots",
                self.caches.len()
            ));
        }
        if self.is_busy(slot) {
            return Err(format!("slot {slot} is processing a task"));
        }
        let t0 = Instant::now();
        let seq = slot as i32;
        let (n_tokens, n_bytes) = match action {
            SlotAction::Save { path, .. } => {
                let tokens = self.caches[slot].tokens.clone();
                let n = self
                    .ctx
                    .state_seq_save_file(path, seq, &tokens)
                    .map_err(|e| format!("cannot save slot {slot}: {e}"))?;
                (tokens.len(), n)
            }
            SlotAction::Restore { path, .. } => {
                self.caches[slot].tokens.clear();
                // Checkpoints of what the slot held are not of the file's.
                self.caches[slot].checkpoints.clear();
                match self.ctx.state_seq_load_file(path, seq) {
                    Ok((tokens, n)) => {
                        let held = self.ctx.seq_pos_max(seq) + 1;
                        if held != tokens.len() as i32 {
                            self.forget(slot);
                            return Err(format!(
                                "cannot restore slot {slot}: the file holds {} tokens but a state of {held} positions",
                                tokens.len()
                            ));
                        }
                        if tokens.len() >= self.n_ctx_slot {
                            self.forget(slot);
                            return Err(format!(
                                "cannot restore slot {slot}: the file holds {} tokens; the slot's context holds {}",
                                tokens.len(),
                                self.n_ctx_slot
                            ));
                        }
                        let n_tokens = tokens.len();
                        self.caches[slot].tokens = tokens;
                        (n_tokens, n)
                    }
                    Err(e) => {
                        self.forget(slot);
                        return Err(format!("cannot restore slot {slot}: {e}"));
                    }
                }
            }
            SlotAction::Erase { .. } => {
                let n = self.caches[slot].tokens.len();
                self.forget(slot);
                (n, 0)
            }
        };
        Ok(SlotOutcome {
            n_tokens,
            n_bytes,
            ms: t0.elapsed().as_secs_f64() * 1e3,
        })
    }
}
