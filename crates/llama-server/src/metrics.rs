//! Counters of the server, printed in Prometheus' text format at `/metrics`
//! with llama.cpp's metric names.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters updated by the engine.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Prompt tokens processed (not those reused from the cache).
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens reused from the slots' caches.
    pub prompt_tokens_cached: AtomicU64,
    /// Longest sequence seen (prompt and generated tokens).
    pub n_tokens_max: AtomicU64,
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
    /// Tokens proposed by speculation and verified.
    pub spec_draft_tokens: AtomicU64,
    /// Proposed tokens the model agreed with.
    pub spec_accepted_tokens: AtomicU64,
    /// Verifications of a proposal.
    pub spec_drafts: AtomicU64,
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
        let rate = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        // llama.cpp's names, help texts and order: counters, then gauges.
        let rows: [(&str, &str, &str, f64); 15] = [
            (
                "prompt_tokens_total",
                "counter",
                "Number of prompt tokens processed, excluding cached tokens",
                prompt as f64,
            ),
            (
                "prompt_tokens_cached_total",
                "counter",
                "Number of prompt tokens reused from the cache",
                g(&self.prompt_tokens_cached) as f64,
            ),
            (
                "prompt_seconds_total",
                "counter",
                "Total time spent processing prompts",
                p_s,
            ),
            (
                "tokens_predicted_total",
                "counter",
                "Number of generation tokens processed",
                predicted as f64,
            ),
            (
                "tokens_predicted_seconds_total",
                "counter",
                "Total time spent generating tokens",
                g_s,
            ),
            (
                "n_decode_total",
                "counter",
                "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
                n_decode as f64,
            ),
            (
                "n_tokens_max",
                "counter",
                "Largest observed sequence length (prompt + generation)",
                g(&self.n_tokens_max) as f64,
            ),
            (
                "spec_decode_num_draft_tokens_total",
                "counter",
                "Speculative: Total draft tokens generated",
                g(&self.spec_draft_tokens) as f64,
            ),
            (
                "spec_decode_num_accepted_tokens_total",
                "counter",
                "Speculative: Total draft tokens accepted by the target model",
                g(&self.spec_accepted_tokens) as f64,
            ),
            (
                "spec_decode_num_drafts_total",
                "counter",
                "Speculative: Total speculative decoding verification steps",
                g(&self.spec_drafts) as f64,
            ),
            (
                "prompt_tokens_seconds",
                "gauge",
                "Average prompt throughput in tokens/s",
                rate(prompt, p_s),
            ),
            (
                "predicted_tokens_seconds",
                "gauge",
                "Average generation throughput in tokens/s",
                rate(predicted, g_s),
            ),
            (
                "requests_processing",
                "gauge",
                "Number of requests processing",
                g(&self.processing) as f64,
            ),
            (
                "requests_deferred",
                "gauge",
                "Number of requests deferred",
                deferred as f64,
            ),
            (
                "n_busy_slots_per_decode",
                "gauge",
                "Average number of busy slots per llama_decode() call",
                g(&self.n_busy_slots_sum) as f64 / n_decode.max(1) as f64,
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
