//! What the tools show while a model loads: on a terminal, a bar with the
//! bytes loaded, the rate and the time left, redrawn in place; otherwise
//! (a file, a pipe) llama.cpp's row of dots, one per 2.5 %.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::params::ProgressCallback;

const MIB: f64 = 1024.0 * 1024.0;
/// Width of the bar in characters.
const BAR: usize = 30;
/// Dots of the non-terminal form.
const DOTS: usize = 40;
/// Least time between two redraws of the bar.
const REDRAW: Duration = Duration::from_millis(100);

/// One line of the bar: `fraction` of `total` bytes done after `elapsed`.
pub fn bar_line(fraction: f32, total: u64, elapsed: Duration) -> String {
    let f = fraction.clamp(0.0, 1.0) as f64;
    let filled = (f * BAR as f64).round() as usize;
    let done = f * total as f64;
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { done / secs } else { 0.0 };
    let eta = if rate > 0.0 && f < 1.0 {
        format!("ETA {:.1} s", (total as f64 - done) / rate)
    } else if f >= 1.0 {
        format!("in {secs:.1} s")
    } else {
        "ETA --".to_string()
    };
    format!(
        "loading [{}{}] {:3.0}% {:.1}/{:.1} MiB {:.1} MiB/s {eta}",
        "=".repeat(filled),
        " ".repeat(BAR - filled),
        f * 100.0,
        done / MIB,
        total as f64 / MIB,
        rate / MIB
    )
}

/// A progress callback for loading `total` bytes of weights, drawing on
/// standard error: the bar when `terminal`, the dots otherwise.
pub fn load_progress(total: u64, terminal: bool) -> ProgressCallback {
    if terminal {
        let start = Instant::now();
        let last: Mutex<Option<Instant>> = Mutex::new(None);
        Arc::new(move |f: f32| {
            let now = Instant::now();
            let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
            let due = last.is_none_or(|t| now - t >= REDRAW);
            if due || f >= 1.0 {
                *last = Some(now);
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r{}", bar_line(f, total, now - start));
                if f >= 1.0 {
                    let _ = writeln!(err);
                }
                let _ = err.flush();
            }
            true
        })
    } else {
        let shown = AtomicUsize::new(0);
        Arc::new(move |f: f32| {
            let dots = (f.clamp(0.0, 1.0) * DOTS as f32) as usize;
            let prev = shown.swap(dots, Ordering::Relaxed);
            if dots > prev {
                eprint!("{}", ".".repeat(dots - prev));
                if f >= 1.0 {
                    eprintln!();
                }
            }
            true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_shows_bytes_rate_and_time_left() {
        let l = bar_line(0.5, 200 << 20, Duration::from_secs(2));
        assert!(l.contains("[===============               ]"), "{l}");
        assert!(
            l.contains(" 50% 100.0/200.0 MiB 50.0 MiB/s ETA 2.0 s"),
            "{l}"
        );
        let l = bar_line(1.0, 200 << 20, Duration::from_secs(4));
        assert!(
            l.contains("100% 200.0/200.0 MiB 50.0 MiB/s in 4.0 s"),
            "{l}"
        );
        let l = bar_line(0.0, 10, Duration::ZERO);
        assert!(l.contains("  0%") && l.contains("ETA --"), "{l}");
    }

    #[test]
    fn callbacks_never_cancel() {
        for terminal in [false, true] {
            let cb = load_progress(1000, terminal);
            assert!(cb(0.0) && cb(0.5) && cb(1.0));
        }
    }
}
