//! Puts the bundle's files into its folder: executables (stripped), the
//! model, the text, `run.sh`, a README and the build facts; then checks the
//! folder's size against the limit.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// The script that runs the checks and benchmarks on the target machine.
pub const RUN_SH: &str = include_str!("../../bundle/run.sh");
/// What the bundle is and how to run it.
pub const README: &str = include_str!("../../bundle/README.md");
/// The text `run.sh` measures perplexity on.
pub const STORY: &str = include_str!("../../bundle/story.txt");

/// The size limit of a bundle: small enough to copy anywhere quickly.
pub const DEFAULT_LIMIT_BYTES: u64 = 60 << 20;

/// One file to copy into the bundle.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Where it is now.
    pub from: PathBuf,
    /// Its path inside the bundle (`bin/llama-cli`).
    pub to: PathBuf,
}

impl Entry {
    /// `from` copied to `to` (a path relative to the bundle's root).
    pub fn new(from: impl Into<PathBuf>, to: impl Into<PathBuf>) -> Entry {
        Entry {
            from: from.into(),
            to: to.into(),
        }
    }
}

/// Everything a bundle holds besides the files written from this crate.
#[derive(Clone, Debug)]
pub struct Contents {
    /// Executables, stripped on the way in.
    pub executables: Vec<Entry>,
    /// Data files copied as they are (the model).
    pub data: Vec<Entry>,
    /// `BUILD_INFO`: one fact a line (`commit: ...`), copied into the report.
    pub build_info: String,
}

/// How to assemble.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The `strip` program (run as `STRIP --strip-all FILE` on each copied
    /// executable); `None` copies them as they are.
    pub strip: Option<PathBuf>,
    /// The largest total size allowed.
    pub limit_bytes: u64,
}

/// What [`assemble`] made.
#[derive(Clone, Debug)]
pub struct Assembled {
    /// Every file of the bundle (relative path, bytes), sorted by path.
    pub files: Vec<(PathBuf, u64)>,
    /// Their total size.
    pub total_bytes: u64,
}

impl Assembled {
    /// A listing: one line per file with its size, then the total.
    pub fn listing(&self) -> String {
        let mut s = String::new();
        for (p, b) in &self.files {
            s.push_str(&format!("{:>10.2} MiB  {}\n", mib(*b), p.display()));
        }
        s.push_str(&format!("{:>10.2} MiB  total\n", mib(self.total_bytes)));
        s
    }
}

/// Bytes in MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// Checks that `out` can take a new bundle: it does not exist yet, or it is
/// an empty folder. Anything else is an error that says what is there.
pub fn check_out_dir(out: &Path) -> Result<()> {
    match fs::symlink_metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(out, e)),
        Ok(m) if !m.is_dir() => Err(Error::Usage(format!(
            "--out '{}' exists and is not a folder; name a new or empty folder",
            out.display()
        ))),
        Ok(_) => {
            let mut entries = fs::read_dir(out).map_err(|e| Error::io(out, e))?;
            if entries.next().is_some() {
                return Err(Error::Usage(format!(
                    "--out '{}' is not empty; remove it or name a new folder",
                    out.display()
                )));
            }
            Ok(())
        }
    }
}

/// Assembles the bundle in `out` (new or empty): the executables of
/// `contents` stripped into place, its data files, `run.sh`, `README.md`,
/// `texts/story.txt` and `BUILD_INFO`. Fails when a source is missing, a
/// strip fails or the result is larger than `settings.limit_bytes` (the
/// folder is left for inspection then).
pub fn assemble(contents: &Contents, out: &Path, settings: &Settings) -> Result<Assembled> {
    check_out_dir(out)?;
    for e in contents.executables.iter().chain(&contents.data) {
        if e.to.is_absolute() || e.to.components().any(|c| c.as_os_str() == "..") {
            return Err(Error::Usage(format!(
                "bundle path '{}' must be relative and stay inside the bundle",
                e.to.display()
            )));
        }
        if !e.from.is_file() {
            return Err(Error::Bundle(format!(
                "'{}' (for {}) is not a file",
                e.from.display(),
                e.to.display()
            )));
        }
    }
    fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    for e in &contents.executables {
        let dest = copy(&e.from, out, &e.to)?;
        if let Some(strip) = &settings.strip {
            run_strip(strip, &dest)?;
        }
        make_executable(&dest)?;
    }
    for e in &contents.data {
        copy(&e.from, out, &e.to)?;
    }
    write(out, "run.sh", RUN_SH)?;
    make_executable(&out.join("run.sh"))?;
    write(out, "README.md", README)?;
    write(out, "texts/story.txt", STORY)?;
    write(out, "BUILD_INFO", &contents.build_info)?;
    let assembled = survey(out)?;
    if assembled.total_bytes > settings.limit_bytes {
        return Err(Error::Bundle(format!(
            "'{}' holds {:.2} MiB, over the limit of {:.2} MiB (left there for inspection):\n{}",
            out.display(),
            mib(assembled.total_bytes),
            mib(settings.limit_bytes),
            assembled.listing()
        )));
    }
    Ok(assembled)
}

/// Copies `from` to `out/to`, making its folder; the destination.
fn copy(from: &Path, out: &Path, to: &Path) -> Result<PathBuf> {
    let dest = out.join(to);
    if let Some(dir) = dest.parent() {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    if dest.exists() {
        return Err(Error::Bundle(format!(
            "two files go to '{}' in the bundle",
            to.display()
        )));
    }
    fs::copy(from, &dest).map_err(|e| Error::io(from, e))?;
    Ok(dest)
}

/// Writes `text` to `out/to`.
fn write(out: &Path, to: &str, text: &str) -> Result<()> {
    let dest = out.join(to);
    if let Some(dir) = dest.parent() {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    fs::write(&dest, text).map_err(|e| Error::io(&dest, e))
}

/// Runs `strip --strip-all FILE`.
fn run_strip(strip: &Path, file: &Path) -> Result<()> {
    let line = format!("{} --strip-all {}", strip.display(), file.display());
    let status = Command::new(strip)
        .arg("--strip-all")
        .arg(file)
        .status()
        .map_err(|e| Error::Command {
            command: line.clone(),
            reason: format!(
                "could not start (is binutils installed? --strip names another program): {e}"
            ),
        })?;
    crate::exited_ok(line, status)
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).map_err(|e| Error::io(path, e))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<()> {
    Ok(())
}

/// Every file under `root` with its size, sorted by path.
pub fn survey(root: &Path) -> Result<Assembled> {
    let mut files = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        for entry in fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let meta = entry.metadata().map_err(|e| Error::io(entry.path(), e))?;
            let rel = rel.join(entry.file_name());
            if meta.is_dir() {
                stack.push(rel);
            } else {
                files.push((rel, meta.len()));
            }
        }
    }
    files.sort();
    let total_bytes = files.iter().map(|(_, b)| b).sum();
    Ok(Assembled { files, total_bytes })
}
