//! `baectl`: admin CLI of baesrv (see `io_smol::ctl` and
//! `docs/operations.md`).

fn main() {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    std::process::exit(io_smol::ctl::main_with_args(&args));
}
