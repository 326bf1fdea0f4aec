//! `rpc-server`: serves this machine's CPU (or Vulkan) devices to one
//! llama.cpp-compatible RPC client at a time.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use ggml_core::{registry, Device};

const USAGE: &str = "usage: rpc-server [options]

  -H, --host HOST      address to listen on (default 127.0.0.1)
  -p, --port PORT      port to listen on (default 50052; 0 picks a free one)
  -d, --device LIST    comma-separated devices to serve (default: the first
                       GPU, else the CPU); see --list-devices
  -t, --threads N      compute threads (default: the CPU cores)
  -c, --cache          keep a cache of uploaded weights in the cache folder
                       ($LLAMA_CACHE/rpc, else ~/.cache/llama.cpp/rpc)
  -m, --mem MIB        most MiB of buffers a client may hold at once (default:
                       the device's memory); past it an allocation is
                       refused to that client, and the memory reported to
                       clients is at most this
      --frame-timeout S  seconds a client may stall in the middle of a
                       frame or before taking a response before it is
                       dropped (default 30); between frames it may wait
      --list-devices   print the devices and exit
  -h, --help           this text
";

struct Args {
    host: String,
    port: u16,
    devices: Option<String>,
    threads: usize,
    cache: bool,
    mem: Option<u64>,
    frame_timeout: std::time::Duration,
    list: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        host: "127.0.0.1".into(),
        port: 50052,
        devices: None,
        threads: ggml_cpu::default_n_threads(),
        cache: false,
        mem: None,
        frame_timeout: ggml_rpc::server::FRAME_TIMEOUT,
        list: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "-H" | "--host" => a.host = val()?,
            "-p" | "--port" => {
                let v = val()?;
                a.port = v.parse().map_err(|_| format!("invalid port '{v}'"))?
            }
            "-d" | "--device" => a.devices = Some(val()?),
            "-t" | "--threads" => {
                let v = val()?;
                a.threads = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("invalid thread count '{v}'"))?
            }
            "-c" | "--cache" => a.cache = true,
            "-m" | "--mem" => {
                let v = val()?;
                a.mem = Some(
                    v.parse::<u64>()
                        .ok()
                        .filter(|&n| n > 0)
                        .and_then(|n| n.checked_mul(1 << 20))
                        .ok_or_else(|| format!("invalid memory size '{v}' (MiB, at least 1)"))?,
                );
            }
            "--frame-timeout" => {
                let v = val()?;
                a.frame_timeout = v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
                    .map(std::time::Duration::from_secs_f64)
                    .ok_or_else(|| format!("invalid timeout '{v}' (seconds, more than 0)"))?;
            }
            "--list-devices" => a.list = true,
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}'\n\n{USAGE}")),
        }
    }
    Ok(a)
}

fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LLAMA_CACHE") {
        return PathBuf::from(d).join("rpc");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache").join("llama.cpp").join("rpc")
}

fn pick_devices(list: Option<&str>) -> Result<Vec<Arc<dyn Device>>, String> {
    let all = registry::devices();
    match list {
        Some(l) => l
            .split(',')
            .map(|n| {
                registry::device_by_name(n.trim()).ok_or_else(|| {
                    let names: Vec<_> = all.iter().map(|d| d.name().to_string()).collect();
                    format!("unknown device '{n}': available are {}", names.join(", "))
                })
            })
            .collect(),
        None => {
            let gpu = all
                .iter()
                .find(|d| d.kind() == ggml_core::DeviceKind::Gpu)
                .or_else(|| all.iter().find(|d| d.kind() == ggml_core::DeviceKind::Cpu));
            gpu.cloned()
                .map(|d| vec![d])
                .ok_or_else(|| "no device to serve".to_string())
        }
    }
}

fn run() -> Result<(), String> {
    let args = parse()?;
    #[cfg(feature = "vulkan")]
    ggml_vulkan::register();
    ggml_cpu::register();
    if args.list {
        for line in registry::device_lines() {
            println!("{line}");
        }
        return Ok(());
    }
    let devices = pick_devices(args.devices.as_deref())?;
    let cache = args.cache.then(cache_dir);
    let (ma, mi, pa) = ggml_rpc::proto::PROTO_VERSION;
    println!("Starting RPC server v{ma}.{mi}.{pa}");
    println!("  endpoint       : {}:{}", args.host, args.port);
    println!(
        "  local cache    : {}",
        cache
            .as_ref()
            .map_or("n/a".into(), |c| c.display().to_string())
    );
    if let Some(m) = args.mem {
        println!("  memory limit   : {} MiB per client", m >> 20);
    }
    println!("Devices:");
    for d in &devices {
        let (free, total) = d.memory();
        println!(
            "  {}: {} ({} MiB, {} MiB free)",
            d.name(),
            d.description(),
            total >> 20,
            free >> 20
        );
    }
    let listener = ggml_rpc::server::bind(&args.host, args.port).map_err(|e| e.to_string())?;
    let mut server = ggml_rpc::Server::new(devices, args.threads, cache)
        .map_err(|e| e.to_string())?
        .with_mem_limit(args.mem)
        .with_frame_timeout(args.frame_timeout);
    if let Ok(addr) = listener.local_addr() {
        // Tests start servers on port 0 and read the port from this line.
        println!("listening on {addr}");
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    server.run(&listener).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpc-server: {e}");
            ExitCode::FAILURE
        }
    }
}
