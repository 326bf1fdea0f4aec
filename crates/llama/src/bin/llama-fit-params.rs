//! llama-fit-params: the parameters `--fit` settles on for a model and
//! the free memory of the devices, printed as command-line flags to pass
//! to the other tools (as llama.cpp's tool of the same name prints them),
//! or with `--fit-print on` the exact memory plan of those parameters.

use std::process::ExitCode;

use llama::cli::CommonArgs;
use llama::fit::fitted_flags;
use llama::{LlamaError, Result};

const HELP: &str = "usage: llama-fit-params -m MODEL [options]

Prints the flags --fit chooses so that the model and its context fit the
free memory of every device less the target: -c N -ngl N, and -ts LIST and
-ot \"PATTERN=BUFFER_TYPE,...\" where they are needed. Nothing is loaded:
each candidate is the exact memory plan (weights, K, V, compute).

  -m, --model FILE          GGUF model (first part of a split model)
  -fitp, --fit-print on|off print the exact memory plan of the fitted
                            parameters instead of the flags (default off)
  -fit, --fit on|off        fit (default on; off prints the plan as given)
  -fitt, --fit-target MiB   memory to leave free per device (default 1024)
  -fitc, --fit-ctx N        smallest context the fit may choose (default 4096)
  -c, -ngl, -ts, -dev, -ot, -cmoe, -ncmoe, -ub, -b, -ctk, -ctv, -fa, -lm ...
                            as for llama-cli: what is given is kept, what is
                            left at its default is fitted
  -h, --help";

/// Removes `-fitp/--fit-print VALUE` from `rest`: whether to print the plan.
fn take_fit_print(rest: &mut Vec<String>) -> Result<bool> {
    let Some(i) = rest.iter().position(|a| a == "-fitp" || a == "--fit-print") else {
        return Ok(false);
    };
    let flag = rest.remove(i);
    if i >= rest.len() {
        return Err(LlamaError::InvalidParam(format!(
            "{flag} needs a value: on or off"
        )));
    }
    match rest.remove(i).as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        v => Err(LlamaError::InvalidParam(format!(
            "{flag} '{v}': expected on or off"
        ))),
    }
}

fn run() -> Result<()> {
    let mut args = CommonArgs::parse(std::env::args().skip(1))?;
    if args.rest.iter().any(|a| a == "-h" || a == "--help") {
        println!("{HELP}");
        return Ok(());
    }
    let fit_print = take_fit_print(&mut args.rest)?;
    args.reject_rest()?;
    let path = args.model_path()?.to_string();
    if !std::path::Path::new(&path).is_file() {
        return Err(LlamaError::InvalidParam(format!(
            "model file '{path}' does not exist"
        )));
    }
    let plan = args.fit_params()?;
    if fit_print {
        print!("{plan}");
    } else {
        if !args.log_disable {
            eprint!("{plan}");
        }
        println!("{}", fitted_flags(&plan, &args.model_params));
    }
    Ok(())
}

fn main() -> ExitCode {
    llama::cli::exit_code(run())
}
