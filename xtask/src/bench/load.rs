//! Model loading: a plain sequential read of the file (cold, after asking
//! the OS to drop it from the page cache, and warm) and the time to open,
//! map, parse and validate it with [`gguf::GgufFile::open`].

use std::fs::File;
use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::report::Row;
use super::{BenchOptions, Suite};
use crate::error::{Error, Result};
use crate::gen_model::shape::{Preset, Shape, ShapeOverrides};
use crate::gen_model::vocab::Vocab;
use crate::gen_model::{generate_file, ModelSpec, WriteSettings};

/// Read buffer of the sequential read.
const READ_BUF: usize = 8 << 20;
/// Warm reads; the best counts.
const WARM_READS: usize = 3;
/// GGUF opens; best and median are reported.
const OPENS: usize = 20;
const QUICK_OPENS: usize = 5;

/// The model to load: `--model`, or a generated one made once in the
/// output folder (tinyllama-1.1b shape in q4_0; two layers for `--quick`).
fn model_path(opts: &BenchOptions) -> Result<PathBuf> {
    if let Some(p) = &opts.model {
        if !p.is_file() {
            return Err(Error::Usage(format!(
                "--model '{}' is not a file",
                p.display()
            )));
        }
        return Ok(p.clone());
    }
    let (file, n_layer) = if opts.quick {
        ("load-tinyllama-1.1b-2layers-q4_0.gguf", Some(2))
    } else {
        ("load-tinyllama-1.1b-q4_0.gguf", None)
    };
    let path = opts.out_dir.join(file);
    if path.is_file() {
        return Ok(path);
    }
    std::fs::create_dir_all(&opts.out_dir).map_err(|e| Error::io(&opts.out_dir, e))?;
    eprintln!("load: generating {} (once) ...", path.display());
    let overrides = ShapeOverrides {
        n_layer,
        ..ShapeOverrides::default()
    };
    let shape = Shape::resolve(Preset::Tinyllama1_1b, &overrides)?;
    let spec = ModelSpec {
        vocab: Vocab::synthetic_spm(shape.n_vocab)?,
        shape,
        ty: "q4_0".parse()?,
        seed: 1,
        name: "load bench".into(),
        alignment: None,
    };
    generate_file(&spec, &WriteSettings::default(), &path)?;
    Ok(path)
}

/// Asks the OS to drop the file's pages from the page cache (written back
/// first, since only clean pages can be dropped). Returns false when the
/// platform has no way to ask.
fn drop_from_page_cache(file: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        if file.sync_data().is_err() {
            return false;
        }
        // SAFETY: posix_fadvise only reads its integer arguments; the
        // descriptor is open for the duration of the call.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        false
    }
}

/// Reads the whole file sequentially; returns (bytes, time).
fn read_all(path: &Path, cold: bool) -> Result<(u64, Duration, bool)> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let dropped = cold && drop_from_page_cache(&file);
    let mut buf = vec![0u8; READ_BUF];
    let mut total = 0u64;
    let start = Instant::now();
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        black_box(&buf[..n]);
        total += n as u64;
    }
    Ok((total, start.elapsed(), dropped))
}

fn gbs(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64().max(1e-9) / 1e9
}

/// Sequential read, cold and warm.
pub struct SequentialRead;

impl Suite for SequentialRead {
    fn name(&self) -> &'static str {
        "read"
    }

    fn run(&self, opts: &BenchOptions, _prior: &[Row]) -> Result<Vec<Row>> {
        let path = model_path(opts)?;
        let (bytes, cold, dropped) = read_all(&path, true)?;
        let mib = bytes >> 20;
        let name = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cold_note = if dropped {
            format!("{name}, {mib} MiB, 8 MiB reads after posix_fadvise(DONTNEED)")
        } else {
            format!("{name}, {mib} MiB, 8 MiB reads; page cache could not be dropped")
        };
        let mut warm = Duration::MAX;
        for _ in 0..WARM_READS {
            warm = warm.min(read_all(&path, false)?.1);
        }
        Ok(vec![
            Row::new(
                self.name(),
                "sequential cold",
                Some(1),
                gbs(bytes, cold),
                "GB/s",
                cold_note,
            ),
            Row::new(
                self.name(),
                "sequential warm",
                Some(1),
                gbs(bytes, warm),
                "GB/s",
                format!("{name}, {mib} MiB from the page cache, best of {WARM_READS}"),
            ),
        ])
    }
}

/// `GgufFile::open`: map, parse, validate.
pub struct GgufOpen;

impl Suite for GgufOpen {
    fn name(&self) -> &'static str {
        "gguf"
    }

    fn run(&self, opts: &BenchOptions, _prior: &[Row]) -> Result<Vec<Row>> {
        let path = model_path(opts)?;
        let n = if opts.quick { QUICK_OPENS } else { OPENS };
        let mut times = Vec::with_capacity(n);
        let mut info = (0, 0);
        for _ in 0..n {
            let start = Instant::now();
            let f = gguf::GgufFile::open(&path)?;
            times.push(start.elapsed());
            info = (f.tensors().len(), f.metadata().len());
        }
        times.sort();
        let ms = |t: Duration| t.as_secs_f64() * 1e3;
        let note = format!(
            "{} tensors, {} keys, {n} opens (warm cache)",
            info.0, info.1
        );
        Ok(vec![
            Row::new(
                self.name(),
                "GgufFile::open best",
                None,
                ms(times[0]),
                "ms",
                note.clone(),
            ),
            Row::new(
                self.name(),
                "GgufFile::open median",
                None,
                ms(times[n / 2]),
                "ms",
                note,
            ),
        ])
    }
}
