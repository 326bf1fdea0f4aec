//! Counters of the server, printed in Prometheus' text format at `/metrics`
//! with llama.cpp's metric names.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters updated by the engine.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Prompt tokens processed.
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub predicted_tokens: AtomicU64,
    /// Microseconds spent in batches that held prompt tokens.
    pub prompt_us: AtomicU64,
    /// Microseconds spent in batches of generated tokens only.
    pub predicted_us: AtomicU64,
    /// Decode calls.
    pub n_decode: AtomicU64,
    /// Sum over decode calls of the slots they served.
    pub n_busy_slots_sum: AtomicU64,
    /// Tasks started in a slot.
    pub requests: AtomicU64,
    /// Slots running a task now.
    pub processing: AtomicU64,
}

impl Metrics {
    /// Accounts a decode of `n_prompt` prompt and `n_gen` generated tokens.
    pub fn add_time(&self, n_prompt: usize, n_gen: usize, secs: f64) {
        let us = (secs * 1e6) as u64;
        if n_prompt > 0 {
            self.prompt_us.fetch_add(us, Ordering::Relaxed);
        } else if n_gen > 0 {
            self.predicted_us.fetch_add(us, Ordering::Relaxed);
        }
    }

    /// The Prometheus exposition, with `deferred` tasks waiting for a slot.
    pub fn render(&self, deferred: usize) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let prompt = g(&self.prompt_tokens);
        let predicted = g(&self.predicted_tokens);
        let p_s = g(&self.prompt_us) as f64 / 1e6;
        let g_s = g(&self.predicted_us) as f64 / 1e6;
        let n_decode = g(&self.n_decode);
        let rows: [(&str, &str, &str, f64); 9] = [
            (
                "prompt_tokens_total",
                "counter",
                "Number of prompt tokens processed.",
                prompt as f64,
            ),
            (
                "prompt_seconds_total",
                "counter",
                "Prompt process time",
                p_s,
            ),
            (
                "tokens_predicted_total",
                "counter",
                "Number of generation tokens processed.",
                predicted as f64,
            ),
            (
                "tokens_predicted_seconds_total",
                "counter",
                "Predict process time",
                g_s,
            ),
            (
                "n_decode_total",
                "counter",
                "Total number of llama_decode() calls",
                n_decode as f64,
            ),
            (
                "n_busy_slots_per_decode",
                "counter",
                "Average number of busy slots per llama_decode() call",
                g(&self.n_busy_slots_sum) as f64 / n_decode.max(1) as f64,
            ),
            (
                "predicted_tokens_seconds",
                "gauge",
                "Average generation throughput in tokens/s.",
                if g_s > 0.0 {
                    predicted as f64 / g_s
                } else {
                    0.0
                },
            ),
            (
                "requests_processing",
                "gauge",
                "Number of requests processing.",
                g(&self.processing) as f64,
            ),
            (
                "requests_deferred",
                "gauge",
                "Number of requests deferred.",
                deferred as f64,
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            let _ = writeln!(out, "# HELP llamacpp:{name} {help}");
            let _ = writeln!(out, "# TYPE llamacpp:{name} {kind}");
            let _ = writeln!(out, "llamacpp:{name} {value}");
        }
        out
    }
}
