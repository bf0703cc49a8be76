//! `baesrv`: the BAE session server (see `io_smol::app`).

fn main() {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    std::process::exit(io_smol::app::main_with_args(&args));
}
